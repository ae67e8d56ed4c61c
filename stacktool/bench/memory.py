"""The memory worker: peak RSS growth over one forward+backward of one method at MEMORY_SIZE,
in a fresh process per method (a clean high-water mark needs one)."""

import gc
import re
from pathlib import Path

from stacktool.bench.attn import inputs, load_torch, train_step
from stacktool.bench.common import METHODS

MEMORY_SIZE = (2048, 64, 64)
# Warm-up before the memory reading: large enough that MKL's GEMM buffers and autograd's
# lazily built state exist, small enough (256 KB per n x n tensor) to leave nothing behind
# that the measured run could reuse instead of growing.
MEMORY_WARM_SIZE = (256, 64, 64)
# glibc's mmap threshold adapts to past frees, so whether a freed n x n buffer stays resident
# (and is reused without growing RSS) depends on history: peak RSS growth then moves by whole
# buffers from run to run. A fixed threshold mmaps every large tensor and unmaps it on free,
# so the growth is the peak of live tensor memory, the same in every run.
MEMORY_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}
# "unfused": native torch.attn at float32 matmul precision "medium", where PR 6's kernel steps
# aside for float (attn_uses_cpu_kernel in Attn.cpp) and PR 4's unfused kernel and derivative
# run, with oneDNN off: v2.6.0's CPU mm is then the BLAS path it takes at "highest" ("medium"
# alone may send it to oneDNN's bf32 kernels).
MEMORY_METHODS = (*METHODS, "unfused")


def output_mb(size) -> float:
    """MB of attn's n x n float32 output a at this size: computed, not measured (what peak
    memory is held to when nothing n x n but a is allocated)."""
    return size[0] * size[0] * 4 / 2**20


def memory_kb() -> dict[str, int]:
    status = Path("/proc/self/status").read_text()
    return {key: int(kb) for key, kb in re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", status, re.M)}


def memory_worker(fork: Path, method: str) -> dict:
    """MB of peak RSS growth over one forward+backward of `method` at MEMORY_SIZE.

    torch.compile is compiled with dynamic shapes here, so that the warm-up's graph serves the
    measured size and no compilation happens inside the measurement.
    """
    torch, methods = load_torch(fork, with_function=method == "function")
    if method == "unfused":
        torch.set_float32_matmul_precision("medium")
        torch.backends.mkldnn.enabled = False
    compiled = {"compile": "composite", "compile_attn": "native"}
    fn = (
        torch.compile(methods[compiled[method]], dynamic=True)
        if method in compiled
        else methods["native" if method == "unfused" else method]
    )
    train_step(torch, fn, *inputs(torch, MEMORY_WARM_SIZE, grad=True))()
    torch._dynamo.config.error_on_recompile = True  # a compile would be counted as the step's
    step = train_step(torch, fn, *inputs(torch, MEMORY_SIZE, grad=True))
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = memory_kb()["VmRSS"]
    step()
    return {"method": method, "mb": (memory_kb()["VmHWM"] - before) / 1024}
