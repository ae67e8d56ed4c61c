"""`./stack bench`: native torch.attn against the composite, PR 2's Function and torch.compile;
PR 5's CPU float tanh against v2.6.0's.

Not a test: CPU timings move from run to run, so it reports numbers and ratios and marks the
spec's targets met or not met, but exits 0 whatever they say (1 only when a worker crashed).
Ratios are only meaningful within one run, so every time comes from ONE worker process with
its thread count fixed; peak memory needs a clean high-water mark, so each method's is taken
in a fresh process of its own. v2.6.0's tanh kernel can only run in a process of its own (the
wheel's torch, which the overlay leaves alone), so tanh is timed in one process per build and
CPU capability. The full run also gives the exhaustive tanh accuracy check (as the gate's
level 5 does) and a profile of the native op at the smallest size.

The tool runs under the system Python, which has no torch: `run` spawns the venv's Python on
this module (`python -m stacktool.bench timing|memory|plot ...`). Everything that needs torch
or matplotlib is imported inside the worker functions, so the rest stays importable and
testable without them.
"""

import argparse
import gc
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
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
METHODS = ("native", "composite", "function", "compile")
LABELS = {
    "native": "native torch.attn",
    "composite": "composite (eager)",
    "function": "PR 2 Function",
    "compile": "torch.compile(composite)",
    "floor": "floor",
}
FWD, FWD_BWD = "forward", "forward+backward"
TANH_SHAPE = (2048, 2048)
TANH_BUILDS = ("v2.6.0", "this stack")
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


@dataclass(frozen=True)
class Settings:
    """How long to time: the full run, or the quick smoke run the test gate makes."""

    sizes: tuple
    repeats: int
    block_s: float  # each repeat times a block of calls at least this long


FULL = Settings(SIZES, repeats=7, block_s=0.1)
QUICK = Settings(QUICK_SIZES, repeats=3, block_s=0.02)


@dataclass(frozen=True)
class Target:
    """One of the spec's targets for native torch.attn.

    at_least: the ratio is `other / native` (a speedup) and must be >= bound; otherwise it
    is `native / other` (a time or memory fraction) and must be <= bound.
    """

    other: str
    applies: Callable[[int], bool]  # to which n
    bound: float
    at_least: bool
    passes: tuple = (FWD_BWD,)

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
        return Check(self.text(), where, found, self.bound, self.at_least)


TIME_TARGETS = (
    Target("composite", lambda n: n <= 64, 1.5, at_least=True),
    Target("composite", lambda n: n >= 512, 1.15, at_least=True),
    # never slower than torch.compile, forward and forward+backward
    Target("compile", lambda n: True, 1.0, at_least=True, passes=(FWD, FWD_BWD)),
    Target("floor", lambda n: n >= 2048, 1.10, at_least=False),  # within 10% of the floor
)
MEMORY_TARGET = Target("composite", lambda n: True, 0.75, at_least=False)  # peak memory
TANH_TARGET = 5.0  # v2.6.0's time / this stack's, one thread, the CPU's own capability


@dataclass(frozen=True)
class Check:
    """A target evaluated at one place; ratio None when there is nothing to measure."""

    text: str
    where: str
    ratio: float | None
    bound: float
    at_least: bool

    @property
    def shown(self) -> str:
        return "n/a" if self.ratio is None else f"{self.ratio:.2f}"

    @property
    def verdict(self) -> str:
        """Judged on the ratio as shown, so the table never reads "1.50 not met" for ">= 1.50"."""
        if self.ratio is None:
            return "n/a"
        shown, bound = float(self.shown), self.bound
        return "met" if (shown >= bound if self.at_least else shown <= bound) else "not met"


def checks(results: dict) -> list[Check]:
    """Every target where it applies: times by size and pass, peak memory, tanh's speedup."""
    found = []
    for row in results["timing"]["rows"]:
        size = tuple(row["size"])
        for target in TIME_TARGETS:
            if row["pass"] in target.passes and target.applies(size[0]):
                found.append(target.check(f"{fmt_size(size)} {row['pass']}", row["ms"]))
    memory = results["memory"]
    found.append(MEMORY_TARGET.check(f"{fmt_size(memory['size'])} peak memory", memory["mb"]))
    tanh = results.get("tanh")
    if tanh:
        own = [r for r in tanh["rows"] if r["threads"] == 1 and r["capability"] == tanh["own"]]
        for r in own:
            old, new = (r["ms"].get(build) for build in TANH_BUILDS)
            speedup = old / new if old and new else None
            where = f"tanh {fmt_size(TANH_SHAPE)}, 1 thread, {r['capability']}"
            text = f"v2.6.0 / this stack >= {TANH_TARGET:.2f}"
            found.append(Check(text, where, speedup, TANH_TARGET, True))
    return found


