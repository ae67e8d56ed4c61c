"""Bad input and reduced precision through every caller of PR 5's tanh, against v2.6.0.

PR 5 makes at::vec's Vectorized<float>::tanh its kernel, so torch.tanh, GELU's tanh
approximation and mish all take it. A worker process (`python -m stacktool.reduced_bits
OUT.json`) computes, in its torch: for BFloat16 and Half, tanh, GELU(tanh) and mish of every
one of the 65,536 inputs; for float32, those and GELU(tanh)'s backward at the special
inputs (+-0, +-inf, NaNs of either sign and payload, denormals, the largest floats). `task`
runs it under this stack's torch and under v2.6.0's (the unpacked wheel's), at one
capability, and compares: BFloat16 and Half tanh must give v2.6.0's bits for every input;
GELU and mish v2.6.0's bits wherever v2.6.0 gives NaN and for the inputs +-0, +-inf and NaN
(the other results may differ in their last bits: their count is reported); float32's
special inputs what v2.6.0 gives (NaN for NaN, the same bits otherwise; through GELU, its
backward and mish only +-0, +-inf, NaN and denormals, as PR 5's GELU kernel is another
formula: at the largest floats v2.6.0's backward gives NaN, PR 5's 1 and 0's neighbourhood,
the true limits). And which code ran:
at avx2 and avx512 float32 GELU and mish on a grid of 65,537 points in [-10, 10] must differ
from v2.6.0's somewhere (the recompiled callers round differently, so the check fails if the
wheel's kernels still ran); at default nothing may differ (v2.6.0's code there).
"""

import json
import sys
import tempfile
import time
from pathlib import Path

from stacktool.config import Layout
from stacktool.suites import Processes, Result, Task, suite_env

NAME = "tanh's callers, BFloat16/Half every input and float32 special inputs, against v2.6.0"
SPECIAL_BITS = (
    0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
    0xFFC12345, 0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0xC1200000,
)  # fmt: skip


def compute() -> dict:
    """{name: result bits} in this process's torch (see module doc)."""
    import torch

    functional = torch.nn.functional
    ops = {
        "tanh": torch.tanh,
        "gelu": lambda t: functional.gelu(t, approximate="tanh"),
        "mish": functional.mish,
    }
    found = {"capability": torch.backends.cpu.get_cpu_capability(), "attn": hasattr(torch, "attn")}
    every = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    for dtype in (torch.bfloat16, torch.float16):
        for name, op in ops.items():
            found[f"{dtype} {name}"] = op(every.view(dtype)).view(torch.int16).tolist()
    x = torch.tensor([b - (1 << 32) if b >= 1 << 31 else b for b in SPECIAL_BITS])
    x = x.to(torch.int32).view(torch.float32)
    ops["gelu backward"] = lambda t: torch.ops.aten.gelu_backward(
        torch.ones_like(t), t, approximate="tanh"
    )
    for name, op in ops.items():
        found[f"float32 {name}"] = op(x).view(torch.int32).tolist()
    grid = torch.linspace(-10, 10, 65537)  # where the kernels round differently
    for name in ("gelu", "mish"):
        found[f"float32 grid {name}"] = ops[name](grid).view(torch.int32).tolist()
    return found


def is_nan(bits: int, kind: str) -> bool:
    """Whether `bits` (a signed int of the dtype's width) is a NaN of dtype `kind`."""
    if kind.startswith("torch.float16"):
        u = bits & 0xFFFF
        return (u & 0x7C00) == 0x7C00 and (u & 0x03FF) != 0
    if kind.startswith("torch.bfloat16"):
        u = bits & 0xFFFF
        return (u & 0x7F80) == 0x7F80 and (u & 0x007F) != 0
    u = bits & 0xFFFFFFFF
    return (u & 0x7F800000) == 0x7F800000 and (u & 0x007FFFFF) != 0


def special(bits: int, kind: str) -> bool:
    """Whether input `bits` of dtype `kind` is +-0, +-inf or NaN."""
    inf = 0x7C00 if kind.startswith("torch.float16") else 0x7F80
    magnitude = bits & 0x7FFF
    return magnitude in (0, inf) or is_nan(bits, kind)


