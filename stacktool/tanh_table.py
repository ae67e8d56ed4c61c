"""The coefficient table of PR 5's AVX512 float tanh (`kTanhIntervals` in vec512_float.h).

The body splits |x| into 32 intervals: [0, 2^-4), then four equal parts of each binade
from 2^-4 (interval 1) to 8 (interval 29, [8, 10)), picked by the exponent and the first two
mantissa bits. |x| is clamped at SATURATION, the first float whose tanh rounds to 1, which
then lies in interval 29 (30 and 31 give 1 and are reached by no input). On interval i,
tanh(a) = p_i(a - c_i), p_i of degree 6. Each c_i is the float within 4096 steps of the
middle of its interval whose tanh is nearest a float, that float being p_i(0); interval 0
has c = 0, p(0) = 0, p'(0) = 1 (the kernel adds d in p0's place there, its p1 being 0). The
other coefficients come from least squares on Chebyshev nodes weighted by 1/ULP(tanh)
(Lawson's iteration towards minimax in ULPs), rounded to float one at a time from the lowest
degree, the higher ones fitted again after each.

Deterministic: tanh at the nodes comes from mpmath (pure Python), the fits from Python
floats (IEEE arithmetic, no BLAS), so every machine makes the same table bitwise; the test
in stacktool/tests/test_tanh_table.py compares it with the table PR 5's patch adds.
`python -m stacktool.tanh_table` (the venv's Python: mpmath comes with torch) prints it.
"""

import math
import re
import struct
import sys
from fractions import Fraction

import mpmath

INTERVALS, DEGREE = 32, 6
FIRST_BINADE = -4  # interval 1 starts at 2^-4; interval 0 is [0, 2^-4)
SATURATION = 9.010913848876953  # 0x1.205968p+3: tanh rounds to 1 from this float on
SATURATION_WEIGHT = 1e6  # interval 29 all but interpolates tanh there: 5e-7 ULP above the tie
NODES, LAWSON_STEPS = 64, 40
C_SEARCH = 4096  # float32 steps on either side of an interval's middle searched for c_i
P0_OFF = 1e-3  # tanh(c_i) lies this close to a float (in ULPs), which is p0: no rounding there
mpmath.mp.prec = 113


def f32(value: float) -> float:
    """`value` rounded to the nearest float32."""
    return struct.unpack("f", struct.pack("f", value))[0]


def f32_step(value: float, steps: int) -> float:
    """The float32 `steps` representable values above the non-negative float32 `value`."""
    return struct.unpack(
        "f", struct.pack("I", struct.unpack("I", struct.pack("f", value))[0] + steps)
    )[0]


def ulp(value: float) -> float:
    """The spacing of float32 at `value` (> 0)."""
    return 2.0 ** (math.frexp(value)[1] - 24)


def bounds(i: int) -> tuple[float, float]:
    """Interval i's [lo, hi) of |x| (hi capped at SATURATION)."""
    if i == 0:
        return 0.0, 2.0**FIRST_BINADE
    binade, part = divmod(i - 1, 4)
    width = 2.0 ** (FIRST_BINADE + binade - 2)
    lo = 2.0 ** (FIRST_BINADE + binade) + part * width
    return lo, min(lo + width, SATURATION)


def tanh(x: float) -> float:
    """tanh(x) to 113 bits, as a Python float (53 bits are enough for the fits)."""
    return float(mpmath.tanh(mpmath.mpf(x)))


def centre(lo: float, hi: float) -> tuple[float, float]:
    """(c, p0): the float c in [lo, hi) whose tanh lies nearest a float32, p0 (at most P0_OFF
    ULP off), among the floats near (lo + hi) / 2 and, since tanh is flat near 1, the floats
    c = atanh(v) for the float32 v that tanh takes near there."""
    middle = f32((lo + hi) / 2)
    near_middle = [f32_step(middle, step) for step in range(-C_SEARCH, C_SEARCH + 1)]
    v = f32(tanh(middle))
    values = (f32_step(v, k) for k in range(-8, 9))
    on_values = [f32(float(mpmath.atanh(mpmath.mpf(w)))) for w in values if w < 1]
    best = None
    for c in [*near_middle, *on_values]:
        if not lo <= c < hi:
            continue
        exact = mpmath.tanh(mpmath.mpf(c))
        p0 = f32(float(exact))
        off = abs(float((exact - mpmath.mpf(p0)) / mpmath.mpf(ulp(p0))))
        if best is None or off < best[0]:
            best = (off, c, p0)
    if best[0] > P0_OFF:
        raise ValueError(f"no c in [{lo!r}, {hi!r}) whose tanh is within {P0_OFF} ULP of a float")
    return best[1], best[2]