def fmt_ms(ms: float | None) -> str:
    return "n/a" if ms is None else f"{ms:.3g}"


def fmt_size(size) -> str:
    return ", ".join(str(x) for x in size)


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def report(results: dict, settings: Settings) -> str:
    """bench.md: how it was measured, times, peak memory, tanh's speed and accuracy, the
    profile at the smallest size, and the targets with their verdicts."""
    timing, memory = results["timing"], results["memory"]
    columns = [*METHODS, "floor"]
    time_rows = [
        [fmt_size(row["size"]), row["pass"], *(fmt_ms(row["ms"].get(m)) for m in columns)]
        for row in timing["rows"]
    ]
    found = checks(results)
    check_rows = [[c.text, c.where, c.shown, c.verdict] for c in found]
    tally = {v: sum(c.verdict == v for c in found) for v in ("met", "not met", "n/a")}
    composite = memory["mb"]["composite"]
    mem_rows = [[LABELS[m], f"{mb:.1f}", f"{mb / composite:.2f}"] for m, mb in memory["mb"].items()]
    return "\n".join([
        "# torch.attn benchmark",
        f"torch {timing['torch']}, CPU ({timing['cpu']}), float32, "
        f"{timing['threads']} threads (torch.set_num_threads), one process for all times. "
        "1-minute load average {:.1f} before timing, {:.1f} after (this run's own threads "
        "count): other processes on these cores make the times noisy.".format(*timing["load"]),
        f"Time per call in ms: the minimum over {settings.repeats} repeats of the mean over a "
        f"block of calls lasting >= {settings.block_s * 1000:.0f} ms, methods interleaved within "
        "each repeat; inputs allocated once. forward: inputs without requires_grad. "
        "forward+backward: `torch.autograd.backward((o, a), (go, ga))`. "
        "torch.compile: default inductor, compiled afresh per size (static shapes) and warmed "
        "before timing. floor: q@k.T, a@v, addmm(ga, go, v.T), a.T@go, gx@k, gx.T@q, one "
        "eager tanh (this build's at::tanh) and one aten.tanh_backward, timed as one sequence."
        + ("" if timing["has_native"] else " torch.attn does not exist in this build: n/a."),
        "",
        table(["n, d, dv", "pass", *(LABELS[c] for c in columns)], time_rows),
        "",
        f"Peak memory of one forward+backward at n, d, dv = {fmt_size(memory['size'])}: "
        "each method in a fresh process, after a warm-up at "
        f"{fmt_size(MEMORY_WARM_SIZE)} (torch.compile: dynamic shapes, so nothing compiles in "
        "the step), with glibc's mmap threshold fixed at 64 KiB so that freed tensors leave "
        "RSS; inputs and output grads allocated, then the peak RSS is reset "
        "(/proc/self/clear_refs) and the growth VmHWM - VmRSS is read after the step.",
        "",
        table(["method", "peak RSS growth (MB)", "/ composite"], mem_rows),
        *tanh_section(results.get("tanh"), settings),
        *accuracy_section(results.get("accuracy")),
        *profile_section(timing.get("profile")),
        "",
        "Targets:",
        "",
        table(["target", "where", "ratio", "verdict"], check_rows),
        "",
        f"{tally['met']} met, {tally['not met']} not met, {tally['n/a']} n/a",
    ]) + "\n"  # fmt: skip


