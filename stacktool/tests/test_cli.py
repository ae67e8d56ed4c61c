"""Ctrl-C and SIGTERM: one line on stderr, exit 128 + signal, child processes stopped."""

import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

# `./stack build` in a temporary root, with a build that blocks in a child that has a child
# of its own (like ninja and its compilers). SIGINT is set as a terminal gives it.
STACK = """
import signal, subprocess, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from stacktool import cli
signal.signal(signal.SIGINT, signal.default_int_handler)
cli.ROOT = Path({tmp!r})
cli.build = lambda layout: subprocess.run(["sh", "-c", "sleep 60 & echo $! > {pidfile}; wait"])
sys.exit(cli.main(["build"]))
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


class SignalTest(unittest.TestCase):
    def interrupt(self, signum: int) -> None:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        pidfile = Path(tmp.name) / "sleep.pid"
        root = str(Path(__file__).resolve().parents[2])
        code = STACK.format(root=root, tmp=tmp.name, pidfile=pidfile)
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        self.addCleanup(proc.kill)
        deadline = time.monotonic() + 20
        while not (pidfile.exists() and pidfile.read_text().strip()):
            self.assertLess(time.monotonic(), deadline, "the blocking child never started")
            time.sleep(0.05)
        grandchild = int(pidfile.read_text())
        self.addCleanup(lambda: alive(grandchild) and os.kill(grandchild, signal.SIGKILL))
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=20)
        self.assertEqual(proc.returncode, 128 + signum, err)
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertRegex(lines[0], f"^stack build: interrupted by {signal.Signals(signum).name};")
        self.assertIn("./stack build", lines[0])
        deadline = time.monotonic() + 5
        while alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertFalse(alive(grandchild), "the child's child was left running")

    def test_sigterm(self):
        self.interrupt(signal.SIGTERM)

    def test_ctrl_c(self):
        self.interrupt(signal.SIGINT)


if __name__ == "__main__":
    unittest.main()
