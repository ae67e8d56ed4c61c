"""The timing loop every timing worker uses: torch.utils.benchmark's `Timer` per step,
`blocked_autorange` rounds interleaved across steps, and the figure kept per step."""

import statistics
import timeit

from stacktool.bench.common import Settings


def quietest(rounds: list[list[float]]) -> dict:
    """ms per call from each round's per-call block times (seconds): the median of the least
    disturbed round, and every round's median (their spread shows the run's noise).

    Other processes on these 2 cores take whole time slices from a 2-thread step, so the
    disturbed blocks are many times slower and come in bursts; a round's median is robust to
    a few, and the quietest round is the machine's speed with the least of them.
    """
    medians = [statistics.median(times) * 1000 for times in rounds]
    return {"ms": min(medians), "rounds_ms": medians, "blocks": sum(map(len, rounds))}


def measure(steps: dict, settings: Settings, timer_class) -> dict:
    """Time each step ({name: (callable, threads)}) with `timer_class` (torch's Timer).

    Each step is called twice first (torch.compile compiles, lazy buffers appear), so that
    blocked_autorange's block-size estimate sees the steady state. Then `settings.rounds`
    rounds of one blocked_autorange per step, the steps interleaved within each round (load
    from other processes hits them alike); see `quietest` for the figure kept.
    """
    timers = {}
    for name, (step, threads) in steps.items():
        step()
        step()
        timers[name] = timer_class(
            stmt="step()", globals={"step": step}, num_threads=threads, timer=timeit.default_timer
        )
    rounds = {name: [] for name in steps}
    for _ in range(settings.rounds):
        for name, timer in timers.items():
            rounds[name].append(timer.blocked_autorange(min_run_time=settings.min_run_time).times)
    return {name: quietest(found) for name, found in rounds.items()}
