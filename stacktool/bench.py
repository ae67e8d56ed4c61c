"""`./stack bench`: native torch.attn against the composite, PR 2's Function, torch.compile and
a floor; PR 5's CPU tanh against v2.6.0's and Sleef u10's.

Not a test: CPU timings move from run to run, so it reports numbers and the ratios its targets
name (each with where it comes from) as measured, and exits 0 whatever they say (1 only when a
worker crashed). Times come from torch.utils.benchmark (`Timer.blocked_autorange`, the thread
count set per measurement), upstream's tool for the figures in a PR. Ratios are only
meaningful within one run, so every attn time comes from ONE worker process, methods
interleaved; peak memory needs a clean high-water mark, so each method's is taken in a fresh
process. v2.6.0's tanh runs only in the wheel's own torch (the overlay leaves it alone), so
tanh is timed in one process per build and CPU capability; Sleef u10 runs in v2.6.0's, from a
small C++ extension. The full run also gives the exhaustive tanh accuracy check (as the gate's
level 5 does) and a profile of the native op at the smallest size.

The tool runs under the system Python, which has no torch: `run` spawns the venv's Python on
this module (`python -m stacktool.bench timing|memory|tanh|plot ...`). Everything that needs
torch or matplotlib is imported inside the worker functions, so the rest stays importable and
testable without them.
"""

import argparse
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from stacktool import tanh_accuracy
from stacktool.config import Layout

SIZES = ((2, 3, 4), (64, 32, 32), (512, 64, 64), (2048, 64, 64), (4096, 128, 128))
QUICK_SIZES = SIZES[:3]
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
# Every worker is CPU-only. torch.utils.cpp_extension (imported by torch.utils.benchmark,
# inductor and upstream's test utilities) looks for a CUDA toolkit when imported and, finding
# one (nvcc on PATH) without a CUDA runtime, prints "No CUDA runtime is found" to stderr.
# Empty CUDA_HOME / CUDA_PATH say "no toolkit" (_find_cuda_home takes them without searching).
WORKER_ENV = {"CUDA_HOME": "", "CUDA_PATH": ""}
# torch.profiler's backend, kineto, asks the CUDA runtime for its GPUs when a profile starts,
# CPU-only activities too, and logs "ERROR: ... gpuGetDeviceCount failed" where there is no
# driver. Its own log level (5: above ERROR, its highest) is for the profiling worker only.
PROFILE_ENV = {"KINETO_LOG_LEVEL": "5"}
METHODS = ("native", "composite", "function", "compile")
QUICK_MEMORY_METHODS = ("native", "composite")  # what the memory target compares
LABELS = {
    "native": "native torch.attn",
    "composite": "composite (eager)",
    "function": "PR 2 Function",
    "compile": "torch.compile(composite)",
    "floor": "floor",
}
FWD, FWD_BWD = "forward", "forward+backward"
PROFILE_STEPS = 500  # forward+backward steps of the native op per profiled round, at SIZES[0]
# How to read the profile at n = 2 (its figures come from the run; this names the parts).
PROFILE_READING = (
    "At this size no arithmetic shows: every row is a fixed cost per call. What the native op "
    "already saves over the composite is three autograd nodes of four (one AttnBackward0, "
    "one saved-tensor set). What is left: the six GEMMs as six at::mm / at::addmm calls, each "
    "a dispatcher round trip plus BLAS's own setup (aten::mm, aten::addmm); the transposed "
    "operands as view ops (aten::t, aten::transpose, aten::as_strided); the TensorIterator "
    "set-up of tanh_ and tanh_backward; and the engine's work per step, which every method "
    "pays alike (autograd::engine::evaluate_function, GraphRoot, one AccumulateGrad per "
    "input). Output tensors are allocated inside the structured mm kernels, so allocation "
    "does not show as an op of its own. Removing more would take a second GEMM "
    "implementation for tiny shapes inside the kernel (loops in place of at::mm, no views), "
    "which duplicates BLAS and is not upstream's way; the engine's share can only go with "
    "autograd itself (e.g. compiled autograd)."
)

# --- tanh: the cases of issue 18's table, per build and CPU capability ---------------------

