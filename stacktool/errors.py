"""What the user is told: StackError; and uninterrupted(), for steps a signal must not split."""

import signal
from contextlib import contextmanager


class StackError(Exception):
    """A failure the user can act on; the message says what failed and where."""


@contextmanager
def uninterrupted():
    """Hold SIGINT and SIGTERM back for a short block (e.g. a swap of two renames).

    cli turns them into KeyboardInterrupt; held back, they arrive when the block is done.
    """
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