def round_f32(value: Fraction) -> float:
    """`value` rounded once to the nearest float32 (ties to even), as an FMA rounds it."""
    if value == 0:
        return 0.0
    sign, value = (-1 if value < 0 else 1), abs(value)
    exponent = max(math.floor(math.log2(value)) - 23, -149)
    while value >= Fraction(2) ** (exponent + 24):
        exponent += 1
    while exponent > -149 and value < Fraction(2) ** (exponent + 23):
        exponent -= 1
    scaled = value / Fraction(2) ** exponent
    whole = math.floor(scaled)
    if scaled - whole > Fraction(1, 2) or (scaled - whole == Fraction(1, 2) and whole % 2):
        whole += 1
    return sign * whole * 2.0**exponent


def fma(a: float, b: float, c: float) -> float:
    """float32 fused multiply-add of float32 values."""
    return round_f32(Fraction(a) * Fraction(b) + Fraction(c))


def evaluate(column: list[float], a: float, first: bool = False) -> float:
    """The kernel's result for |x| = a on an interval's column [c, p0, ..., p6] (`first`:
    interval 0's), operation by operation as vec512_float.h's tanh (and its tests' model)
    evaluates it."""
    c, p0, p1, *higher = column
    d = round_f32(Fraction(a) - Fraction(c))
    q = higher[-1]
    for p in reversed(higher[:-1]):
        q = fma(q, d, p)
    return fma(fma(q, d, p1), d, d if first else p0)


def solve(rows: list[list[float]], rhs: list[float]) -> list[float]:
    """Least squares by Householder QR, in Python floats."""
    rows, rhs = [row[:] for row in rows], rhs[:]
    m, n = len(rows), len(rows[0])
    for k in range(n):
        norm = math.sqrt(sum(rows[i][k] ** 2 for i in range(k, m)))
        alpha = -norm if rows[k][k] > 0 else norm
        v = [0.0] * k + [rows[k][k] - alpha] + [rows[i][k] for i in range(k + 1, m)]
        vv = sum(x * x for x in v)
        if vv == 0.0:
            continue
        for j in range(k, n):
            s = 2 * sum(v[i] * rows[i][j] for i in range(k, m)) / vv
            for i in range(k, m):
                rows[i][j] -= s * v[i]
        s = 2 * sum(v[i] * rhs[i] for i in range(k, m)) / vv
        for i in range(k, m):
            rhs[i] -= s * v[i]
    x = [0.0] * n
    for k in reversed(range(n)):
        x[k] = (rhs[k] - sum(rows[k][j] * x[j] for j in range(k + 1, n))) / rows[k][k]
    return x


def fit(ds: list[float], targets: list[float], weights: list[float], free: int) -> list[float]:
    """Coefficients of d^(DEGREE - free + 1) ... d^DEGREE minimising the weighted max error
    (Lawson's iteration), in the scaled variable d / h for conditioning."""
    h = max(abs(d) for d in ds) or 1.0
    first = DEGREE - free + 1
    lawson = [1.0] * len(ds)
    for _ in range(LAWSON_STEPS):
        w = [math.sqrt(lw) * wt for lw, wt in zip(lawson, weights, strict=True)]
        rows = [
            [wi * (d / h) ** k for k in range(first, DEGREE + 1)]
            for d, wi in zip(ds, w, strict=True)
        ]
        scaled = solve(rows, [wi * t for wi, t in zip(w, targets, strict=True)])
        errors = [
            abs(
                t
                - sum(
                    s * (d / h) ** k for s, k in zip(scaled, range(first, DEGREE + 1), strict=True)
                )
            )
            * wt
            for d, t, wt in zip(ds, targets, weights, strict=True)
        ]
        total = sum(lw * e for lw, e in zip(lawson, errors, strict=True)) or 1.0
        lawson = [lw * e / total for lw, e in zip(lawson, errors, strict=True)]
    return [s / h**k for s, k in zip(scaled, range(first, DEGREE + 1), strict=True)]


