"""The tanh table: `torch.tanh(x, out=y)` per case and CPU capability, for v2.6.0 (the wheel's
own torch), Sleef u10 (in v2.6.0's process), this stack as users get it (ATEN_CPU_FLOAT_TANH
unset), this stack with ATEN_CPU_FLOAT_TANH=vectorized, and a plain copy `y.copy_(x)`.
PR 5's kernel runs its vectorized tanh for float on every x86 CPU in the AVX2 and AVX512
builds unless ATEN_CPU_FLOAT_TANH=vml, so the unset column (what users get) and the vectorized
one run the same kernel there; both are kept, the first being the one users get.

v2.6.0's tanh runs only in the wheel's own torch (the overlay leaves it alone) and PR 5's
kernel reads ATEN_CPU_FLOAT_TANH once per process, so each build, setting and capability is
timed by a worker process of its own (`tanh_worker`); `tanh_speed` runs them and merges their
rows.
"""

import os
from pathlib import Path

from stacktool import tanh_accuracy
from stacktool.bench import sleef
from stacktool.bench.common import Settings, say, threads
from stacktool.bench.measure import measure
from stacktool.bench.workers import worker
from stacktool.config import Layout
from stacktool.overlay.compile import CORE_LIB

TANH_CASES = {  # name: what is timed, `torch.tanh(x, out=y)` with y contiguous, float32 unless said
    "contiguous": "x = randn(2048, 2048)",
    "in cache": "x = randn(16384) (16K floats, 64 KiB: in L2; times in ns per element)",
    "inner stride 2": "x = randn(2048, 4096)[:, ::2] (4M floats)",
    "rows of 17": "x = randn(65536, 64)[:, :17]",
    "rows of 31": "x = randn(65536, 64)[:, :31]",
    "bf16 inner stride 2": "x = randn(2048, 4096, dtype=bfloat16)[:, ::2]",
    "f16 inner stride 2": "x = randn(2048, 4096, dtype=float16)[:, ::2]",
    "column": "x = randn(4096, 1024)[:, 0] (4096 elements at stride 1024)",
    "permuted": "x = randn(128, 128, 256).permute(2, 0, 1) (no two dims coalesce)",
}
IN_CACHE = "in cache"  # 16K floats, which stay in L2 from call to call
# The cases whose times the table gives in ns per element, not ms per call: {case: elements}
PER_ELEMENT = {IN_CACHE: 16384}
# PR 5's kernel takes float's tanh with its vectorized kernel on every x86 CPU in the AVX2 and
# AVX512 builds, unless this variable says `vml` (`vectorized`, unset or empty: its own); it
# reads it once per process.
FLOAT_TANH = "ATEN_CPU_FLOAT_TANH"
VECTORIZED = "this stack, vectorized"  # the column of this stack with FLOAT_TANH=vectorized
# The capabilities whose builds PR 5 changes (DEFAULT keeps v2.6.0's code, so FLOAT_TANH does
# nothing there) and where Vectorized<float>::tanh is Sleef's (DEFAULT's is std::tanh).
VECTORIZED_CAPABILITIES = ("avx2", "avx512")
COLUMNS = {"sleef": "Sleef u10", "copy": "copy"}  # a worker's other steps, by column
INTEL = "GenuineIntel"  # /proc/cpuinfo's vendor_id on Intel CPUs


def tanh_inputs(torch) -> dict:
    """The input of each TANH_CASES case, seeded."""
    g = torch.Generator().manual_seed(0)

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dtype)

    found = {
        "contiguous": randn(2048, 2048),
        IN_CACHE: randn(PER_ELEMENT[IN_CACHE]),
        "inner stride 2": randn(2048, 4096)[:, ::2],
        "rows of 17": randn(65536, 64)[:, :17],
        "rows of 31": randn(65536, 64)[:, :31],
        "bf16 inner stride 2": randn(2048, 4096, dtype=torch.bfloat16)[:, ::2],
        "f16 inner stride 2": randn(2048, 4096, dtype=torch.float16)[:, ::2],
        "column": randn(4096, 1024)[:, 0],
        "permuted": randn(128, 128, 256).permute(2, 0, 1),
    }
    assert list(found) == list(TANH_CASES)
    return found


