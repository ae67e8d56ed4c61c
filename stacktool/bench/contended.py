"""The contended case: native torch.attn's forward+backward and the floor (PR 4's ATen calls)
at CONTENDED_THREADS threads, timed in one worker process, every round first alone, then
every round again beside one busy-loop process that the worker starts for those rounds and
kills when they end (`competitor`)."""

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

from stacktool.bench.attn import floor_step, inputs, load_torch, train_step
from stacktool.bench.common import FWD_BWD, Settings, fmt_ms, fmt_size, say
from stacktool.bench.measure import measure

CONTENDED_SIZES = ((2048, 64, 64), (4096, 128, 128))
CONTENDED_QUICK_SIZES = ((512, 64, 64),)  # the quick run's smoke: it runs, no target applies
CONTENDED_THREADS = 2  # these machines' cores: the busy loop wants one of them
CONDITIONS = ("uncontended", "contended")  # in the order they are timed
# The busy loop exits by itself COMPETITOR_GRACE_S + COMPETITOR_FACTOR times the uncontended
# rounds' time after it starts (the contended rounds repeat that work, slowed), should the
# worker that started it die before it can kill it.
COMPETITOR_GRACE_S = 60.0
COMPETITOR_FACTOR = 10
# Its line "busy" says it is looping, so the contended rounds start with it running.
BUSY_LOOP = """import time
end = time.monotonic() + {seconds}
print("busy", flush=True)
while time.monotonic() < end:
    pass
"""


@contextlib.contextmanager
def competitor(seconds: float, python: str = sys.executable):
    """One busy-loop process beside this one for the block: running when the block starts,
    killed by its pid when the block ends, an exception or Ctrl-C included. It also exits by
    itself after `seconds`, so a worker killed outright leaves it behind only that long."""
    code = BUSY_LOOP.format(seconds=seconds)
    proc = subprocess.Popen(
        [python, "-I", "-S", "-c", code],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        if proc.stdout.readline() != "busy\n":
            raise RuntimeError(f"the busy-loop process {proc.pid} did not start")
        yield proc
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def contended_worker(fork: Path, settings: Settings, sizes=CONTENDED_SIZES) -> dict:
    """Native torch.attn's forward+backward and the floor at each size, CONTENDED_THREADS
    threads, all steps interleaved round by round in one measure() per condition: uncontended,
    then beside one busy-loop process (`competitor`). The 1-minute load average is read at the
    phase's start, when the busy loop has started and at the phase's end."""
    torch, methods = load_torch(fork, with_function=False)
    from torch.utils.benchmark import Timer

    steps = {}
    for size in sizes:
        args = inputs(torch, size, grad=True)
        steps[size, "native"] = train_step(torch, methods["native"], *args), CONTENDED_THREADS
        steps[size, "floor"] = floor_step(torch, *args), CONTENDED_THREADS
    load = [os.getloadavg()[0]]
    started = time.monotonic()
    found = {"uncontended": measure(steps, settings, Timer)}
    seconds = COMPETITOR_GRACE_S + COMPETITOR_FACTOR * (time.monotonic() - started)
    with competitor(seconds) as proc:
        say(f"contended: busy-loop process {proc.pid} started (it exits by itself after "
            f"{seconds:.0f} s)")  # fmt: skip
        load.append(os.getloadavg()[0])
        found["contended"] = measure(steps, settings, Timer)
        load.append(os.getloadavg()[0])
        throughout = proc.poll() is None  # not gone at its deadline before the rounds ended
    say(f"contended: busy-loop process {proc.pid} stopped")
    rows = []
    for size in sizes:
        for condition in CONDITIONS:
            times = {m: found[condition][size, m] for m in ("native", "floor")}
            rows.append({
                "size": size, "threads": CONTENDED_THREADS, "pass": FWD_BWD,
                "condition": condition,
                "ms": {m: t["ms"] for m, t in times.items()},
                "rounds_ms": {m: t["rounds_ms"] for m, t in times.items()},
            })  # fmt: skip
            say(f"{fmt_size(size)} {FWD_BWD}, {condition}: "
                + ", ".join(f"{m} {fmt_ms(t['ms'])} ms" for m, t in times.items()))  # fmt: skip
    return {"threads": CONTENDED_THREADS, "load": load, "busy_loop_s": seconds,
            "busy_loop_throughout": throughout, "rows": rows}  # fmt: skip
