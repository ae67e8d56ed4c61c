"""`./stack bench`: native torch.attn against the composite, PR 2's Function, torch.compile, a
floor and the GEMMs alone, at 1 thread and at all cores; PR 5's CPU tanh against v2.6.0's,
Sleef u10's and a plain copy.

Not a test: CPU timings move from run to run, so it reports numbers and the ratios its targets
name as measured, and exits 0 whatever they say (1 only when a worker crashed). The tool runs
under the system Python, which has no torch: `runner.run` spawns the venv's Python on this
package's workers (`python -m stacktool.bench timing|contended|memory|tanh|plot ...`, see
__main__.py), which import torch and matplotlib inside their functions, so every module stays
importable and testable without them.
"""

from stacktool.bench.runner import run

__all__ = ["run"]
