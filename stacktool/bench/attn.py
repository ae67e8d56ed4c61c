"""The attn timing worker: forward and forward+backward of every method, the floor and the
GEMMs alone, size by size, at 1 thread and at all cores, in one process (ratios are only
meaningful within one), and a torch.profiler profile of the native op at the smallest size
(full run); or, in PR 4's tree (pr4.py), the native op alone."""

import os
import sys
import time
from pathlib import Path

from stacktool.bench.common import (
    FULL,
    FWD,
    FWD_BWD,
    SIZES,
    Settings,
    fmt_ms,
    fmt_size,
    fmt_threads,
    say,
    thread_counts,
    threads,
)
from stacktool.bench.measure import measure

PROFILE_STEPS = 500  # forward+backward steps of the native op per profiled round, at SIZES[0]
# torch.profiler's backend, kineto, asks the CUDA runtime for its GPUs when a profile starts,
# CPU-only activities too, and logs "ERROR: ... gpuGetDeviceCount failed" where there is no
# driver. Its own log level (5: above ERROR, its highest) is for the profiling worker only.
PROFILE_ENV = {"KINETO_LOG_LEVEL": "5"}


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
    """The ATen calls of PR 4's unfused torch.attn, forward and backward, with nothing around
    them (from PR 6 on, torch.attn no longer makes these calls).

    PR 4's kernel: a = mm(q, k.T); a.tanh_(); o = mm(a, v). Its attn_backward with both
    output grads and every input grad asked for: grad_v = a.T.mm(go); gx = addmm(ga, go,
    v.T) overwritten in place by tanh_backward_out(gx, gx, a); grad_q = gx.mm(k); grad_k =
    gx.T.mm(q). No graph, no saved tensors, no engine: PR 4's torch.attn did all of this and more.
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


def gemms_step(torch, q, k, v, go, ga, backward: bool):
    """The GEMMs of attn's shapes alone, each torch.mm into an output preallocated here.

    Forward: a = q k^T, o = a v; backward adds gv = a^T go, gx = go v^T, gq = gx k,
    gk = gx^T q. No tanh, no allocation, no autograd: what no implementation that calls BLAS
    for these GEMMs can beat. `ga` is unused (the arguments are floor_step's).
    """
    q, k, v = q.detach(), k.detach(), v.detach()
    n, dv = q.shape[0], v.shape[1]
    a, o, gv, gx = torch.empty(n, n), torch.empty(n, dv), torch.empty(n, dv), torch.empty(n, n)
    gq, gk = torch.empty_like(q), torch.empty_like(k)

    def forward():
        torch.mm(q, k.T, out=a)
        torch.mm(a, v, out=o)

    def step():
        forward()
        torch.mm(a.T, go, out=gv)
        torch.mm(go, v.T, out=gx)
        torch.mm(gx, k, out=gq)
        torch.mm(gx.T, q, out=gk)

    return step if backward else forward


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


def size_steps(torch, methods: dict, size, counts, baselines: bool = True) -> dict:
    """{(threads, pass, method): (step, threads)} at one size, for measure(): every method,
    the floor and the GEMMs alone (without `baselines`: the methods alone) at each thread
    count, on inputs allocated once. torch.compile compiles per thread count (its C++ kernels
    are built for one, `cpp.threads`), at first call: the composite, and torch.attn where it
    exists (its backward graph calls attn's kernel).
    """
    q, k, v, go, ga = inputs(torch, size, grad=False)
    args = inputs(torch, size, grad=True)
    forward = {m: (lambda fn=fn: fn(q, k, v)) for m, fn in methods.items()}
    both = {m: train_step(torch, fn, *args) for m, fn in methods.items()}
    if baselines:
        forward["gemms"] = gemms_step(torch, q, k, v, go, ga, backward=False)
        both["floor"] = floor_step(torch, *args)
        both["gemms"] = gemms_step(torch, *args, backward=True)
    steps = {}
    for count in counts:
        names = {"compile": "composite", "compile_attn": "native"} if baselines else {}
        compiled = {
            name: torch.compile(methods[method], options={"cpp.threads": count})
            for name, method in names.items()
            if method in methods
        }
        by_pass = {
            FWD: {**forward, **{m: (lambda fn=fn: fn(q, k, v)) for m, fn in compiled.items()}},
            FWD_BWD: {**both, **{m: train_step(torch, fn, *args) for m, fn in compiled.items()}},
        }
        for name, found in by_pass.items():
            steps.update({(count, name, m): (step, count) for m, step in found.items()})
    return steps


def time_worker(fork: Path, settings: Settings, native_only: bool = False) -> dict:
    """Forward and forward+backward times of every method, the floor and the GEMMs alone
    (`native_only`: native torch.attn alone, no profile), size by size, at 1 thread and at all
    of the machine's, interleaved in one measure(). The result names the torch file timed."""
    torch, methods = load_torch(fork, with_function=not native_only)
    if native_only:
        methods = {m: fn for m, fn in methods.items() if m == "native"}
    from torch.utils.benchmark import Timer

    counts = thread_counts()
    load_before = os.getloadavg()[0]
    rows = []
    for size in settings.sizes:
        say(f"timing at n, d, dv = {fmt_size(size)}, "
            f"{' and '.join(map(fmt_threads, counts))} (torch.compile compiles first)")  # fmt: skip
        torch._dynamo.reset()  # a static compile per size, as a user with fixed shapes gets
        steps = size_steps(torch, methods, size, counts, baselines=not native_only)
        found = measure(steps, settings, Timer)
        for count in counts:
            for name in (FWD, FWD_BWD):
                row = {m: t for (c, p, m), t in found.items() if (c, p) == (count, name)}
                rows.append({
                    "size": size, "threads": count, "pass": name,
                    "ms": {m: t["ms"] for m, t in row.items()},
                    "rounds_ms": {m: t["rounds_ms"] for m, t in row.items()},
                })  # fmt: skip
                say(f"{fmt_size(size)} {name}, {fmt_threads(count)}: "
                    + ", ".join(f"{m} {fmt_ms(t['ms'])} ms" for m, t in row.items()))  # fmt: skip
    found = {
        "torch": torch.__version__,
        "torch_file": torch.__file__,
        "threads": list(counts),
        "has_native": "native" in methods,
        "load": [load_before, os.getloadavg()[0]],
        "rows": rows,
    }
    if settings is FULL and "native" in methods and not native_only:
        say(f"profiling native torch.attn at n, d, dv = {fmt_size(SIZES[0])}")
        found["profile"] = profile(torch, methods["native"], SIZES[0])
    return found