def interval(i: int) -> list[float]:
    """[c, p0, ..., p6] of interval i, each a float32."""
    lo, hi = bounds(i)
    if i > 29:  # reached by no input (|x| <= SATURATION): tanh is 1
        return [f32(lo + (hi - lo) / 2), 1.0] + [0.0] * DEGREE
    c, p0 = (0.0, 0.0) if i == 0 else centre(lo, hi)
    fixed = [p0] + ([1.0] if i == 0 else [])  # interval 0: p1 = 1, split off below
    xs = [
        (lo + hi) / 2 + (hi - lo) / 2 * math.cos(math.pi * (k + 0.5) / NODES) for k in range(NODES)
    ]
    xs = [lo, hi, *xs] if i else [hi, *xs]
    ds = [x - c for x in xs]
    values = [tanh(x) for x in xs]
    weights = [1 / ulp(v) for v in values]
    if hi == SATURATION:  # the clamped |x| of every input from SATURATION on must give 1
        weights[xs.index(hi)] *= SATURATION_WEIGHT
    while len(fixed) <= DEGREE:
        rest = [
            v - sum(p * d**k for k, p in enumerate(fixed)) for v, d in zip(values, ds, strict=True)
        ]
        fixed.append(f32(fit(ds, rest, weights, DEGREE + 1 - len(fixed))[0]))
    column = [c, *fixed]
    if hi == SATURATION and evaluate(column, hi) != 1.0:
        raise ValueError(f"interval {i} does not give 1 at {hi!r}")
    if i == 0:  # the kernel adds d itself, exactly, in p0's place: d + d * (d * q(d))
        return [c, fixed[0], 0.0, *fixed[2:]]
    return column


def table() -> list[list[float]]:
    """kTanhIntervals: 8 rows (c, p0, ..., p6) of INTERVALS floats."""
    columns = [interval(i) for i in range(INTERVALS)]
    return [list(row) for row in zip(*columns, strict=True)]


def literal(value: float) -> str:
    """A C++ float literal that is `value` exactly (hex, as in the patch)."""
    text = value.hex()  # e.g. 0x1.2008f80000000p-4
    mantissa, exponent = text.split("p")
    mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
    return f"{mantissa}p{exponent}f"


def cpp(rows: list[list[float]]) -> str:
    """The table's rows as C++ initialiser lines, four to a line, the rows named."""
    names = ["c", *(f"p{k}" for k in range(DEGREE + 1))]
    lines = []
    for name, row in zip(names, rows, strict=True):
        lines.append(f"    // {name}")
        values = [literal(v) for v in row]
        lines.append("    {" + values[0] + ",")
        for k in range(1, len(values), 4):
            chunk = ", ".join(values[k : k + 4])
            lines.append(f"     {chunk}" + ("}," if k + 4 >= len(values) else ","))
    return "\n".join(lines) + "\n"


TABLE_IN_SOURCE = re.compile(r"kTanhIntervals\[\d\]\[32\] = \{\n(.*?)\n *\};", re.S)
FLOAT_LITERAL = re.compile(r"(-?0x[0-9a-f.]+p[-+]\d+)f")


def in_source(text: str) -> list[list[float]]:
    """The table's rows as the kernel's source (or PR 5's patch, its added lines) holds them."""
    found = TABLE_IN_SOURCE.search(text.replace("\n+", "\n"))
    if found is None:
        raise ValueError("no kTanhIntervals table in the text")
    rows: list[list[float]] = []
    for line in found.group(1).splitlines():
        if line.strip().startswith("//"):
            rows.append([])
        else:
            rows[-1] += [float.fromhex(value) for value in FLOAT_LITERAL.findall(line)]
    return rows


if __name__ == "__main__":
    sys.stdout.write(cpp(table()))
