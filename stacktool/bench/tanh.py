"""The tanh table: `torch.tanh(x, out=y)` per case and CPU capability, for v2.6.0 (the wheel's
own torch), Sleef u10 (in v2.6.0's process) and this stack.

v2.6.0's tanh runs only in the wheel's own torch (the overlay leaves it alone), so each build
and capability is timed by a worker process of its own (`tanh_worker`); `tanh_speed` runs them
and merges their rows.
"""

from pathlib import Path

from stacktool import tanh_accuracy
from stacktool.bench import sleef
from stacktool.bench.common import Settings, say, threads
from stacktool.bench.measure import measure
from stacktool.bench.workers import worker
from stacktool.config import Layout

TANH_CASES = {  # name: what is timed, `torch.tanh(x, out=y)` with y contiguous, float32 unless said
    "contiguous": "x = randn(2048, 2048)",
    "inner stride 2": "x = randn(2048, 4096)[:, ::2] (4M floats)",
    "rows of 17": "x = randn(65536, 64)[:, :17]",
    "rows of 31": "x = randn(65536, 64)[:, :31]",
    "bf16 inner stride 2": "x = randn(2048, 4096, dtype=bfloat16)[:, ::2]",
    "column": "x = randn(4096, 1024)[:, 0] (4096 elements at stride 1024)",
    "permuted": "x = randn(128, 128, 256).permute(2, 0, 1) (no two dims coalesce)",
}
# Sleef's tanh is what Vectorized<float>::tanh calls with AVX2 and AVX512; the default
# capability's Vectorized<float>::tanh is std::tanh element by element, so no Sleef there.
SLEEF_CAPABILITIES = ("avx2", "avx512")


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


def tanh_worker(settings: Settings, sleef_dir: Path | None) -> dict:
    """ms per tanh of each case in this process's torch (which one, and whether it is this
    stack's, goes with the result); with `sleef_dir`, Sleef u10's too, built there."""
    import torch
    from torch.utils.benchmark import Timer

    capability = tanh_accuracy.capability_name(torch.backends.cpu.get_cpu_capability())
    impls = {"torch": lambda x, y: torch.tanh(x, out=y)}
    if sleef_dir is not None:
        say(f"building the Sleef u10 extension [{capability}] in {sleef_dir} (cached)")
        impls["sleef"] = sleef.load(torch, sleef_dir, capability)
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
