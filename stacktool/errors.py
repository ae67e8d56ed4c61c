"""What the user is told: StackError; and uninterrupted(), for steps a signal must not split."""

import signal
from contextlib import contextmanager


class StackError(Exception):
    """A failure the user can act on; the message says what failed and where."""


@contextmanager
def uninterrupted():
    """Hold SIGINT and SIGTERM back for a short block (e.g. a swap of two renames).

    cli turns them into KeyboardInterrupt; held back, they arrive when the block is done. Their
    handlers are swapped for one that notes the signal: Python runs handlers in the main
    thread whichever thread the kernel hands a signal to, where a mask (pthread_sigmask)
    would hold it back from the calling thread only. Main thread only, as signal.signal.
    """
    noted = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, lambda signum, frame: noted.append(signum)) for sig in held}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if noted:
            signal.raise_signal(noted[0])
