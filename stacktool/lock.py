"""One `./stack` run at a time: an advisory lock that the OS releases when its holder dies.

Every command that writes pytorch/, build/, .venv or .cache holds it. A second run prints
which process holds the lock and what it runs, then waits for it.
"""

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def held(path: Path, what: str, log=print):
    """Hold the lock file `path` for the duration of the block (waits if another run has it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            log(f"waiting: {path} is held by {holder}")
            fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} (./stack {what})\n")
        f.flush()
        try:
            yield
        finally:
            f.seek(0)
            f.truncate()
            f.flush()
            fcntl.flock(f, fcntl.LOCK_UN)