TANH_CASES = {  # name: what is timed, `torch.tanh(x, out=y)` with y contiguous, float32 unless said
    "contiguous": "x = randn(2048, 2048)",
    "inner stride 2": "x = randn(2048, 4096)[:, ::2] (4M floats)",
    "rows of 17": "x = randn(65536, 64)[:, :17]",
    "rows of 31": "x = randn(65536, 64)[:, :31]",
    "bf16 inner stride 2": "x = randn(2048, 4096, dtype=bfloat16)[:, ::2]",
    "column": "x = randn(4096, 1024)[:, 0] (4096 elements at stride 1024)",
    "permuted": "x = randn(128, 128, 256).permute(2, 0, 1) (no two dims coalesce)",
}
TANH_BUILDS = ("v2.6.0", "Sleef u10", "this stack")
# Sleef's tanh is what Vectorized<float>::tanh calls with AVX2 and AVX512; the default
# capability's Vectorized<float>::tanh is std::tanh element by element, so no Sleef there.
SLEEF_CAPABILITIES = ("avx2", "avx512")
# v2.6.0's float tanh where it has no MKL (aarch64's builds): IMPLEMENT_ITERATOR_LAMBDA of
# aten/src/ATen/native/cpu/UnaryOpsKernel.cpp (strided data gathered into a buffer) over
# IMPLEMENT_VML(tanh) of aten/src/ATen/cpu/vml.h (vec::map of Vectorized<float>::tanh, which
# is Sleef_tanhf8_u10 / Sleef_tanhf16_u10); BFloat16 converted to float and back by vec::map.
# Built per capability against the wheel's headers (whose libtorch_cpu exports Sleef).
SLEEF_SOURCE = r"""
#include <ATen/Dispatch.h>
#include <ATen/TensorIterator.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/irange.h>
#include <torch/library.h>

namespace {

template <typename scalar_t>
void vtanh(scalar_t* out, const scalar_t* in, int64_t size) {
  using vec_t = at::vec::Vectorized<at::vec::vec_scalar_t<scalar_t>>;
  at::vec::map([](vec_t x) { return x.tanh(); }, out, in, size);
}

at::Tensor& sleef_tanh(const at::Tensor& self, at::Tensor& out) {
  auto iter = at::TensorIterator::unary_op(out, self);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, iter.dtype(), "sleef_tanh", [&]() {
    iter.for_each([](char** data_, const int64_t* strides, int64_t n) {
      scalar_t* out_data = reinterpret_cast<scalar_t*>(data_[0]);
      scalar_t* in_data = reinterpret_cast<scalar_t*>(data_[1]);
      int64_t out_stride = strides[0] / sizeof(scalar_t);
      int64_t in_stride = strides[1] / sizeof(scalar_t);
      if (out_stride == 1 && in_stride == 1) {
        vtanh(out_data, in_data, n);
        return;
      }
      static constexpr int64_t WIDTH = (8 * 1024) / sizeof(scalar_t);
      for (int64_t i = 0; i < n; i += WIDTH) {
        scalar_t buffer[WIDTH];
        const int64_t width = std::min(WIDTH, n - i);
        scalar_t* in_buffer = in_stride == 1 ? &in_data[i] : &buffer[0];
        scalar_t* out_buffer = out_stride == 1 ? &out_data[i] : &buffer[0];
        if (in_stride != 1)
          for (const auto j : c10::irange(width))
            in_buffer[j] = in_data[in_stride * (i + j)];
        vtanh(out_buffer, in_buffer, width);
        if (out_stride != 1)
          for (const auto j : c10::irange(width))
            out_data[out_stride * (i + j)] = out_buffer[j];
      }
    }, /*grain_size=*/2048);
  });
  return out;
}

} // namespace

TORCH_LIBRARY(stack_bench, m) {
  m.def("sleef_tanh(Tensor self, Tensor(a!) out) -> Tensor(a!)");
}

TORCH_LIBRARY_IMPL(stack_bench, CPU, m) {
  m.impl("sleef_tanh", sleef_tanh);
}
"""


@dataclass(frozen=True)
class Settings:
    """How long to time: the full run, or the quick smoke run the test gate makes."""

    sizes: tuple
    rounds: int  # blocked_autorange calls per step, the steps interleaved round by round
    min_run_time: float  # seconds, each blocked_autorange call's


FULL = Settings(SIZES, rounds=5, min_run_time=0.1)
QUICK = Settings(QUICK_SIZES, rounds=2, min_run_time=0.01)

# --- targets: what each ratio is held to, and where that comes from ------------------------

ATTN_GOALS = "README, Benchmark"  # the goals this project set for torch.attn's speed and memory
ISSUE_18 = "issue 18, item 2"  # PR 5's tanh: no case slower than v2.6.0, contiguous >= 5x
NOT_SLOWER = 0.95  # v2.6.0's time / this stack's: "none slower", within these machines' noise
TANH_SPEEDUP = 5.0  # the same, contiguous float32 at 1 thread, with AVX2 and with AVX512


@dataclass(frozen=True)
class Target:
    """One target for native torch.attn.

    at_least: the ratio is `other / native` (a speedup) and must be >= bound; otherwise it
    is `native / other` (a time or memory fraction) and must be <= bound.
    """

    other: str
    applies: Callable[[int], bool]  # to which n
    bound: float
    at_least: bool
    passes: tuple = (FWD_BWD,)
    source: str = ATTN_GOALS

    def text(self) -> str:
        if self.at_least:
            return f"{self.other} / native >= {self.bound:.2f}"
        return f"native / {self.other} <= {self.bound:.2f}"

    def check(self, where: str, values: dict) -> "Check":
        """The target on one row's values (ms or MB by method); no ratio if one is missing."""
        native, other = values.get("native"), values.get(self.other)
        found = None
        if native is not None and other is not None:
            found = other / native if self.at_least else native / other
        return Check(self.text(), where, found, self.bound, self.at_least, self.source)


TIME_TARGETS = (
    Target("composite", lambda n: n <= 64, 1.5, at_least=True),
    Target("composite", lambda n: n >= 512, 1.15, at_least=True),
    # never slower than torch.compile, forward and forward+backward
    Target("compile", lambda n: True, 1.0, at_least=True, passes=(FWD, FWD_BWD)),
    Target("floor", lambda n: n >= 2048, 1.10, at_least=False),  # within 10% of the floor
)
MEMORY_TARGET = Target("composite", lambda n: True, 0.75, at_least=False)  # peak memory


@dataclass(frozen=True)
class Check:
    """A target evaluated at one place; ratio None when there is nothing to measure."""

    text: str
    where: str
    ratio: float | None
    bound: float
    at_least: bool
    source: str = ATTN_GOALS

    def meets(self, ratio: float) -> bool:
        return ratio >= self.bound if self.at_least else ratio <= self.bound

    @property
    def shown(self) -> str:
        """The ratio as measured, to three decimals (0.996, never 1.00), or more where three
        would round it across the bound (1.1004 for <= 1.10, not 1.100)."""
        if self.ratio is None:
            return "n/a"
        for digits in range(3, 10):
            text = f"{self.ratio:.{digits}f}"
            if self.meets(float(text)) == self.meets(self.ratio):
                return text
        return repr(self.ratio)

    @property
    def verdict(self) -> str:
        """Met only if the measured ratio itself meets the bound (no rounding in its favour)."""
        if self.ratio is None:
            return "n/a"
        return "met" if self.meets(self.ratio) else "not met"


