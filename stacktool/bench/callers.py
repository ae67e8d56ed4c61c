"""The table of tanh's other callers (PR 5 makes at::vec's Vectorized<float>::tanh its kernel):
GELU's tanh approximation forward and backward, mish, BFloat16 tanh and GELU, torch.compile's
tanh and GELU, with torch.tanh and a copy of the same tensor beside them. Out of place, 1
thread, a 2048 x 2048 tensor (float32 unless said), per capability, v2.6.0 (the wheel's own
torch) and this stack, each in a worker process of its own (`callers_worker`); the targets
(targets.py) are ratios within one process, or v2.6.0 / this stack.
"""

from stacktool import tanh_accuracy
from stacktool.bench.common import Settings
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
    "compiled tanh": "torch.compile(torch.tanh)(x)",
    "compiled gelu(tanh)": 'torch.compile(F.gelu)(x, approximate="tanh")',
}
V260 = "v2.6.0"
STACK = "this stack"


def caller_steps(torch) -> dict:
    """{case: a call of it}, on seeded inputs; the compiled ones compile at their first call."""
    functional = torch.nn.functional
    g = torch.Generator().manual_seed(0)
    x, grad = torch.randn(2048, 2048, generator=g), torch.randn(2048, 2048, generator=g)
    half = x.to(torch.bfloat16)
    compiled_tanh = torch.compile(torch.tanh)
    compiled_gelu = torch.compile(functional.gelu)
    found = {
        "copy": lambda: x.clone(),
        "tanh": lambda: torch.tanh(x),
        "gelu(tanh)": lambda: functional.gelu(x, approximate="tanh"),
        "gelu(tanh) backward": lambda: torch.ops.aten.gelu_backward(grad, x, approximate="tanh"),
        "mish": lambda: functional.mish(x),
        "bf16 tanh": lambda: torch.tanh(half),
        "bf16 gelu(tanh)": lambda: functional.gelu(half, approximate="tanh"),
        "compiled tanh": lambda: compiled_tanh(x),
        "compiled gelu(tanh)": lambda: compiled_gelu(x, approximate="tanh"),
    }
    assert list(found) == list(CALLER_CASES)
    return found


def callers_worker(settings: Settings) -> dict:
    """ms per call of each case in this process's torch, at 1 thread."""
    import torch
    from torch.utils.benchmark import Timer

    # inductor fixes a kernel's thread count when it compiles it (at the first call, before
    # the Timer sets its own): 1 from the start
    torch.set_num_threads(1)
    steps = {case: (step, 1) for case, step in caller_steps(torch).items()}
    found = measure(steps, settings, Timer)
    return {
        "torch": torch.__file__,
        "capability": tanh_accuracy.capability_name(torch.backends.cpu.get_cpu_capability()),
        "has_attn": hasattr(torch, "attn"),
        "rows": [{"case": case, **found[case]} for case in steps],
    }


def callers_speed(layout: Layout, log) -> dict | None:
    """The callers table: v2.6.0 and this stack at every capability this CPU has, a process
    each; a row per capability and case with each build's ms. v2.6.0's torch.compile caches in
    a folder of its own (its kernels include the wheel's headers, not the tree's)."""
    capabilities = tanh_accuracy.supported(layout)
    rows: dict = {}
    for capability in capabilities:
        for build in (V260, STACK):
            env = {"ATEN_CPU_CAPABILITY": capability, "ATEN_CPU_FLOAT_TANH": None}
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
                row = rows.setdefault((capability, r["case"]), {
                    "capability": capability, "case": r["case"], "ms": {}, "rounds_ms": {}})  # fmt: skip
                row["ms"][build] = r["ms"]
                row["rounds_ms"][build] = r["rounds_ms"]
    return {"capabilities": capabilities, "rows": list(rows.values())}
