"""The tool side of a worker: `python -m stacktool.bench WORKER OUT.json ...` under the venv's
Python (the tool's own Python has no torch), its JSON result read back."""

import json
import os
import subprocess
import tempfile
from pathlib import Path

from stacktool.bench.common import say
from stacktool.config import Layout
from stacktool.suites import INDUCTOR_CACHE, NO_BYTECODE, PYCACHE

# Every worker is CPU-only. torch.utils.cpp_extension (imported by torch.utils.benchmark,
# inductor and upstream's test utilities) looks for a CUDA toolkit when imported and, finding
# one (nvcc on PATH) without a CUDA runtime, prints "No CUDA runtime is found" to stderr.
# Empty CUDA_HOME / CUDA_PATH say "no toolkit" (_find_cuda_home takes them without searching).
WORKER_ENV = {"CUDA_HOME": "", "CUDA_PATH": ""}


def spawn(layout: Layout, *args: str, env: dict[str, str | None] | None = None) -> bool:
    """Run a worker under the venv's Python; its stderr (progress, tracebacks) shows live.
    `env` adds to this process's environment; a None value removes the variable. torch.compile
    caches in the tree's own folder for the worker's ATEN_CPU_CAPABILITY and its bytecode goes
    to Layout.pycache (as suites.suite_env), never the shell's, unless `env` names one."""
    cache = (env or {}).get(INDUCTOR_CACHE)
    bytecode = {NO_BYTECODE: None, PYCACHE: str(layout.pycache)}
    env = {**os.environ, **layout.python_env, **WORKER_ENV, **bytecode, **(env or {})}
    env = {name: value for name, value in env.items() if value is not None}
    env[INDUCTOR_CACHE] = cache or str(layout.inductor_cache(env.get("ATEN_CPU_CAPABILITY")))
    proc = subprocess.run(
        [str(layout.python), "-m", "stacktool.bench", *args], cwd=layout.root, env=env
    )
    return proc.returncode == 0


def worker(layout: Layout, command: str, *args: str, env: dict[str, str | None] | None = None):
    """A worker's JSON result, or None (said on stderr) when it failed."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        if spawn(layout, command, str(out), *args, env=env):
            return json.loads(out.read_text())
    say(f"the {command} worker failed ({' '.join(args)})")
    return None