def tanh_target(row: dict) -> tuple[float, str]:
    """(bound on v2.6.0 / this stack, text) for one row of the tanh table."""
    if row["case"] == "contiguous" and row["threads"] == 1:
        if row["capability"] in SLEEF_CAPABILITIES:
            return TANH_SPEEDUP, f"v2.6.0 / this stack >= {TANH_SPEEDUP:.2f}"
    return NOT_SLOWER, f"v2.6.0 / this stack >= {NOT_SLOWER:.2f}"


def tanh_checks(tanh: dict | None) -> list[Check]:
    """One check per row of the tanh table: not slower than v2.6.0, or 5x where that applies."""
    found = []
    for r in (tanh or {}).get("rows", []):
        bound, text = tanh_target(r)
        old, new = r["ms"].get("v2.6.0"), r["ms"].get("this stack")
        ratio = old / new if old and new else None
        where = (
            f"tanh {r['case']}, {r['threads']} thread{'s' * (r['threads'] > 1)}, {r['capability']}"
        )
        found.append(Check(text, where, ratio, bound, True, ISSUE_18))
    return found


def checks(results: dict) -> list[Check]:
    """Every target where it applies: times by size and pass, peak memory, tanh per case."""
    found = []
    for row in results["timing"]["rows"]:
        size = tuple(row["size"])
        for target in TIME_TARGETS:
            if row["pass"] in target.passes and target.applies(size[0]):
                found.append(target.check(f"{fmt_size(size)} {row['pass']}", row["ms"]))
    memory = results["memory"]
    found.append(MEMORY_TARGET.check(f"{fmt_size(memory['size'])} peak memory", memory["mb"]))
    return found + tanh_checks(results.get("tanh"))


def below_floor(results: dict) -> list[str]:
    """Rows where native torch.attn measured faster than the floor (which it cannot be)."""
    return [
        f"{fmt_size(row['size'])} ({fmt_ms(row['ms']['native'])} against "
        f"{fmt_ms(row['ms']['floor'])} ms)"
        for row in results["timing"]["rows"]
        if row["ms"].get("native") and row["ms"].get("floor")
        and row["ms"]["native"] < row["ms"]["floor"]
    ]  # fmt: skip


# --- the report ------------------------------------------------------------------------------


def fmt_ms(ms: float | None) -> str:
    return "n/a" if ms is None else f"{ms:.3g}"


def fmt_size(size) -> str:
    return ", ".join(str(x) for x in size)


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def tally(found: list[Check]) -> str:
    count = {v: sum(c.verdict == v for c in found) for v in ("met", "not met", "n/a")}
    return f"{count['met']} met, {count['not met']} not met, {count['n/a']} n/a"


def report(results: dict, settings: Settings) -> str:
    """bench.md: how it was measured, times, peak memory, tanh's speed and accuracy, the
    profile at the smallest size, and the targets with their sources and verdicts."""
    timing, memory = results["timing"], results["memory"]
    columns = [*METHODS, "floor"]
    time_rows = [
        [fmt_size(row["size"]), row["pass"], *(fmt_ms(row["ms"].get(m)) for m in columns)]
        for row in timing["rows"]
    ]
    found = checks(results)
    attn_checks = [c for c in found if c.source != ISSUE_18]
    check_rows = [[c.text, c.where, c.shown, c.verdict] for c in attn_checks]
    beaten = below_floor(results)
    composite = memory["mb"]["composite"]
    mem_rows = [[LABELS[m], f"{mb:.1f}", f"{mb / composite:.3f}"] for m, mb in memory["mb"].items()]
    return "\n".join([
        "# torch.attn benchmark",
        "",
        f"`./stack bench` (stacktool/bench.py): torch {timing['torch']}, CPU ({timing['cpu']}), "
        f"float32, {timing['threads']} threads. 1-minute load average {timing['load'][0]:.1f} "
        f"before timing, {timing['load'][1]:.1f} after (this run's own threads count): other "
        "processes on these cores make the times noisy, so compare ratios within one run only.",
        "",
        *summary(results),
        "How the times are taken: torch.utils.benchmark, upstream's tool for a PR's figures. "
        f"Each step is a `Timer` with num_threads={timing['threads']}; "
        f"`blocked_autorange(min_run_time={settings.min_run_time:g})` picks a block size "
        "(calls per timed block) and times blocks; that is repeated "
        f"{settings.rounds} times per step, the steps interleaved round by round so that "
        "load from other processes hits them alike. The tables give ms per call, the median "
        "of the quietest round (the least disturbed by other processes; bench.json has "
        "every round's median, whose spread shows this run's noise). All attn times come "
        "from one process, inputs allocated once.",
        "",
        "The columns: native torch.attn (PR 4's kernel and derivative); composite (eager): "
        "`a = torch.tanh(q @ k.T); return a @ v, a`; PR 2 Function: the custom "
        "autograd.Function of PR 2's test; torch.compile(composite): default inductor, compiled "
        "per size (static shapes), warmed before timing. forward: inputs without "
        "requires_grad; forward+backward: `torch.autograd.backward((o, a), (go, ga))`, so both "
        "outputs' gradients flow. floor (forward+backward): the ATen calls torch.attn itself "
        "makes, with no autograd around them: mm(q, k.T) then tanh_ in place, mm(a, v); "
        "backward mm(a.T, go), addmm(ga, go, v.T) with tanh_backward written into it in place, "
        "mm(gx, k), mm(gx.T, q) (PR 4's kernel and attn_backward). torch.attn does that work "
        "plus the autograd engine's, so it cannot be faster than the floor: a native / floor "
        "below 1 is noise, not a result."
        + ("" if timing["has_native"] else " torch.attn does not exist in this build: n/a."),
        "",
        table(["n, d, dv", "pass", *(LABELS[c] for c in columns)], time_rows),
        *(["", "native measured faster than the floor at " + "; ".join(beaten) + ": the load "
           "on the machine moved these times by at least that much."] if beaten else []),
        "",
        "![composite's and torch.compile's time over native torch.attn's, per size](bench.png)",
        "",
        f"Peak memory of one forward+backward at n, d, dv = {fmt_size(memory['size'])}: "
        "each method in a fresh process, after a warm-up at "
        f"{fmt_size(MEMORY_WARM_SIZE)} (torch.compile: dynamic shapes, so nothing compiles in "
        "the step), with glibc's mmap threshold fixed at 64 KiB so that freed tensors leave "
        "RSS; inputs and output grads allocated, then the peak RSS is reset "
        "(/proc/self/clear_refs) and the growth VmHWM - VmRSS is read after the step.",
        "",
        table(["method", "peak RSS growth (MB)", "/ composite"], mem_rows),
        *tanh_section(results.get("tanh")),
        *accuracy_section(results.get("accuracy")),
        *profile_section(timing.get("profile")),
        "",
        "## Targets for torch.attn",
        "",
        "The goals this project set for the native op (README, section Benchmark): at least "
        "1.5x the composite's speed at n <= 64 and 1.15x at n >= 512, forward+backward; never "
        "slower than torch.compile of the composite, forward and forward+backward; within 10 % "
        "of the floor at n >= 2048; at most 0.75x the composite's peak memory. Each ratio is "
        "shown as measured, and a target is met only if that number meets it.",
        "",
        table(["target", "where", "measured", "verdict"], check_rows),
        "",
        f"torch.attn: {tally(attn_checks)}. All targets of this run, tanh's included: "
        f"{tally(found)}.",
    ]) + "\n"  # fmt: skip


