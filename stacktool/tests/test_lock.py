"""The run lock: a second run waits and names the holder; a dead holder releases it."""

import subprocess
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path

from stacktool import lock

HOLD = """
import sys, time
sys.path.insert(0, {root!r})
from stacktool import lock
from pathlib import Path
with lock.held(Path({path!r}), "build", log=lambda m: None):
    print("held", flush=True)
    time.sleep(60)
"""


class LockTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.path = Path(self.dir.name) / ".stack.lock"

    def holder(self):
        root = str(Path(__file__).resolve().parents[2])
        proc = subprocess.Popen([sys.executable, "-c", HOLD.format(root=root, path=str(self.path))],
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
        self.addCleanup(proc.communicate)  # reaps it and closes its pipe
        self.addCleanup(proc.kill)
        self.assertEqual(proc.stdout.readline().strip(), "held")
        return proc

    def test_second_run_waits_naming_the_holder_until_it_dies(self):
        proc = self.holder()
        messages, entered = [], threading.Event()

        def second():
            with lock.held(self.path, "test", log=messages.append):
                entered.set()

        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(0.5)
        self.assertFalse(entered.is_set(), "the second run did not wait")
        self.assertEqual(len(messages), 1)
        self.assertIn(f"pid {proc.pid} (./stack build)", messages[0])
        proc.kill()  # SIGKILL: the OS releases the lock
        thread.join(10)
        self.assertTrue(entered.is_set())

    def test_free_lock_is_taken_at_once(self):
        messages = []
        with lock.held(self.path, "export", log=messages.append):
            self.assertIn("(./stack export)", self.path.read_text())
        self.assertEqual(messages, [])


if __name__ == "__main__":
    unittest.main()
