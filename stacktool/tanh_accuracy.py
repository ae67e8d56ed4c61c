"""The exhaustive accuracy check of CPU float32 `torch.tanh`: every one of the 2^32 inputs.

Once per distinct float kernel this CPU runs (`variants`): the DEFAULT build (v2.6.0's
code, MKL's VML for float; ATEN_CPU_FLOAT_TANH does nothing there), PR 5's tanh_float in
the AVX2 and AVX512 builds (ATEN_CPU_FLOAT_TANH=vectorized; compiled per capability), and
the `vml` branch of those builds' dispatch once, at the highest of them this CPU runs (its
float results are VML's, which MKL picks by itself whatever ATEN_CPU_CAPABILITY says), a
worker process computes torch.tanh over every non-negative float32 bit pattern and counts
how far each result is, in ULP (float32 steps), from the correctly rounded one: at most 1
is the bar. The correctly rounded result is float64 tanh rounded to float32, except where
it is known exactly (see `expected`). Every negative input is checked bitwise against the
odd symmetry tanh(-x) = -tanh(x), which also pins tanh(-0) = -0; NaN must give NaN. A
digest of where a run's results are not correctly rounded (a count per chunk of inputs)
shows that the variable's two values ran two kernels, and one of every result bit shows
that the `vml` branch computes DEFAULT's float results, bit for bit (`switched`).

The tool runs under the system Python (no torch): `tasks` spawn the venv's Python on this
module (`python -m stacktool.tanh_accuracy CAPABILITY OUT.json [THREADS]`).
"""

import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stacktool.config import Layout
from stacktool.errors import StackError
from stacktool.suites import Processes, Result, Task, suite_env

