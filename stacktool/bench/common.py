"""What the benchmark's modules share: the sizes and methods, how long to time (Settings),
progress lines, number formats."""

import os
import sys
from dataclasses import dataclass

SIZES = ((2, 3, 4), (64, 32, 32), (512, 64, 64), (2048, 64, 64), (4096, 128, 128))
QUICK_SIZES = (SIZES[2],)  # the smoke run: each phase once, at a size of several blocks
METHODS = ("native", "composite", "function", "compile", "compile_attn")
LABELS = {
    "native": "native torch.attn",
    "composite": "composite (eager)",
    "function": "PR 2 Function",
    "compile": "torch.compile(composite)",
    "compile_attn": "torch.compile(torch.attn)",
    "floor": "floor",
    "unfused": "PR 4's unfused path",
    "pr4": "PR 4's torch.attn",
    "gemms": "GEMMs alone",
}
FWD, FWD_BWD = "forward", "forward+backward"


@dataclass(frozen=True)
class Settings:
    """How long to time: the full run, or the quick smoke run the test gate makes."""

    sizes: tuple
    rounds: int  # blocked_autorange calls per step, the steps interleaved round by round
    min_run_time: float  # seconds, each blocked_autorange call's


FULL = Settings(SIZES, rounds=5, min_run_time=0.1)
QUICK = Settings(QUICK_SIZES, rounds=2, min_run_time=0.01)


def threads() -> int:
    """As many threads as this process may run on (the machines have 2 cores)."""
    return len(os.sched_getaffinity(0))


def thread_counts() -> tuple[int, ...]:
    """The thread counts attn is timed at: 1 and all of this machine's cores."""
    return tuple(sorted({1, threads()}))


def say(line: str) -> None:
    """A progress line: plain, flushed, the same on a terminal and in a CI log."""
    print(f"bench: {line}", file=sys.stderr, flush=True)


def fmt_ms(ms: float | None) -> str:
    return "n/a" if ms is None else f"{ms:.3g}"


def fmt_ratio(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio:.3f}"


def fmt_size(size) -> str:
    return ", ".join(str(x) for x in size)


def fmt_threads(count: int) -> str:
    return f"{count} thread{'s' * (count > 1)}"


def ratio(ms: dict, top: str, bottom: str) -> float | None:
    """ms[top] / ms[bottom], or None when either is missing."""
    a, b = ms.get(top), ms.get(bottom)
    return a / b if a and b else None
