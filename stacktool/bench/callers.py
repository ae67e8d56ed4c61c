"""The table of tanh's other callers (PR 5 makes at::vec's Vectorized<float>::tanh its kernel,
and gives GELU's tanh approximation a kernel of its own): GELU's tanh approximation forward and
backward, mish, BFloat16 and Half tanh and GELU, strided rows and rows of 17, torch.compile's
tanh and GELU, with torch.tanh and a copy of the same tensor beside them. Out of place, a
2048 x 2048 tensor (float32 unless said), per capability, v2.6.0 (the wheel's own torch) and
this stack; each case at 1 thread, the eager ones also at 2 threads alone and beside one
busy-loop process (CONDITIONS). Each build runs in two worker processes (`callers_worker`),
in the order v2.6.0, this stack, this stack, v2.6.0, and keeps each case's faster process:
the two builds run the same code at default, where one process each differed by up to
25%. The targets (targets.py) are ratios within one process, or v2.6.0 / this stack.
"""

import time

from stacktool import tanh_accuracy
from stacktool.bench.common import Settings, threads
from stacktool.bench.contended import COMPETITOR_FACTOR, COMPETITOR_GRACE_S, competitor
from stacktool.bench.measure import measure
from stacktool.bench.workers import worker
from stacktool.config import Layout
from stacktool.suites import INDUCTOR_CACHE

CALLER_CASES = {  # name: what is timed, x = randn(2048, 2048) (g: the same) unless said
    "copy": "x.clone()",
    "tanh": "torch.tanh(x)",
    "gelu(tanh)": 'F.gelu(x, approximate="tanh")',
    "gelu(tanh) backward": 'torch.ops.aten.gelu_backward(g, x, approximate="tanh")',
    "mish": "F.mish(x)",
    "bf16 tanh": "torch.tanh(x), x bfloat16",
    "bf16 gelu(tanh)": 'F.gelu(x, approximate="tanh"), x bfloat16',
    "half tanh": "torch.tanh(x), x float16",
    "half gelu(tanh)": 'F.gelu(x, approximate="tanh"), x float16',
    "strided tanh": "torch.tanh(x[:, ::2])",
    "strided gelu(tanh)": 'F.gelu(x[:, ::2], approximate="tanh")',
    "rows of 17 tanh": "torch.tanh(y[:, :17]), y = randn(246724, 32)",
    "rows of 17 gelu(tanh)": 'F.gelu(y[:, :17], approximate="tanh")',
    "compiled tanh": "torch.compile(torch.tanh)(x)",
    "compiled gelu(tanh)": 'torch.compile(F.gelu)(x, approximate="tanh")',
}
COMPILED = ("compiled tanh", "compiled gelu(tanh)")  # 1 thread only: see callers_worker
CONDITIONS = ("1 thread", "2 threads", "2 threads, busy neighbour")
V260 = "v2.6.0"
STACK = "this stack"
ORDER = (V260, STACK, STACK, V260)  # the worker processes per capability


def caller_steps(torch) -> dict:
    """{case: a call of it}, on seeded inputs; the compiled ones compile at their first call."""
    functional = torch.nn.functional
    g = torch.Generator().manual_seed(0)
    x, grad = torch.randn(2048, 2048, generator=g), torch.randn(2048, 2048, generator=g)
    bf16, half = x.to(torch.bfloat16), x.to(torch.float16)
    strided, rows = x[:, ::2], torch.randn(246724, 32, generator=g)[:, :17]
    compiled_tanh = torch.compile(torch.tanh)
    compiled_gelu = torch.compile(functional.gelu)
    found = {
        "copy": lambda: x.clone(),
        "tanh": lambda: torch.tanh(x),
        "gelu(tanh)": lambda: functional.gelu(x, approximate="tanh"),
        "gelu(tanh) backward": lambda: torch.ops.aten.gelu_backward(grad, x, approximate="tanh"),
        "mish": lambda: functional.mish(x),
        "bf16 tanh": lambda: torch.tanh(bf16),
        "bf16 gelu(tanh)": lambda: functional.gelu(bf16, approximate="tanh"),
        "half tanh": lambda: torch.tanh(half),
        "half gelu(tanh)": lambda: functional.gelu(half, approximate="tanh"),
        "strided tanh": lambda: torch.tanh(strided),
        "strided gelu(tanh)": lambda: functional.gelu(strided, approximate="tanh"),
        "rows of 17 tanh": lambda: torch.tanh(rows),
        "rows of 17 gelu(tanh)": lambda: functional.gelu(rows, approximate="tanh"),
        "compiled tanh": lambda: compiled_tanh(x),
        "compiled gelu(tanh)": lambda: compiled_gelu(x, approximate="tanh"),
    }
    assert list(found) == list(CALLER_CASES)
    return found