CAPABILITIES = ("default", "avx2", "avx512")
# PR 5's float kernel in the AVX2 and AVX512 builds, forced by this variable (unset or empty:
# vectorized); the DEFAULT build keeps v2.6.0's code and ignores it.
FLOAT_TANH = "ATEN_CPU_FLOAT_TANH"
FLOAT_KERNELS = ("vml", "vectorized")
# Inputs per step: 1 MB per intermediate, so that the dozen elementwise passes over a chunk
# run from cache, not memory: 1 << 22 took 15.5 s at avx512 alone, 16.1 s at avx2 beside
# =vml at avx512 (24.7 s); 1 << 18 took 11.2, 14.2 and 21.5 s (1 << 16: 12.5 s; Zen 4).
CHUNK = 1 << 18
RESULTS = "--results"  # the worker's flag: hash every result (check), for `switched`
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
    env = suite_env(layout)  # without ATEN_CPU_CAPABILITY: the hardware's word
    proc = subprocess.run(
        [str(layout.python), "-c", SUPPORT_CHECK], env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise StackError(f"cannot ask torch which CPU capabilities run:\n{proc.stderr[-2000:]}")
    found = proc.stdout.split()
    return [capability for capability in CAPABILITIES if capability in found]


def variants(capabilities, vml: str = "highest") -> list[tuple[str, str | None]]:
    """(capability, float kernel) of each run, one per distinct kernel of the capabilities
    this CPU runs: DEFAULT once (None: the variable unset, it does nothing there), AVX2 and
    AVX512 each with `vectorized` (tanh_float, compiled per capability; BFloat16 and Half
    take it under either value), and the `vml` branch: with vml="highest" once, at the
    highest of them (its float results are VML's, MKL's own code, the same at every
    capability, and DEFAULT's: `switched` checks it; every computation not in float32 runs
    there as under `vectorized`); with "each" at each of them (each build's own branch); with
    "" nowhere."""
    runs = [(capability, None if capability == "default" else "vectorized")
            for capability in capabilities]  # fmt: skip
    avx = [capability for capability in capabilities if capability != "default"]
    at = {"highest": avx[-1:], "each": avx, "": []}[vml]
    return [*runs, *((capability, "vml") for capability in at)]


def label(capability: str, kernel: str | None) -> str:
    """How a run's name says its variant: `[avx2, ATEN_CPU_FLOAT_TANH=vml]`, `[default]`."""
    return f"[{capability}]" if kernel is None else f"[{capability}, {FLOAT_TANH}={kernel}]"


def variant_env(capability: str, kernel: str | None) -> dict[str, str]:
    """The variables that force a variant (suites.suite_env drops any inherited ones)."""
    return {"ATEN_CPU_CAPABILITY": capability, **({FLOAT_TANH: kernel} if kernel else {})}


def name(capability: str, kernel: str | None) -> str:
    return f"tanh float32, all 2^32 inputs {label(capability, kernel)}"


def tasks(layout: Layout, runnable: list[str], found: dict) -> list[Task]:
    """One Task per variant this CPU runs (suites.run_all runs them; 69-111 s each in the
    gate, Zen 3); each puts what its worker found in `found[(capability, kernel)]`, for
    `switched`."""
    return [Task(name(cap, kernel), lambda processes, cap=cap, kernel=kernel:
                 check_variant(layout, cap, kernel, found, processes, threads=1,
                               hash_results=cap == "default" or kernel == "vml"), seconds=90)
            for cap, kernel in variants(runnable)]  # fmt: skip


def skipped(runnable: list[str]) -> list[Result]:
    """A skipped result per variant this CPU does not run: `vectorized` at a capability it
    lacks; the `vml` branch only where it runs no AVX2 or AVX512 build at all."""
    ran = variants(runnable)
    return [Result(name(cap, kernel), skipped=1, note="this CPU does not support it")
            for cap, kernel in variants(CAPABILITIES)
            if (cap, kernel) not in ran and (kernel != "vml" or len(ran) == 1)]  # fmt: skip


def check_variant(
    layout: Layout,
    capability: str,
    kernel: str | None,
    found: dict,
    processes: Processes,
    threads: int | None = None,
    hash_results: bool = False,
) -> tuple[Result, str]:
    """Run the worker for one variant: passed when max ULP <= 1, NaN kept, odd symmetry.

    `threads`: torch's thread count in the worker (default: torch's). The gate runs two
    workers at once on two cores with one thread each (two threads each were slower there);
    an elementwise kernel gives every input the same result at any thread count.
    `hash_results`: the worker hashes every result, for `switched` (DEFAULT's and `vml`'s).
    """
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        proc = processes.run(
            [
                str(layout.python),
                "-m",
                "stacktool.tanh_accuracy",
                capability,
                str(out),
                *([str(threads)] if threads else []),
                *([RESULTS] if hash_results else []),
            ],  # fmt: skip
            cwd=Path(__file__).resolve().parent.parent,
            env=suite_env(layout, variant_env(capability, kernel)),
        )
        if proc.returncode != 0:
            return Result(name(capability, kernel), failed=1, note="the worker failed"), (
                proc.stdout + proc.stderr
            )
        found[capability, kernel] = result = json.loads(out.read_text())
    ok = verdict(result)
    note = f"{summary(result)}; {time.monotonic() - started:.0f} s"
    return Result(name(capability, kernel), int(ok), int(not ok), note=note), ""


def run(layout: Layout, log) -> list[Result]:
    """./stack bench's check: one run per capability, with the float kernel the CPU's vendor
    picks (FLOAT_TANH unset), the kernel it times; one at a time."""
    results, runnable = [], supported(layout)
    for capability in CAPABILITIES:
        if capability not in runnable:
            results.append(Result(name(capability, None), skipped=1,
                                  note="this CPU does not support it"))  # fmt: skip
            continue
        result, output = check_variant(layout, capability, None, {}, Processes())
        if output:
            print(output)
        log(f"{result.name}: {result.note}")
        results.append(result)
    return results


def switched(found: dict) -> list[Result]:
    """At the capability where both float kernels ran: passed when their outputs differ
    (the digests), which shows FLOAT_TANH chose the kernel (VML and PR 5's kernel round
    differently for millions of inputs; test_unary_ufuncs's test_tanh_float_ulp checks the
    same, on its grid, at every capability); and passed when the `vml` branch gave DEFAULT's
    results bit for bit, which is why only the suites of float tanh itself run under it."""
    results = []
    for capability in CAPABILITIES:
        vml, vectorized = (found.get((capability, kernel)) for kernel in FLOAT_KERNELS)
        if vml is None:
            continue  # not run here, or its worker failed (that result says so)
        if vectorized is not None:
            same = vml["digest"] == vectorized["digest"]
            note = ("the same inputs not correctly rounded: both values ran one kernel" if same
                    else f"they round differently (digests {vml['digest']:016x} / "
                    f"{vectorized['digest']:016x})")  # fmt: skip
            results.append(Result(f"{FLOAT_TANH}=vml and =vectorized run two kernels "
                                  f"[{capability}]", int(not same), int(same), note=note))  # fmt: skip
        default = found.get(("default", None))
        if default is not None:
            same = "results" in vml and vml["results"] == default.get("results")
            note = ("every float32 result bitwise DEFAULT's" if same
                    else "its float32 results are not DEFAULT's: the suites DEFAULT runs do "
                    "not cover it")  # fmt: skip
            results.append(Result(f"{FLOAT_TANH}=vml computes DEFAULT's float results "
                                  f"[{capability}]", int(same), int(not same), note=note))  # fmt: skip
    return results


def verdict(found: dict) -> bool:
    return (
        found["max_ulp"] <= MAX_ULP
        and not found["nan_lost"]
        and not found["not_odd"]
        and not found["not_one"]
    )


def summary(found: dict) -> str:
    return (
        f"max {found['max_ulp']} ULP from the correctly rounded result (at x = "
        f"{found['worst_x']!r}), {found['not_rounded']} of 2^32 not correctly rounded, "
        f"{found['nan_lost']} NaN lost, {found['not_odd']} break tanh(-x) = -tanh(x), "
        f"{found['not_one']} not 1 from 9.0109129 on"
    )


# Bit patterns (as int32) where the correctly rounded tanh is known without computing it:
# below 2^-12, |tanh(x) - x| < x^3/3 < half a ULP of x, so it is x; from 12 on (up to +inf),
# 1 - tanh(x) < 2 exp(-2x) < 2^-25 (half a ULP below 1), so it is 1; NaN above +inf.
TINY, SATURATED = 0x39800000, 0x41400000  # 2^-12, 12.0: multiples of CHUNK
ONE_FROM = (
    0x41102CB4  # 9.0109129: the first float whose tanh rounds to 1; every one from it gives 1
)
INF = 0x7F800000  # +inf; every pattern above it is a NaN


def expected(torch, bits, out):
    """The correctly rounded float32 tanh of the float32 inputs whose bits are `bits`,
    written into `out` (float32, their size)."""
    x = bits.view(torch.float32)
    first, last = int(bits[0]), int(bits[-1])
    if last < TINY:
        return out.copy_(x)
    if first >= SATURATED:
        return out.fill_(1).masked_fill_(x.isnan(), float("nan"))
    assert first >= TINY and last < SATURATED, "chunks must not straddle the region bounds"
    return out.copy_(torch.tanh(x.double()))


def check(torch, hash_results: bool) -> dict:
    """Every float32 input: the worst error, counts of the failures (see module doc); with
    `hash_results`, a hash of every result (what `switched` compares)."""
    worst, worst_x, nan_lost, not_odd, not_one, counts = 0, 0.0, 0, 0, 0, []
    # of every result's bits: 5 s of the run with SHA instructions (Zen 4), more without
    results = hashlib.sha256() if hash_results else None
    bits = torch.arange(CHUNK, dtype=torch.int32)
    x = bits.view(torch.float32)
    # one buffer per intermediate, reused chunk after chunk: a fresh tensor per step
    # costs its page faults (a quarter of the run's time on a Zen 3)
    y, neg, want = (torch.empty_like(x) for _ in range(3))
    ulp, flipped = torch.empty_like(bits), torch.empty_like(bits)
    odd = torch.empty(CHUNK, dtype=torch.bool)
    sign = torch.iinfo(torch.int32).min
    for _ in range((1 << 31) // CHUNK):
        torch.tanh(x, out=y)
        torch.tanh(torch.neg(x, out=neg), out=neg)
        expected(torch, bits, out=want)
        torch.ne(neg.view(torch.int32), torch.bitwise_xor(y.view(torch.int32), sign, out=flipped),
                 out=odd)  # fmt: skip
        # both non-negative: the distance between their bit patterns counts float32 steps
        torch.sub(y.view(torch.int32), want.view(torch.int32), out=ulp).abs_()
        if int(bits[-1]) > INF:  # NaN inputs (the last chunks only): NaN out, no ULP
            nan = x.isnan()
            odd &= ~nan
            nan_lost += int(torch.count_nonzero(nan & ~(y.isnan() & neg.isnan())))
            ulp.masked_fill_(nan, 0)
        # count_nonzero, not sum(): a bool tensor's sum converts it to int64 first (it took 12
        # of the run's 33 s, Zen 4)
        not_odd += int(torch.count_nonzero(odd))
        if int(bits[-1]) >= ONE_FROM:  # exactly 1 (1 ULP below it would pass the ULP bar)
            not_one += int(torch.count_nonzero((y != 1) & (bits >= ONE_FROM) & (bits <= INF)))
        if results is not None:
            results.update(y.numpy())
        counts.append(int(torch.count_nonzero(ulp)))
        at = int(ulp.argmax())
        if int(ulp[at]) > worst:
            worst, worst_x = int(ulp[at]), float(x[at])
        bits += CHUNK
    found = {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "max_ulp": worst,
        "worst_x": worst_x,
        "not_rounded": 2 * sum(counts),  # the negative half mirrors it (not_odd counts breaks)
        "nan_lost": nan_lost,
        "not_odd": not_odd,
        "not_one": not_one,
        # which inputs are not correctly rounded, per chunk of CHUNK: two kernels that round
        # differently (VML and PR 5's differ at millions of inputs) give two digests
        "digest": int(hashlib.sha256(json.dumps(counts).encode()).hexdigest()[:16], 16),
    }
    if results is not None:
        # every non-negative input's result (the negative half is its mirror, checked above)
        found["results"] = results.hexdigest()
    return found


def main(argv: list[str] | None = None) -> None:
    """The worker: `python -m stacktool.tanh_accuracy CAPABILITY OUT.json [THREADS]
    [--results]` (--results: hash every result, see check)."""
    capability, out, *rest = argv or sys.argv[1:]
    threads = [arg for arg in rest if arg != RESULTS]
    import torch

    if threads:
        torch.set_num_threads(int(threads[0]))
    found = check(torch, hash_results=RESULTS in rest)
    if capability_name(found["capability"]) != capability:
        sys.exit(f"asked for {capability}, torch runs {found['capability']}")
    Path(out).write_text(json.dumps(found))


if __name__ == "__main__":
    main()