def special32(bits: int) -> bool:
    """Whether float32 input `bits` is +-0, +-inf, NaN or a denormal (exponent 0 or 255)."""
    return (bits & 0x7F800000) in (0, 0x7F800000)


def compare(stack: dict, v260: dict) -> tuple[list[str], dict[str, int]]:
    """(what breaks the rules of the module doc, {name: results that differ otherwise}).

    Exact: BFloat16 and Half tanh everywhere; GELU and mish where v2.6.0 gives NaN or the
    input is +-0, +-inf or NaN; float32 tanh at every special input, its callers at +-0,
    +-inf, NaN and denormals (NaN for NaN).
    """
    broken, differ = [], {}
    for name, theirs in v260.items():
        if name in ("capability", "attn"):
            continue
        ours, count = stack[name], 0
        for k, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            if a == b:
                continue
            if name.startswith("float32 grid"):
                count += 1  # last bits: the kernel's own rounding
                continue
            if name.startswith("float32"):
                if is_nan(a, name) and is_nan(b, name):  # NaN stays NaN
                    continue
                if name == "float32 tanh" or special32(SPECIAL_BITS[k]):
                    broken.append(
                        f"{name}: input {k}: {a & 0xFFFFFFFF:#x}, v2.6.0 {b & 0xFFFFFFFF:#x}"
                    )
                else:
                    count += 1  # the largest floats, 1 and -10 through GELU or mish
                continue
            if name.endswith(" tanh") or is_nan(b, name) or special(k - 32768, name):
                broken.append(f"{name}: input {k}: {a & 0xFFFF:#x}, v2.6.0 {b & 0xFFFF:#x}")
            else:
                count += 1
        differ[name] = count
    return broken, differ


def task(layout: Layout, capability: str) -> Task:
    """The gate's check at `capability` (two worker processes, one after the other)."""

    def check(processes: Processes) -> tuple[Result, str]:
        started, found = time.monotonic(), {}
        for build, extra in (
            ("this stack", {}),
            ("v2.6.0", {"PYTHONPATH": str(layout.wheel_tree)}),
        ):
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "result.json"
                env = suite_env(layout, {**extra, "ATEN_CPU_CAPABILITY": capability})
                proc = processes.run([str(layout.python), "-m", "stacktool.reduced_bits", str(out)],
                                     cwd=Path(__file__).resolve().parent.parent, env=env)  # fmt: skip
                if proc.returncode != 0:
                    return Result(
                        name, failed=1, note=f"{build}'s worker failed"
                    ), proc.stdout + proc.stderr
                found[build] = json.loads(out.read_text())
            if found[build]["attn"] != (build == "this stack"):  # which torch it imported
                return Result(name, failed=1, note=f"{build}'s worker ran another torch"), ""
        broken, differ = compare(found["this stack"], found["v2.6.0"])
        # which GELU and mish ran: the AVX builds' recompiled ones (vec_callers) round
        # differently from v2.6.0's somewhere on the grid; DEFAULT's are v2.6.0's code
        grid = sum(c for n, c in differ.items() if n.startswith("float32 grid"))
        if capability == "default" and any(differ.values()):
            broken.append("default: results differ from v2.6.0's, whose code it keeps")
        elif capability != "default" and not all(
            differ[f"float32 grid {n}"] for n in ("gelu", "mish")
        ):  # fmt: skip
            broken.append(f"{capability}: GELU or mish gave v2.6.0's float32 results on the "
                          f"whole grid ({grid} differ): not PR 5's tanh")  # fmt: skip
        shown = ", ".join(f"{n} {c}" for n, c in differ.items() if c)
        note = (f"{len(broken)} broken; results that differ in their last bits: "
                f"{shown or 'none'}; {time.monotonic() - started:.0f} s")  # fmt: skip
        return Result(name, passed=int(not broken), failed=int(bool(broken)), note=note), "\n".join(
            broken[:20]
        )

    name = f"{NAME} [{capability}]"
    return Task(name, check)


def main(argv: list[str] | None = None) -> None:
    (out,) = argv or sys.argv[1:]
    Path(out).write_text(json.dumps(compute()))


if __name__ == "__main__":
    main()
