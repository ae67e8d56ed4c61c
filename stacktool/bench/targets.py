"""What each ratio is held to (see README, Benchmark, for where each target comes from), and
the verdicts: torch.attn's time and memory targets, and the tanh table's."""

from collections.abc import Callable
from dataclasses import dataclass

from stacktool.bench.common import FWD, FWD_BWD, fmt_ms, fmt_size, ratio
from stacktool.bench.tanh import SLEEF_CAPABILITIES

NOT_SLOWER = 0.95  # v2.6.0's time / this stack's: "none slower", within these machines' noise
TANH_SPEEDUP = 5.0  # the same, contiguous float32 at 1 thread, with AVX2 and with AVX512


@dataclass(frozen=True)
class Check:
    """A target evaluated at one place; ratio None when there is nothing to measure."""

    text: str
    where: str
    ratio: float | None
    bound: float
    at_least: bool

    def meets(self, ratio: float) -> bool:
        return ratio >= self.bound if self.at_least else ratio <= self.bound

    @property
    def shown(self) -> str:
        """The ratio as measured, to three decimals (0.996, never 1.00), or more where three
        would round it across the bound (1.1004 for <= 1.10, not 1.100)."""
        if self.ratio is None:
            return "n/a"
        for digits in range(3, 10):
            text = f"{self.ratio:.{digits}f}"
            if self.meets(float(text)) == self.meets(self.ratio):
                return text
        return repr(self.ratio)

    @property
    def verdict(self) -> str:
        """Met only if the measured ratio itself meets the bound (no rounding in its favour)."""
        if self.ratio is None:
            return "n/a"
        return "met" if self.meets(self.ratio) else "not met"


@dataclass(frozen=True)
class Target:
    """One target for native torch.attn.

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

    def check(self, where: str, values: dict) -> Check:
        """The target on one row's values (ms or MB by method); no ratio if one is missing."""
        top, bottom = (self.other, "native") if self.at_least else ("native", self.other)
        return Check(self.text(), where, ratio(values, top, bottom), self.bound, self.at_least)


TIME_TARGETS = (
    Target("composite", lambda n: n <= 64, 1.5, at_least=True),
    Target("composite", lambda n: n >= 512, 1.15, at_least=True),
    # never slower than torch.compile, forward and forward+backward
    Target("compile", lambda n: True, 1.0, at_least=True, passes=(FWD, FWD_BWD)),
    Target("floor", lambda n: n >= 2048, 1.10, at_least=False),  # within 10% of the floor
)
MEMORY_TARGET = Target("composite", lambda n: True, 0.75, at_least=False)  # peak memory


def attn_checks(results: dict) -> list[Check]:
    """torch.attn's targets where they apply: times by size and pass, then peak memory."""
    found = []
    for row in results["timing"]["rows"]:
        size = tuple(row["size"])
        for target in TIME_TARGETS:
            if row["pass"] in target.passes and target.applies(size[0]):
                found.append(target.check(f"{fmt_size(size)} {row['pass']}", row["ms"]))
    memory = results["memory"]
    found.append(MEMORY_TARGET.check(f"{fmt_size(memory['size'])} peak memory", memory["mb"]))
    return found


def tanh_target(row: dict) -> tuple[float, str]:
    """(bound on v2.6.0 / this stack, text) for one row of the tanh table."""
    if row["case"] == "contiguous" and row["threads"] == 1:
        if row["capability"] in SLEEF_CAPABILITIES:
            return TANH_SPEEDUP, f"v2.6.0 / this stack >= {TANH_SPEEDUP:.2f}"
    return NOT_SLOWER, f"v2.6.0 / this stack >= {NOT_SLOWER:.2f}"


def tanh_checks(tanh: dict | None) -> list[Check]:
    """One check per row of the tanh table: not slower than v2.6.0, or 5x where that applies."""
    found = []
    for r in (tanh or {}).get("rows", []):
        bound, text = tanh_target(r)
        where = (
            f"tanh {r['case']}, {r['threads']} thread{'s' * (r['threads'] > 1)}, {r['capability']}"
        )
        found.append(Check(text, where, ratio(r["ms"], "v2.6.0", "this stack"), bound, True))
    return found


def checks(results: dict) -> list[Check]:
    """Every target of the run where it applies: torch.attn's, then tanh's."""
    return attn_checks(results) + tanh_checks(results.get("tanh"))


def below_floor(results: dict) -> list[str]:
    """Rows where native torch.attn measured faster than the floor (which it cannot be)."""
    return [
        f"{fmt_size(row['size'])} ({fmt_ms(row['ms']['native'])} against "
        f"{fmt_ms(row['ms']['floor'])} ms)"
        for row in results["timing"]["rows"]
        if row["ms"].get("native") and row["ms"].get("floor")
        and row["ms"]["native"] < row["ms"]["floor"]
    ]  # fmt: skip