TANH_HEADER = ["capability", "case", "threads", *TANH_BUILDS, "Sleef / this stack",
               "v2.6.0 / this stack", "target", "verdict"]  # fmt: skip


def series(results: dict, other: str, inverse: bool = False) -> str:
    """One forward+backward ratio per size, as measured: "1.335 at 2, 3, 4; ..."."""
    found = []
    for row in results["timing"]["rows"]:
        native, value = row["ms"].get("native"), row["ms"].get(other)
        if row["pass"] == FWD_BWD and native and value:
            found.append(f"{native / value if inverse else value / native:.3f} at "
                         f"{fmt_size(row['size'])}")  # fmt: skip
    return "; ".join(found) or "n/a"


def summary(results: dict) -> list[str]:
    """The run in a few lines (what the README quotes): the ratios the targets are about."""
    found = checks(results)
    attn = [c for c in found if c.source != ISSUE_18]
    missed = [f"{c.text} at {c.where} ({c.shown})" for c in attn if c.verdict == "not met"]
    lines = [
        "## Summary",
        "",
        f"- forward+backward, composite / native: {series(results, 'composite')}",
        f"- forward+backward, torch.compile / native: {series(results, 'compile')}",
        f"- forward+backward, native / floor: {series(results, 'floor', inverse=True)}",
        f"- peak memory, native / composite: {attn[-1].shown}",
        f"- torch.attn's targets: {tally(attn)}"
        + (f"; not met: {'; '.join(missed)}" * bool(missed)),
    ]
    tanh = tanh_checks(results.get("tanh"))
    if tanh:
        speedups = [f"{c.shown} {c.where.rsplit(', ', 1)[1]}" for c in tanh
                    if c.where.startswith("tanh contiguous, 1 thread,")]  # fmt: skip
        slower = [f"{c.where.removeprefix('tanh ')} ({c.shown} for >= {c.bound:.2f})"
                  for c in tanh if c.verdict == "not met"]  # fmt: skip
        lines += [
            "- tanh contiguous 2048 x 2048, 1 thread, v2.6.0 / this stack: " + ", ".join(speedups),
            f"- tanh's targets: {tally(tanh)}" + (f"; not met: {'; '.join(slower)}" * bool(slower)),
        ]
    return [*lines, ""]


def tanh_section(tanh: dict | None) -> list[str]:
    if not tanh:
        return []
    found, rows = tanh_checks(tanh), []
    for r, c in zip(tanh["rows"], found, strict=True):
        old, sleef, new = (r["ms"].get(b) for b in TANH_BUILDS)
        rows.append([
            r["capability"], r["case"], str(r["threads"]), fmt_ms(old), fmt_ms(sleef),
            fmt_ms(new), f"{sleef / new:.3f}" if sleef and new else "n/a",
            c.shown, f">= {c.bound:.2f}", c.verdict,
        ])  # fmt: skip
    skipped = [c for c in tanh_accuracy.CAPABILITIES if c not in tanh["capabilities"]]
    cases = "; ".join(f"{name}: {text}" for name, text in TANH_CASES.items())
    return [
        "",
        "## CPU tanh: PR 5 against v2.6.0 and Sleef",
        "",
        f"`torch.tanh(x, out=y)`, y contiguous, ms per call (median, timed as above) at 1 "
        f"thread, and the contiguous case at {max(r['threads'] for r in tanh['rows'])} too. "
        f"The cases (standard normal values, float32 unless said): {cases}. v2.6.0: the "
        "wheel's own torch (MKL VML's tanh for float, Sleef through Vectorized<BFloat16> for "
        "bf16); Sleef u10: Vectorized<float>::tanh in v2.6.0's own iterator loop, what "
        "v2.6.0's builds without MKL (aarch64) run, compiled here per capability against the "
        "wheel's headers (none at default, whose Vectorized<float>::tanh is std::tanh); this "
        "stack: PR 5's kernel through the overlay. Each build and ATEN_CPU_CAPABILITY runs in "
        "a process of its own (Sleef in v2.6.0's), capabilities as this CPU reports them"
        + (f"; {', '.join(skipped)}: skipped, this CPU lacks it" if skipped else "")
        + f". Targets ({ISSUE_18}): v2.6.0 / this stack >= {NOT_SLOWER:.2f} for every case "
        f'("none slower than v2.6.0", {NOT_SLOWER} for the noise of these machines), and >= '
        f"{TANH_SPEEDUP:.2f} for contiguous float32 at 1 thread with AVX2 and with AVX512. "
        "Each ratio is the other build's time over this stack's: above 1, this stack is faster.",
        "",
        table(TANH_HEADER, rows),
        "",
        f"tanh: {tally(found)}.",
    ]


