"""errors.uninterrupted: a signal waits for the end of the block, whichever thread gets it."""

import os
import signal
import threading
import time
import unittest

from stacktool import errors


class UninterruptedTest(unittest.TestCase):
    def test_a_signal_waits_for_the_block_with_another_thread_alive(self):
        # setup swaps the trees while pip runs in a thread: the kernel may hand SIGINT to
        # that thread, which a signal mask of the main thread does not hold back. Python's
        # own handler for the test: in the gate these tests run under cli's, which would
        # stop every process the gate has started.
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        self.addCleanup(signal.signal, signal.SIGINT, previous)
        stop = threading.Event()
        other = threading.Thread(target=stop.wait)
        other.start()
        finished = []
        try:
            with self.assertRaises(KeyboardInterrupt):
                with errors.uninterrupted():
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(0.2)  # a handler runs between bytecodes: long enough to arrive
                    finished.append(True)
        finally:
            stop.set()
            other.join()
        self.assertEqual(finished, [True])
        self.assertIs(signal.getsignal(signal.SIGINT), signal.default_int_handler)


if __name__ == "__main__":
    unittest.main()