def tanh_section(tanh: dict | None, settings: Settings) -> list[str]:
    if not tanh:
        return []
    rows = [
        [r["capability"] + (" (this CPU's)" if r["capability"] == tanh["own"] else ""),
         str(r["threads"]), *(fmt_ms(r["ms"].get(b)) for b in TANH_BUILDS),
         f"{r['ms'][TANH_BUILDS[0]] / r['ms'][TANH_BUILDS[1]]:.2f}"]
        for r in tanh["rows"]
    ]  # fmt: skip
    return [
        "",
        f"`torch.tanh(x, out=y)` over {fmt_size(TANH_SHAPE)} float32 standard normal values, ms "
        f"per call (minimum over {settings.repeats} repeats, as above). v2.6.0: the wheel's own "
        "torch (MKL VML's tanh); this stack: PR 5's kernel through the overlay; each build and "
        "ATEN_CPU_CAPABILITY in a process of its own.",
        "",
        table(["capability", "threads", *TANH_BUILDS, "v2.6.0 / this stack"], rows),
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
        f"Where native torch.attn's forward+backward goes at n, d, dv = "
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


def best_times(steps: dict[object, Callable[[], object]], repeats: int, block_s: float) -> dict:
    """ms per call of each step: min over repeats of a block's mean.

    Steps are interleaved within each repeat so that load from other processes on the machine
    hits every step alike (and the ratios between them less); the minimum keeps the least
    disturbed repeat.
    """
    numbers = {}
    for name, step in steps.items():
        step()  # warm-up: compiles, lazily allocated buffers
        step()
        started = time.perf_counter()
        step()
        numbers[name] = max(1, math.ceil(block_s / max(time.perf_counter() - started, 1e-9)))
    best = dict.fromkeys(steps, math.inf)
    for _ in range(repeats):
        for name, step in steps.items():
            started = time.perf_counter()
            for _ in range(numbers[name]):
                step()
            best[name] = min(best[name], (time.perf_counter() - started) / numbers[name])
    return {name: seconds * 1000 for name, seconds in best.items()}


# --- the workers: run with the venv's Python, import torch ---------------------------------


def threads() -> int:
    """As many threads as this process may run on (the machines have 2 cores)."""
    return len(os.sched_getaffinity(0))


def load_torch(fork: Path):
    """torch with threads fixed, plus the methods by name (native only if torch.attn exists)."""
    import torch

    sys.path.insert(0, str(fork / "test"))
    argv, sys.argv = sys.argv, sys.argv[:1]  # common_utils parses sys.argv when imported
    try:
        from test_attn_gradcheck import Attn
    finally:
        sys.argv = argv
    torch.set_num_threads(threads())

    def composite(q, k, v):
        a = torch.tanh(q @ k.T)
        return a @ v, a

    methods = {"composite": composite, "function": Attn.apply}
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
    """The work no implementation can skip: six GEMMs, one tanh pass, one tanh-backward pass.

    tanh is this build's eager at::tanh (PR 5's kernel at the stack's tip); ga + go @ v.T is
    one addmm.
    """
    q, k, v = q.detach(), k.detach(), v.detach()

    def step():
        a = torch.tanh(torch.mm(q, k.T))
        torch.mm(a, v)
        torch.mm(a.T, go)
        gx = torch.ops.aten.tanh_backward(torch.addmm(ga, go, v.T), a)
        torch.mm(gx, k)
        torch.mm(gx.T, q)

    return step


def profile(torch, fn, size, rounds: int = 5) -> dict:
    """Self CPU time per forward+backward step of `fn`, op by op, under torch.profiler: the
    least disturbed of `rounds` rounds of PROFILE_STEPS steps (as best_times takes minima)."""
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
    load_before = os.getloadavg()[0]
    rows = []
    for size in settings.sizes:
        torch._dynamo.reset()  # a static compile per size, as a user with fixed shapes gets
        fns = {**methods, "compile": torch.compile(methods["composite"])}
        q, k, v, _, _ = inputs(torch, size, grad=False)
        steps = {(FWD, m): (lambda fn=fn, q=q, k=k, v=v: fn(q, k, v)) for m, fn in fns.items()}
        args = inputs(torch, size, grad=True)
        steps.update({(FWD_BWD, m): train_step(torch, fn, *args) for m, fn in fns.items()})
        steps[FWD_BWD, "floor"] = floor_step(torch, *args)
        ms = best_times(
            steps, settings.repeats, settings.block_s
        )  # one call: one set of conditions
        for name in (FWD, FWD_BWD):
            row = {m: t for (p, m), t in ms.items() if p == name}
            rows.append({"size": size, "pass": name, "ms": row})
            print(
                f"bench: {fmt_size(size)} {name}: "
                + ", ".join(f"{m} {fmt_ms(t)} ms" for m, t in row.items()),
                file=sys.stderr,
            )
    found = {
        "torch": torch.__version__,
        "cpu": cpu_model(),
        "threads": torch.get_num_threads(),
        "has_native": "native" in methods,
        "load": [load_before, os.getloadavg()[0]],
        "rows": rows,
    }
    if settings is FULL and "native" in methods:
        found["profile"] = profile(torch, methods["native"], SIZES[0])
    return found


def tanh_worker(settings: Settings) -> dict:
    """ms per torch.tanh over TANH_SHAPE at 1 thread and at all of them, in this process's
    torch (which one, and whether it is this stack's, goes with the result)."""
    import torch

    x = torch.randn(TANH_SHAPE, generator=torch.Generator().manual_seed(0))
    y = torch.empty_like(x)
    ms = {}
    for count in sorted({1, threads()}):
        torch.set_num_threads(count)
        step = {"tanh": lambda: torch.tanh(x, out=y)}
        ms[str(count)] = best_times(step, settings.repeats, settings.block_s)["tanh"]
    return {
        "torch": torch.__file__,
        "capability": tanh_accuracy.capability_name(torch.backends.cpu.get_cpu_capability()),
        "has_attn": hasattr(torch, "attn"),
        "ms": ms,
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
    torch, methods = load_torch(fork)
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


def plot(timing: dict, png: Path) -> None:
    """Time per method against n, forward+backward, log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row in timing["rows"] if row["pass"] == FWD_BWD]
    fig, ax = plt.subplots(figsize=(7, 5))
    for method in (*METHODS, "floor"):
        points = [(row["size"][0], row["ms"][method]) for row in rows if row["ms"].get(method)]
        if points:
            ax.plot(
                *zip(*points, strict=False),
                "--" if method == "floor" else "-o",
                label=LABELS[method],
            )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="n  (d, dv as in bench.md)",
        ylabel="ms per call",
        title=f"attn forward+backward, float32, {timing['threads']} threads",
    )
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.savefig(png, dpi=120, bbox_inches="tight")


# --- the tool side: runs under the system Python --------------------------------------------


def spawn(layout: Layout, *args: str, env: dict[str, str] | None = None) -> bool:
    """Run this module under the venv's Python; its stderr (progress, tracebacks) shows live."""
    env = {**os.environ, **layout.python_env, **(env or {})}
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
    print(f"bench: the {command} worker failed ({' '.join(args)})", file=sys.stderr)
    return None


def tanh_speed(layout: Layout) -> dict | None:
    """torch.tanh's times, v2.6.0's kernel against this stack's, under each CPU capability.

    v2.6.0 is the unpacked wheel's own torch (PYTHONPATH first, so the fork's is not imported
    and the overlay does nothing); each result says which torch ran, and is refused if that
    is not the build it is labelled with.
    """
    builds = dict(zip(TANH_BUILDS, ({"PYTHONPATH": str(layout.wheel_tree)}, {}), strict=True))
    capabilities = tanh_accuracy.supported(layout)
    found = {}
    for capability in capabilities:
        for build, env in builds.items():
            got = worker(layout, "tanh", env={**env, "ATEN_CPU_CAPABILITY": capability})
            if got is None:
                return None
            if got["capability"] != capability or got["has_attn"] != (build == "this stack"):
                print(f"bench: {build} [{capability}] ran {got['torch']} as {got['capability']}",
                      file=sys.stderr)  # fmt: skip
                return None
            found[capability, build] = got["ms"]
    rows = [
        {"capability": c, "threads": int(t), "ms": {b: found[c, b][t] for b in TANH_BUILDS}}
        for c in capabilities
        for t in found[c, TANH_BUILDS[1]]
    ]
    return {"own": capabilities[-1], "rows": rows}  # torch picks the highest one by default


def run(layout: Layout, out_dir: Path, quick: bool) -> int:
    """Time every method, measure peak memory, and (full run) time and check tanh, profile
    the native op; write bench.md, bench.json and bench.png."""
    started = time.monotonic()
    out_dir.mkdir(parents=True, exist_ok=True)
    timing = worker(layout, "timing", str(layout.fork), *(["--quick"] if quick else []))
    if timing is None:
        return 1
    mb = {}
    for method in [m for m in METHODS if m != "native" or timing["has_native"]]:
        found = worker(layout, "memory", str(layout.fork), "--method", method, env=MEMORY_ENV)
        if found is None:
            return 1
        mb[method] = found["mb"]
    results = {"timing": timing, "memory": {"size": MEMORY_SIZE, "mb": mb}}
    if not quick:
        results["tanh"] = tanh_speed(layout)
        if results["tanh"] is None:
            return 1
        log = lambda line: print(f"bench: {line}", file=sys.stderr)  # noqa: E731
        results["accuracy"] = [asdict(r) for r in tanh_accuracy.run(layout, log)]
    (out_dir / "bench.json").write_text(json.dumps(results, indent=1))
    text = report(results, QUICK if quick else FULL)
    (out_dir / "bench.md").write_text(text)
    print(text)
    png = out_dir / "bench.png"
    png.unlink(missing_ok=True)
    if not spawn(layout, "plot", str(out_dir / "bench.json"), str(png)):
        print("bench: no plot (is matplotlib installed in .venv?)", file=sys.stderr)
    written = "bench.md, bench.json" + (", bench.png" if png.exists() else "")
    print(f"bench: wrote {written} to {out_dir} in {time.monotonic() - started:.0f} s")
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
        result = tanh_worker(FULL)
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