def callers_worker(settings: Settings) -> dict:
    """ms per call of each case in this process's torch: every case at 1 thread, then the
    eager ones at 2 threads (this machine's cores), alone, then beside one busy-loop process."""
    import torch
    from torch.utils.benchmark import Timer

    # inductor fixes a kernel's thread count when it compiles it (at the first call, before
    # the Timer sets its own): 1 from the start, and the compiled cases at 1 thread only
    torch.set_num_threads(1)
    cases = caller_steps(torch)
    rows = []
    started = time.monotonic()
    found = measure({case: (step, 1) for case, step in cases.items()}, settings, Timer)
    rows += [{"case": case, "condition": CONDITIONS[0], **found[case]} for case in cases]
    eager = {case: (step, threads()) for case, step in cases.items() if case not in COMPILED}
    if threads() > 1:
        found = measure(eager, settings, Timer)
        rows += [{"case": case, "condition": CONDITIONS[1], **found[case]} for case in eager]
        seconds = COMPETITOR_GRACE_S + COMPETITOR_FACTOR * (time.monotonic() - started)
        with competitor(seconds):
            found = measure(eager, settings, Timer)
        rows += [{"case": case, "condition": CONDITIONS[2], **found[case]} for case in eager]
    return {
        "torch": torch.__file__,
        "capability": tanh_accuracy.capability_name(torch.backends.cpu.get_cpu_capability()),
        "has_attn": hasattr(torch, "attn"),
        "rows": rows,
    }


def callers_speed(layout: Layout, log) -> dict | None:
    """The callers table: v2.6.0 and this stack at every capability this CPU has, two
    processes each (ORDER); a row per capability, case and condition with each build's ms, the
    faster of its processes'. v2.6.0's torch.compile caches in a folder of its own (its
    kernels include the wheel's headers, not the tree's)."""
    capabilities = tanh_accuracy.supported(layout)
    rows: dict = {}
    for capability in capabilities:
        for build in ORDER:
            # inductor compiles in the worker itself: no pool of compile processes left
            # beside the 2-thread cases (the stack's processes, compiling anew, were slower)
            env = {"ATEN_CPU_CAPABILITY": capability, "ATEN_CPU_FLOAT_TANH": None,
                   "TORCHINDUCTOR_COMPILE_THREADS": "1"}  # fmt: skip
            if build == V260:
                env["PYTHONPATH"] = str(layout.wheel_tree)
                env[INDUCTOR_CACHE] = str(layout.build / "inductor-cache" / V260 / capability)
            log(f"tanh's callers [{capability}]: {build} ({len(CALLER_CASES)} cases, a "
                "process of its own)")  # fmt: skip
            got = worker(layout, "callers", env=env)
            if got is None:
                return None
            if (got["capability"], got["has_attn"]) != (capability, build == STACK):
                log(f"{build} [{capability}] ran {got['torch']} as {got['capability']}")
                return None
            for r in got["rows"]:
                row = rows.setdefault((capability, r["case"], r["condition"]), {
                    "capability": capability, "case": r["case"], "condition": r["condition"],
                    "ms": {}, "rounds_ms": {}})  # fmt: skip
                row["ms"][build] = min(r["ms"], row["ms"].get(build, r["ms"]))
                row["rounds_ms"].setdefault(build, []).extend(r["rounds_ms"])
    return {"capabilities": capabilities, "rows": list(rows.values())}