def tanh_worker(settings: Settings, sleef_dir: Path | None, copy: bool) -> dict:
    """ms per tanh of each case in this process's torch (which one, at which capability and
    FLOAT_TANH, goes with the result); with `sleef_dir`, Sleef u10's too, built there; with
    `copy`, `y.copy_(x)`'s at 1 thread. ms per call for every case, PER_ELEMENT's too (bench.md
    gives theirs per element)."""
    import torch
    from torch.utils.benchmark import Timer

    capability = tanh_accuracy.capability_name(torch.backends.cpu.get_cpu_capability())
    impls = {"torch": lambda x, y: torch.tanh(x, out=y)}
    if sleef_dir is not None:
        say(f"building the Sleef u10 extension [{capability}] in {sleef_dir} (cached)")
        impls["sleef"] = sleef.load(torch, sleef_dir, capability)
    if copy:
        impls["copy"] = lambda x, y: y.copy_(x)
    steps = {}
    for case, x in tanh_inputs(torch).items():
        y = torch.empty(x.shape, dtype=x.dtype)
        if "sleef" in impls:  # the same function as torch's, to the dtype's rounding
            torch.testing.assert_close(impls["sleef"](x, y), torch.tanh(x))
        for impl, fn in impls.items():
            both = case == "contiguous" and impl != "copy"  # contiguous tanh at 2 threads too
            for count in sorted({1, threads()} if both else {1}):
                steps[case, count, impl] = (lambda fn=fn, x=x, y=y: fn(x, y)), count
    found = measure(steps, settings, Timer)
    return {
        "torch": torch.__file__,
        "capability": capability,
        "has_attn": hasattr(torch, "attn"),
        "float_tanh": os.environ.get(FLOAT_TANH),
        "rows": [
            {"case": case, "threads": count, "impl": impl, **found[case, count, impl]}
            for case, count, impl in steps
        ],
    }


def tanh_rows(found: dict) -> list[dict]:
    """The tanh table from the workers' rows ({(capability, build): worker result}), a row per
    capability, case and thread count, with a time per column."""
    rows = {}
    for (capability, build), result in found.items():
        for r in result["rows"]:
            key = capability, r["case"], r["threads"]
            row = rows.setdefault(key, {"capability": capability, "case": r["case"],
                                        "threads": r["threads"], "ms": {}, "rounds_ms": {}})  # fmt: skip
            name = COLUMNS.get(r["impl"], build)
            row["ms"][name] = r["ms"]
            row["rounds_ms"][name] = r["rounds_ms"]
    return list(rows.values())


def processes(layout: Layout, capability: str) -> list[tuple[str, dict, list[str]]]:
    """(build, environment, worker arguments) of each tanh worker at `capability`: v2.6.0 (the
    unpacked wheel's torch, PYTHONPATH first, so the fork's is not imported and the overlay
    does nothing) with Sleef u10 where it has it, this stack with FLOAT_TANH unset, and this
    stack with FLOAT_TANH=vectorized where PR 5 changes the build. The copy is timed in the
    last one, so that the copy target's ratio comes from one process."""
    wheel = "v2.6.0", {"PYTHONPATH": str(layout.wheel_tree)}
    if capability not in VECTORIZED_CAPABILITIES:
        return [(*wheel, []), ("this stack", {}, ["--copy"])]
    return [
        (*wheel, ["--sleef", str(layout.build / "bench-sleef" / capability)]),
        ("this stack", {}, []),
        (VECTORIZED, {FLOAT_TANH: "vectorized"}, ["--copy"]),
    ]


def reads_float_tanh(layout: Layout) -> bool:
    """Whether this stack's overlay library names FLOAT_TANH (a kernel that reads it does)."""
    library = layout.overlay / CORE_LIB
    return library.exists() and FLOAT_TANH.encode() in library.read_bytes()


def tanh_speed(layout: Layout, log, vendor: str | None) -> dict | None:
    """The tanh table: every worker of every capability this CPU has, one process each, and
    this CPU's `vendor` (cpu.cpu_facts's; a target applies on Intel CPUs only). Each result
    says which torch ran, at which capability and FLOAT_TANH, and is refused if that is not
    what it is labelled with."""
    capabilities = tanh_accuracy.supported(layout)
    found = {}
    for capability in capabilities:
        for build, env, args in processes(layout, capability):
            named = [build, *(COLUMNS[arg[2:]] for arg in args if arg.startswith("--"))]
            log(f"tanh [{capability}]: {' and '.join(named)} ({len(TANH_CASES)} cases, a process "
                "of its own)")  # fmt: skip
            env = {FLOAT_TANH: None, **env, "ATEN_CPU_CAPABILITY": capability}
            got = worker(layout, "tanh", *args, env=env)
            if got is None:
                return None
            if (got["capability"], got["has_attn"], got["float_tanh"]) != (
                capability, build != "v2.6.0", env[FLOAT_TANH]
            ):  # fmt: skip
                log(f"{build} [{capability}] ran {got['torch']} as {got['capability']}, "
                    f"{FLOAT_TANH}={got['float_tanh']}")  # fmt: skip
                return None
            found[capability, build] = got
    return {
        "capabilities": capabilities,
        "reads_float_tanh": reads_float_tanh(layout),
        "cpu_vendor": vendor,
        "rows": tanh_rows(found),
    }
