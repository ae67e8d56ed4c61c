"""The exhaustive accuracy check of CPU float32 `torch.tanh`: every one of the 2^32 inputs.

For each CPU capability this CPU supports (ATEN_CPU_CAPABILITY=default, avx2, avx512, as
upstream's CI configs set it), a worker process computes torch.tanh over every non-negative
float32 bit pattern and counts how far each result is, in ULP (float32 steps), from the
correctly rounded one: at most 1 is the bar. The correctly rounded result is float64 tanh
rounded to float32, except where it is known exactly (see `expected`). Every negative input
is checked bitwise against the odd symmetry tanh(-x) = -tanh(x), which also pins
tanh(-0) = -0; NaN must give NaN.

The tool runs under the system Python (no torch): `run` spawns the venv's Python on this
module (`python -m stacktool.tanh_accuracy CAPABILITY OUT.json`).
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stacktool.config import Layout
from stacktool.errors import StackError
from stacktool.suites import Result

CAPABILITIES = ("default", "avx2", "avx512")
CHUNK = 1 << 22
MAX_ULP = 1


def capability_name(reported: str) -> str:
    """ATEN_CPU_CAPABILITY's value for what torch.backends.cpu.get_cpu_capability() says
    ("NO AVX" for default, "AVX2", ...)."""
    reported = reported.strip().lower()
    return "default" if reported == "no avx" else reported


# What the hardware has, by the checks torch.backends.cpu exposes (aten/src/ATen/cpu/Utils.cpp).
# get_cpu_capability() cannot tell: it takes ATEN_CPU_CAPABILITY's word, so "avx512" on a CPU
# without AVX-512 reports AVX512 and crashes in the first AVX-512 kernel (CI's did, in import).
SUPPORT_CHECK = (
    "import torch; c = torch._C._cpu; "
    "print('default', 'avx2' * c._is_avx2_supported(), 'avx512' * c._is_avx512_supported())"
)


def supported(layout: Layout) -> list[str]:
    """The ATEN_CPU_CAPABILITY values this CPU can run."""
    env = {**os.environ, **layout.python_env}
    env.pop("ATEN_CPU_CAPABILITY", None)
    proc = subprocess.run(
        [str(layout.python), "-c", SUPPORT_CHECK], env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise StackError(f"cannot ask torch which CPU capabilities run:\n{proc.stderr[-2000:]}")
    found = proc.stdout.split()
    return [capability for capability in CAPABILITIES if capability in found]


def worker_env(layout: Layout, capability: str) -> dict[str, str]:
    return {**os.environ, **layout.python_env, "ATEN_CPU_CAPABILITY": capability}


def run(layout: Layout, log) -> list[Result]:
    """One result per capability: passed when max ULP <= 1, NaN kept and odd symmetry holds."""
    results, runnable = [], supported(layout)
    for capability in CAPABILITIES:
        name = f"tanh float32, all 2^32 inputs [{capability}]"
        if capability not in runnable:
            results.append(Result(name, skipped=1, note="this CPU does not support it"))
            continue
        started = time.monotonic()
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "result.json"
            proc = subprocess.run(
                [str(layout.python), "-m", "stacktool.tanh_accuracy", capability, str(out)],
                cwd=Path(__file__).resolve().parent.parent, env=worker_env(layout, capability),
                capture_output=True, text=True,
            )  # fmt: skip
            if proc.returncode != 0:
                print(proc.stdout + proc.stderr)
                results.append(Result(name, failed=1, note="the worker failed"))
                continue
            found = json.loads(out.read_text())
        ok = verdict(found)
        note = f"{summary(found)}; {time.monotonic() - started:.0f} s"
        log(f"{name}: {note}")
        results.append(Result(name, int(ok), int(not ok), note=note))
    return results


def verdict(found: dict) -> bool:
    return found["max_ulp"] <= MAX_ULP and not found["nan_lost"] and not found["not_odd"]


def summary(found: dict) -> str:
    return (
        f"max {found['max_ulp']} ULP from the correctly rounded result (at x = "
        f"{found['worst_x']!r}), {found['not_rounded']} of 2^32 not correctly rounded, "
        f"{found['nan_lost']} NaN lost, {found['not_odd']} break tanh(-x) = -tanh(x)"
    )


# Bit patterns (as int32) where the correctly rounded tanh is known without computing it:
# below 2^-12, |tanh(x) - x| < x^3/3 < half a ULP of x, so it is x; from 12 on (up to +inf),
# 1 - tanh(x) < 2 exp(-2x) < 2^-25 (half a ULP below 1), so it is 1; NaN above +inf.
TINY, SATURATED = 0x39800000, 0x41400000  # 2^-12, 12.0: multiples of CHUNK


def expected(torch, bits):
    """The correctly rounded float32 tanh of the float32 inputs whose bits are `bits`."""
    x = bits.view(torch.float32)
    first, last = int(bits[0]), int(bits[-1])
    if last < TINY:
        return x
    if first >= SATURATED:
        return torch.ones_like(x).masked_fill(x.isnan(), float("nan"))
    assert first >= TINY and last < SATURATED, "chunks must not straddle the region bounds"
    return torch.tanh(x.double()).float()


def check(torch) -> dict:
    """Every float32 input: the worst error, counts of the failures (see module doc)."""
    worst, worst_x, not_rounded, nan_lost, not_odd = 0, 0.0, 0, 0, 0
    bits = torch.arange(CHUNK, dtype=torch.int32)
    for _ in range((1 << 31) // CHUNK):
        x = bits.view(torch.float32)
        y, neg, want = torch.tanh(x), torch.tanh(-x), expected(torch, bits)
        sign = torch.iinfo(torch.int32).min
        nan = x.isnan()
        not_odd += int(((neg.view(torch.int32) != (y.view(torch.int32) ^ sign)) & ~nan).sum())
        nan_lost += int((nan & ~(y.isnan() & neg.isnan())).sum())
        # both non-negative: the distance between their bit patterns counts float32 steps
        ulp = (y.view(torch.int32) - want.view(torch.int32)).abs().masked_fill(nan, 0)
        not_rounded += int((ulp != 0).sum())
        at = int(ulp.argmax())
        if int(ulp[at]) > worst:
            worst, worst_x = int(ulp[at]), float(x[at])
        bits += CHUNK
    return {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "max_ulp": worst,
        "worst_x": worst_x,
        "not_rounded": 2 * not_rounded,  # the negative half mirrors it (not_odd counts breaks)
        "nan_lost": nan_lost,
        "not_odd": not_odd,
    }


def main(argv: list[str] | None = None) -> None:
    """The worker: `python -m stacktool.tanh_accuracy CAPABILITY OUT.json`."""
    capability, out = (argv or sys.argv[1:])[:2]
    import torch

    found = check(torch)
    if capability_name(found["capability"]) != capability:
        sys.exit(f"asked for {capability}, torch runs {found['capability']}")
    Path(out).write_text(json.dumps(found))


if __name__ == "__main__":
    main()