def accuracy_section(accuracy: list | None) -> list[str]:
    if not accuracy:
        return []
    rows = [[r["name"], "passed" if r["passed"] else "skipped" if r["skipped"] else "FAILED",
             r["note"]] for r in accuracy]  # fmt: skip
    return [
        "",
        "This stack's float32 tanh against the correctly rounded result, every one of the "
        "2^32 inputs (stacktool/tanh_accuracy.py; the bar: at most 1 ULP, NaN kept, "
        "tanh(-x) = -tanh(x) bit for bit, which covers -0 and -inf):",
        "",
        table(["check", "result", "found"], rows),
    ]


def profile_section(profile: dict | None) -> list[str]:
    if not profile:
        return []
    rows = [[r["name"], f"{r['calls']:g}", f"{r['self_us']:.2f}"] for r in profile["ops"]]
    return [
        "",
        "## Where the native op's time goes at the smallest size",
        "",
        f"Native torch.attn's forward+backward at n, d, dv = "
        f"{fmt_size(profile['size'])}: torch.profiler, the fastest of {profile['rounds']} "
        f"rounds of {profile['steps']} steps, per step (self CPU time, so nothing is counted "
        f"twice). Profiled, a step took {profile['step_us']:.1f} us; the ops' self times add up "
        f"to {profile['ops_us']:.1f} us, "
        "the rest is Python and the autograd engine between ops. The profiler's own cost per op "
        "is in these figures, so the unprofiled step above is shorter.",
        "",
        table(["op", "calls per step", "self us per step"], rows),
        "",
        PROFILE_READING,
    ]


# --- timing: torch.utils.benchmark -----------------------------------------------------------


def quietest(rounds: list[list[float]]) -> dict:
    """ms per call from each round's per-call block times (seconds): the median of the least
    disturbed round, and every round's median (their spread shows the run's noise).

    Other processes on these 2 cores take whole time slices from a 2-thread step, so the
    disturbed blocks are many times slower and come in bursts; a round's median is robust to
    a few, and the quietest round is the machine's speed with the least of them.
    """
    medians = [statistics.median(times) * 1000 for times in rounds]
    return {"ms": min(medians), "rounds_ms": medians, "blocks": sum(map(len, rounds))}


def measure(steps: dict, settings: Settings, timer_class) -> dict:
    """Time each step ({name: (callable, threads)}) with `timer_class` (torch's Timer).

    Each step is called twice first (torch.compile compiles, lazy buffers appear), so that
    blocked_autorange's block-size estimate sees the steady state. Then `settings.rounds`
    rounds of one blocked_autorange per step, the steps interleaved within each round (load
    from other processes hits them alike); see `quietest` for the figure kept.
    """
    timers = {}
    for name, (step, threads) in steps.items():
        step()
        step()
        timers[name] = timer_class(
            stmt="step()", globals={"step": step}, num_threads=threads, timer=timeit.default_timer
        )
    rounds = {name: [] for name in steps}
    for _ in range(settings.rounds):
        for name, timer in timers.items():
            rounds[name].append(timer.blocked_autorange(min_run_time=settings.min_run_time).times)
    return {name: quietest(found) for name, found in rounds.items()}


# --- the workers: run with the venv's Python, import torch ---------------------------------


def threads() -> int:
    """As many threads as this process may run on (the machines have 2 cores)."""
    return len(os.sched_getaffinity(0))


def say(line: str) -> None:
    """A progress line: plain, flushed, the same on a terminal and in a CI log."""
    print(f"bench: {line}", file=sys.stderr, flush=True)


def load_torch(fork: Path, with_function: bool = True):
    """torch with threads fixed, plus the methods by name (native only if torch.attn exists).

    PR 2's Function lives in its test file, whose import pulls in upstream's test utilities
    (seconds): only when `with_function`.
    """
    import torch

    torch.set_num_threads(threads())

    def composite(q, k, v):
        a = torch.tanh(q @ k.T)
        return a @ v, a

    methods = {"composite": composite}
    if with_function:
        sys.path.insert(0, str(fork / "test"))
        argv, sys.argv = sys.argv, sys.argv[:1]  # common_utils parses sys.argv when imported
        try:
            from test_attn_gradcheck import Attn
        finally:
            sys.argv = argv
        methods["function"] = Attn.apply
    if hasattr(torch, "attn"):
        methods = {"native": torch.attn, **methods}
    return torch, methods


def inputs(torch, size, grad: bool):
    """q, k, v and the output grads go, ga for one size, seeded."""
    n, d, dv = size
    torch.manual_seed(0)
    q, k, v = (torch.randn(n, d), torch.randn(n, d), torch.randn(n, dv))
    go, ga = torch.randn(n, dv), torch.randn(n, n)
    for t in (q, k, v):
        t.requires_grad_(grad)
    return q, k, v, go, ga


def train_step(torch, fn, q, k, v, go, ga):
    """One forward+backward with both outputs' grads; .grad reset so nothing accumulates."""

    def step():
        o, a = fn(q, k, v)
        torch.autograd.backward((o, a), (go, ga))
        q.grad = k.grad = v.grad = None

    return step


def floor_step(torch, q, k, v, go, ga):
    """The ATen calls torch.attn makes forward and backward, with nothing around them.

    PR 4's kernel: a = mm(q, k.T); a.tanh_(); o = mm(a, v). Its attn_backward with both
    output grads and every input grad asked for: grad_v = a.T.mm(go); gx = addmm(ga, go,
    v.T) overwritten in place by tanh_backward_out(gx, gx, a); grad_q = gx.mm(k); grad_k =
    gx.T.mm(q). No graph, no saved tensors, no engine: torch.attn does all of this and more.
    """
    q, k, v = q.detach(), k.detach(), v.detach()
    tanh_backward = torch.ops.aten.tanh_backward.grad_input

    def step():
        a = torch.mm(q, k.T)
        a.tanh_()
        torch.mm(a, v)
        torch.mm(a.T, go)
        gx = torch.addmm(ga, go, v.T)
        tanh_backward(gx, a, grad_input=gx)
        torch.mm(gx, k)
        torch.mm(gx.T, q)

    return step


