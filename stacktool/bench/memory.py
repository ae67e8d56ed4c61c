"""The memory worker: peak RSS growth over one forward+backward of one method at MEMORY_SIZE,
in a fresh process per method (a clean high-water mark needs one)."""

import gc
import re
from pathlib import Path

from stacktool.bench.attn import floor_step, inputs, load_torch, train_step
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
# "unfused": the ATen calls of PR 4's unfused kernel and derivative (the floor's step: attn and
# the n x n gradient of x = q k^T alive together), which torch.attn makes at no setting from
# PR 6 on (its CPU kernel takes float at every matmul precision).
MEMORY_METHODS = (*METHODS, "unfused")


def output_mb(size) -> float:
    """MB of attn's n x n float32 output a at this size: computed, not measured (what peak
    memory is held to when nothing n x n but a is allocated)."""
    return size[0] * size[0] * 4 / 2**20


def memory_kb() -> dict[str, int]:
    status = Path("/proc/self/status").read_text()
    return {key: int(kb) for key, kb in re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", status, re.M)}


def memory_worker(fork: Path, method: str) -> dict:
    """MB of peak RSS growth over one forward+backward of `method` at MEMORY_SIZE, and the
    torch file it ran.

    torch.compile is compiled with dynamic shapes here, so that the warm-up's graph serves the
    measured size and no compilation happens inside the measurement.
    """
    torch, methods = load_torch(fork, with_function=method == "function")
    compiled = {"compile": "composite", "compile_attn": "native"}
    if method == "unfused":
        make_step = floor_step
    else:
        fn = (
            torch.compile(methods[compiled[method]], dynamic=True)
            if method in compiled
            else methods[method]
        )

        def make_step(torch, *tensors):
            return train_step(torch, fn, *tensors)

    make_step(torch, *inputs(torch, MEMORY_WARM_SIZE, grad=True))()
    torch._dynamo.config.error_on_recompile = True  # a compile would be counted as the step's
    step = make_step(torch, *inputs(torch, MEMORY_SIZE, grad=True))
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = memory_kb()["VmRSS"]
    step()
    mb = (memory_kb()["VmHWM"] - before) / 1024
    return {"method": method, "mb": mb, "torch_file": torch.__file__}