def profile(torch, fn, size, rounds: int = 5) -> dict:
    """Self CPU time per forward+backward step of `fn`, op by op, under torch.profiler: the
    least disturbed of `rounds` rounds of PROFILE_STEPS steps."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    step = train_step(torch, fn, *inputs(torch, size, grad=True))
    for _ in range(100):
        step()
    best = None
    for _ in range(rounds):
        with profiler(activities=[ProfilerActivity.CPU]) as prof:
            started = time.perf_counter()
            for _ in range(PROFILE_STEPS):
                step()
            step_us = (time.perf_counter() - started) / PROFILE_STEPS * 1e6
        if best is None or step_us < best[0]:
            best = step_us, prof.key_averages()
    step_us, averages = best
    ops = [
        {"name": e.key, "calls": e.count / PROFILE_STEPS,
         "self_us": e.self_cpu_time_total / PROFILE_STEPS}
        for e in averages
    ]  # fmt: skip
    ops.sort(key=lambda op: -op["self_us"])
    return {
        "size": size,
        "rounds": rounds,
        "steps": PROFILE_STEPS,
        "step_us": step_us,
        "ops_us": sum(op["self_us"] for op in ops),
        "ops": [op for op in ops if op["self_us"] >= 0.05],
    }


def time_worker(fork: Path, settings: Settings) -> dict:
    """Forward and forward+backward times of every method and the floor, size by size."""
    torch, methods = load_torch(fork)
    from torch.utils.benchmark import Timer

    load_before = os.getloadavg()[0]
    rows = []
    for size in settings.sizes:
        say(f"timing at n, d, dv = {fmt_size(size)} (torch.compile compiles first)")
        torch._dynamo.reset()  # a static compile per size, as a user with fixed shapes gets
        fns = {**methods, "compile": torch.compile(methods["composite"])}
        q, k, v, _, _ = inputs(torch, size, grad=False)
        steps = {(FWD, m): (lambda fn=fn, q=q, k=k, v=v: fn(q, k, v)) for m, fn in fns.items()}
        args = inputs(torch, size, grad=True)
        steps.update({(FWD_BWD, m): train_step(torch, fn, *args) for m, fn in fns.items()})
        steps[FWD_BWD, "floor"] = floor_step(torch, *args)
        found = measure({name: (s, threads()) for name, s in steps.items()}, settings, Timer)
        for name in (FWD, FWD_BWD):
            row = {m: t for (p, m), t in found.items() if p == name}
            rows.append({
                "size": size, "pass": name, "ms": {m: t["ms"] for m, t in row.items()},
                "rounds_ms": {m: t["rounds_ms"] for m, t in row.items()},
            })  # fmt: skip
            say(f"{fmt_size(size)} {name}: "
                + ", ".join(f"{m} {fmt_ms(t['ms'])} ms" for m, t in row.items()))  # fmt: skip
    found = {
        "torch": torch.__version__,
        "cpu": cpu_model(),
        "threads": threads(),
        "has_native": "native" in methods,
        "load": [load_before, os.getloadavg()[0]],
        "rows": rows,
    }
    if settings is FULL and "native" in methods:
        say(f"profiling native torch.attn at n, d, dv = {fmt_size(SIZES[0])}")
        found["profile"] = profile(torch, methods["native"], SIZES[0])
    return found


def tanh_inputs(torch) -> dict:
    """The input of each TANH_CASES case, seeded."""
    g = torch.Generator().manual_seed(0)

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dtype)

    found = {
        "contiguous": randn(2048, 2048),
        "inner stride 2": randn(2048, 4096)[:, ::2],
        "rows of 17": randn(65536, 64)[:, :17],
        "rows of 31": randn(65536, 64)[:, :31],
        "bf16 inner stride 2": randn(2048, 4096, dtype=torch.bfloat16)[:, ::2],
        "column": randn(4096, 1024)[:, 0],
        "permuted": randn(128, 128, 256).permute(2, 0, 1),
    }
    assert list(found) == list(TANH_CASES)
    return found


def sleef_tanh(torch, build_dir: Path, capability: str):
    """SLEEF_SOURCE built for `capability` (cached in `build_dir`) and loaded: its op."""
    from torch.utils import cpp_extension

    from stacktool.overlay.compile import CPU_CAPABILITIES

    cap = capability.upper()
    build_dir.mkdir(parents=True, exist_ok=True)
    source = build_dir / "sleef_tanh.cpp"
    if not source.exists() or source.read_text() != SLEEF_SOURCE:
        source.write_text(SLEEF_SOURCE)
    flags = [f"-DCPU_CAPABILITY={cap}", f"-DCPU_CAPABILITY_{cap}", *CPU_CAPABILITIES[cap].split()]
    cpp_extension.load(f"stack_bench_sleef_{capability}", [str(source)], extra_cflags=flags,
                       build_directory=str(build_dir), is_python_module=False)  # fmt: skip
    return torch.ops.stack_bench.sleef_tanh


def tanh_worker(settings: Settings, sleef_dir: Path | None) -> dict:
    """ms per tanh of each case in this process's torch (which one, and whether it is this
    stack's, goes with the result); with `sleef_dir`, Sleef u10's too, built there."""
    import torch
    from torch.utils.benchmark import Timer

    capability = tanh_accuracy.capability_name(torch.backends.cpu.get_cpu_capability())
    impls = {"torch": lambda x, y: torch.tanh(x, out=y)}
    if sleef_dir is not None:
        say(f"building the Sleef u10 extension [{capability}] in {sleef_dir} (cached)")
        impls["sleef"] = sleef_tanh(torch, sleef_dir, capability)
    steps = {}
    for case, x in tanh_inputs(torch).items():
        y = torch.empty(x.shape, dtype=x.dtype)
        if "sleef" in impls:  # the same function as torch's, to bf16's rounding
            want = torch.tanh(x)
            tol = 1e-2 if x.dtype == torch.bfloat16 else 1e-6
            torch.testing.assert_close(impls["sleef"](x, y), want, atol=tol, rtol=tol)
        for count in sorted({1, threads()} if case == "contiguous" else {1}):
            for impl, fn in impls.items():
                steps[case, count, impl] = (lambda fn=fn, x=x, y=y: fn(x, y)), count
    found = measure(steps, settings, Timer)
    return {
        "torch": torch.__file__,
        "capability": capability,
        "has_attn": hasattr(torch, "attn"),
        "rows": [
            {"case": case, "threads": count, "impl": impl, **found[case, count, impl]}
            for case, count, impl in steps
        ],
    }


def cpu_model() -> str:
    found = re.search(r"^model name\s*:\s*(.*)$", Path("/proc/cpuinfo").read_text(), re.M)
    return found.group(1) if found else "unknown CPU"


def memory_kb() -> dict[str, int]:
    status = Path("/proc/self/status").read_text()
    return {key: int(kb) for key, kb in re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", status, re.M)}


def memory_worker(fork: Path, method: str) -> dict:
    """MB of peak RSS growth over one forward+backward of `method` at MEMORY_SIZE.

    torch.compile is compiled with dynamic shapes here, so that the warm-up's graph serves the
    measured size and no compilation happens inside the measurement.
    """
    torch, methods = load_torch(fork, with_function=method == "function")
    fn = (
        torch.compile(methods["composite"], dynamic=True)
        if method == "compile"
        else methods[method]
    )
    train_step(torch, fn, *inputs(torch, MEMORY_WARM_SIZE, grad=True))()
    torch._dynamo.config.error_on_recompile = True  # a compile would be counted as the step's
    step = train_step(torch, fn, *inputs(torch, MEMORY_SIZE, grad=True))
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = memory_kb()["VmRSS"]
    step()
    return {"method": method, "mb": (memory_kb()["VmHWM"] - before) / 1024}


PLOTTED = ("composite", "compile")  # the ratios the targets (and the text) are about


def composite_bound(n: int, name: str) -> float | None:
    """The composite / native target at this n and pass, if one applies."""
    for target in TIME_TARGETS:
        if target.other == "composite" and name in target.passes and target.applies(n):
            return target.bound
    return None


def ratio_series(timing: dict) -> dict:
    """{pass: sizes, {method: [its time / native's per size]}, the composite target per size}:
    what the plot draws."""
    found = {}
    for name in (FWD, FWD_BWD):
        rows = [row for row in timing["rows"] if row["pass"] == name]
        series = {}
        for method in PLOTTED:
            values = [
                row["ms"][method] / row["ms"]["native"]
                if row["ms"].get(method) and row["ms"].get("native") else None
                for row in rows
            ]  # fmt: skip
            if any(v is not None for v in values):
                series[method] = values
        found[name] = {
            "sizes": [tuple(row["size"]) for row in rows],
            "ratios": series,
            "composite target": [composite_bound(row["size"][0], name) for row in rows],
        }
    return found


# y ticks of the ratio plot: fine ones around 1.0 where the ratios are close, else coarse
FINE_TICKS = (0.5, 0.7, 0.8, 0.9, 1, 1.15, 1.3, 1.5, 2, 3, 5, 7, 10)
COARSE_TICKS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100)


def plot(timing: dict, png: Path) -> None:
    """Composite's and torch.compile's time over native torch.attn's, per size, forward and
    forward+backward: above 1.0 the native op is faster. The composite target is marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    series = ratio_series(timing)
    values = [v for data in series.values() for vs in data["ratios"].values() for v in vs if v]
    fine = bool(values) and min(values) >= FINE_TICKS[0] and max(values) <= FINE_TICKS[-1]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8), sharey=True)
    styles = {"composite": "-o", "compile": "-s"}
    for ax, (name, data) in zip(axes, series.items(), strict=True):
        x = range(len(data["sizes"]))
        for method, values in data["ratios"].items():
            points = [(i, v) for i, v in zip(x, values, strict=True) if v is not None]
            ax.plot(*zip(*points, strict=True), styles[method],
                    label=f"{LABELS[method]} / native")  # fmt: skip
        marks = [(i, v) for i, v in zip(x, data["composite target"], strict=True) if v]
        if marks:
            ax.plot(*zip(*marks, strict=True), "_", color="tab:blue", markersize=22,
                    markeredgewidth=2, label="composite target (1.5 / 1.15)")  # fmt: skip
        ax.axhline(1.0, color="black", linewidth=1.2, label="1.0: same time (compile target)")
        labels = [f"n={n}\nd={d}\ndv={dv}" for n, d, dv in data["sizes"]]
        ax.set_xticks(list(x), labels, fontsize=8)
        ax.set(title=name, xlabel="size (n, d, dv)", yscale="log")
        ax.yaxis.set_major_locator(ticker.FixedLocator(FINE_TICKS if fine else COARSE_TICKS))
        ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("method's time / native torch.attn's\n(above 1.0: native is faster)")
    axes[1].legend(fontsize=8)
    fig.suptitle(f"torch.attn against the composite and torch.compile, float32, "
                 f"{timing['threads']} threads, one run of ./stack bench")  # fmt: skip
    fig.savefig(png, dpi=110, bbox_inches="tight")


# --- the tool side: runs under the system Python --------------------------------------------


def spawn(layout: Layout, *args: str, env: dict[str, str] | None = None) -> bool:
    """Run this module under the venv's Python; its stderr (progress, tracebacks) shows live."""
    env = {**os.environ, **layout.python_env, **WORKER_ENV, **(env or {})}
    proc = subprocess.run(
        [str(layout.python), "-m", "stacktool.bench", *args], cwd=layout.root, env=env
    )
    return proc.returncode == 0


def worker(layout: Layout, command: str, *args: str, env: dict[str, str] | None = None):
    """A worker's JSON result, or None (said on stderr) when it failed."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        if spawn(layout, command, str(out), *args, env=env):
            return json.loads(out.read_text())
    say(f"the {command} worker failed ({' '.join(args)})")
    return None


def tanh_rows(capabilities: list[str], found: dict) -> list[dict]:
    """The tanh table from the workers' rows ({(capability, build): worker result})."""
    builds = {"torch": None, "sleef": "Sleef u10"}
    rows = {}
    for capability in capabilities:
        for build in ("v2.6.0", "this stack"):
            for r in found[capability, build]["rows"]:
                key = capability, r["case"], r["threads"]
                row = rows.setdefault(key, {"capability": capability, "case": r["case"],
                                            "threads": r["threads"], "ms": {}})  # fmt: skip
                name = builds[r["impl"]] or build
                row["ms"][name] = r["ms"]
                row.setdefault("rounds_ms", {})[name] = r["rounds_ms"]
    return list(rows.values())


def tanh_speed(layout: Layout, log) -> dict | None:
    """tanh's times per case: v2.6.0's and Sleef's, and this stack's, per CPU capability.

    v2.6.0 is the unpacked wheel's own torch (PYTHONPATH first, so the fork's is not imported
    and the overlay does nothing); each result says which torch ran, and is refused if that
    is not the build it is labelled with.
    """
    wheel = {"PYTHONPATH": str(layout.wheel_tree)}
    capabilities = tanh_accuracy.supported(layout)
    found = {}
    for capability in capabilities:
        for build, env in (("v2.6.0", wheel), ("this stack", {})):
            sleef = build == "v2.6.0" and capability in SLEEF_CAPABILITIES
            log(f"tanh [{capability}]: {build}{' and Sleef u10' * sleef} ({len(TANH_CASES)} "
                "cases, a process of its own)")  # fmt: skip
            args = ["--sleef", str(layout.build / "bench-sleef" / capability)] if sleef else []
            got = worker(layout, "tanh", *args, env={**env, "ATEN_CPU_CAPABILITY": capability})
            if got is None:
                return None
            if got["capability"] != capability or got["has_attn"] != (build == "this stack"):
                log(f"{build} [{capability}] ran {got['torch']} as {got['capability']}")
                return None
            found[capability, build] = got
    return {"capabilities": capabilities, "rows": tanh_rows(capabilities, found)}


def run(layout: Layout, out_dir: Path, quick: bool) -> int:
    """Time every method, measure peak memory, and (full run) time and check tanh, profile
    the native op; write bench.md, bench.json and bench.png."""
    started = time.monotonic()
    settings = QUICK if quick else FULL

    def log(line: str) -> None:
        say(f"[{time.monotonic() - started:5.0f} s] {line}")

    out_dir.mkdir(parents=True, exist_ok=True)
    sizes = "; ".join(fmt_size(s) for s in settings.sizes)
    log(f"timing torch.attn's methods at n, d, dv = {sizes} (one process)")
    timing = worker(layout, "timing", str(layout.fork), *(["--quick"] if quick else []),
                    env=PROFILE_ENV)  # fmt: skip
    if timing is None:
        return 1
    mb = {}
    for method in QUICK_MEMORY_METHODS if quick else METHODS:
        if method == "native" and not timing["has_native"]:
            continue
        log(f"peak memory: {LABELS[method]} (a fresh process)")
        found = worker(layout, "memory", str(layout.fork), "--method", method, env=MEMORY_ENV)
        if found is None:
            return 1
        mb[method] = found["mb"]
    results = {"timing": timing, "memory": {"size": MEMORY_SIZE, "mb": mb}}
    if not quick:
        results["tanh"] = tanh_speed(layout, log)
        if results["tanh"] is None:
            return 1
        log("tanh accuracy: all 2^32 float32 inputs per capability (about a minute each)")
        results["accuracy"] = [asdict(r) for r in tanh_accuracy.run(layout, log)]
    (out_dir / "bench.json").write_text(json.dumps(results, indent=1))
    text = report(results, settings)
    (out_dir / "bench.md").write_text(text)
    print(text, flush=True)
    png = out_dir / "bench.png"
    png.unlink(missing_ok=True)
    log("plotting")
    if not spawn(layout, "plot", str(out_dir / "bench.json"), str(png)):
        log("no plot (is matplotlib installed in .venv?)")
    written = "bench.md, bench.json" + (", bench.png" if png.exists() else "")
    log(f"wrote {written} to {out_dir}")
    return 0


def main(argv: list[str] | None = None) -> None:
    """The worker entry point (`python -m stacktool.bench ...`); results go to a JSON file."""
    parser = argparse.ArgumentParser(prog="python -m stacktool.bench")
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("timing")
    p.add_argument("out", type=Path)
    p.add_argument("fork", type=Path)
    p.add_argument("--quick", action="store_true")
    p = commands.add_parser("memory")
    p.add_argument("out", type=Path)
    p.add_argument("fork", type=Path)
    p.add_argument("--method", choices=METHODS, required=True)
    p = commands.add_parser("tanh")
    p.add_argument("out", type=Path)
    p.add_argument("--sleef", type=Path, metavar="BUILD_DIR", help="also time Sleef u10")
    p = commands.add_parser("plot")
    p.add_argument("results", type=Path)
    p.add_argument("png", type=Path)
    args = parser.parse_args(argv)
    if args.command == "plot":
        plot(json.loads(args.results.read_text())["timing"], args.png)
        return
    if args.command == "timing":
        result = time_worker(args.fork, QUICK if args.quick else FULL)
    elif args.command == "memory":
        result = memory_worker(args.fork, args.method)
    else:
        result = tanh_worker(FULL, args.sleef)
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
