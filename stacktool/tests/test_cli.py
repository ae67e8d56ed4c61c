"""Ctrl-C and SIGTERM: one line on stderr, exit 128 + signal, child processes stopped; bad
input: the command's own usage, exit 2."""

import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

from stacktool import cli

# `./stack ARGS` in a temporary root, with the command's work (`module.name`) replaced by one
# that blocks in a child that has a child of its own (like ninja and its compilers). SIGINT
# is set as a terminal gives it.
STACK = """
import signal, subprocess, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from stacktool import cli, gate, undo
signal.signal(signal.SIGINT, signal.default_int_handler)
cli.ROOT = Path({tmp!r})
block = lambda *args: subprocess.run(["sh", "-c", "sleep 60 & echo $! > {pidfile}; wait"])
setattr({module}, {name!r}, block)
sys.exit(cli.main({args!r}))
"""
ROOT = str(Path(__file__).resolve().parents[2])
# Holds the lock of the root `tmp` until killed, as another ./stack run would.
HOLD = """
import sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
from stacktool import lock
with lock.held(Path({tmp!r}) / ".stack.lock", "build", log=lambda m: None):
    print("held", flush=True)
    time.sleep(60)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


class SignalTest(unittest.TestCase):
    def interrupt(self, signum: int, args=("build",), module="cli", name="build") -> str:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        pidfile = Path(tmp.name) / "sleep.pid"
        code = STACK.format(root=ROOT, tmp=tmp.name, pidfile=pidfile, module=module, name=name,
                            args=list(args))  # fmt: skip
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
        self.assertRegex(
            lines[0], f"^stack {args[0]}: interrupted by {signal.Signals(signum).name};"
        )
        self.assertIn(f"./stack {args[0]}", lines[0])
        deadline = time.monotonic() + 5
        while alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertFalse(alive(grandchild), "the child's child was left running")
        return lines[0]

    def test_sigterm(self):
        self.interrupt(signal.SIGTERM)

    def test_ctrl_c(self):
        self.interrupt(signal.SIGINT)

    def test_lint_and_undo_interrupted(self):
        self.assertIn(
            "pytorch/ is untouched", self.interrupt(signal.SIGINT, ["lint"], "gate", "lint_tree")
        )
        line = self.interrupt(signal.SIGINT, ["lint", "--level", "all"], "gate", "lint_levels")
        self.assertIn("pytorch/ is untouched", line)
        line = self.interrupt(signal.SIGTERM, ["undo"], "undo", "undo")
        self.assertIn("kept (stash, branches undo/*); run ./stack undo again", line)

    def test_export_check_interrupted_waiting_for_the_lock_says_nothing_was_written(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        holder = subprocess.Popen([sys.executable, "-c", HOLD.format(root=ROOT, tmp=tmp.name)],
                                  stdout=subprocess.PIPE, text=True)  # fmt: skip
        for cleanup in (holder.stdout.close, holder.wait, holder.kill):
            self.addCleanup(cleanup)
        self.assertEqual(holder.stdout.readline().strip(), "held")
        code = (f"import signal, sys; sys.path.insert(0, {ROOT!r}); from pathlib import Path; "
                "signal.signal(signal.SIGINT, signal.default_int_handler); "  # as a terminal
                f"from stacktool import cli; cli.ROOT = Path({tmp.name!r}); "
                "sys.exit(cli.main(['export', '--check']))")  # fmt: skip
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        self.addCleanup(proc.kill)
        self.assertIn("waiting:", proc.stdout.readline())
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
        self.assertEqual(proc.returncode, 130, err)
        self.assertEqual(err.strip(), "stack export: interrupted by SIGINT; child processes "
                         "stopped; it was waiting for .stack.lock: nothing was written; run "
                         "./stack export again")  # fmt: skip


class BadInputTest(unittest.TestCase):
    def usage(self, *args: str) -> str:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as exit:
            cli.main(list(args))
        self.assertEqual(exit.exception.code, 2)
        return err.getvalue()

    def test_an_unknown_flag_shows_the_commands_usage(self):
        self.assertRegex(self.usage("build", "--bogus"),
                         r"^usage: stack build \[-h\]\nstack build: error: unrecognized arguments: --bogus")  # fmt: skip
        self.assertIn("usage: stack undo", self.usage("undo", "--bogus"))

    def test_an_abbreviated_option_is_unknown(self):
        self.assertIn("unrecognized arguments: --move", self.usage("setup", "--move"))
        self.assertIn("unrecognized arguments: --qu", self.usage("bench", "--qu"))

    def test_bench_help_names_the_default_output_folder(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), self.assertRaises(SystemExit):
            cli.main(["bench", "--help"])
        self.assertIn("(default: build/bench)", " ".join(out.getvalue().split()))

    def test_lint_levels_and_scopes(self):
        self.assertIn("not a level number or 'all': '0'", self.usage("lint", "--level", "0"))
        self.assertIn("not a level number or 'all': 'x'", self.usage("lint", "--level", "x"))
        self.assertIn("not allowed with argument", self.usage("lint", "--level", "2", "--changed"))

    def test_python_before_3_11_is_told_what_it_needs(self):
        """On 3.9 and 3.10 (pyenv's, where present) ./stack says so, and exits 2."""
        fake = f"import sys; sys.path.insert(0, {ROOT!r}); sys.version_info = (3, 10, 0); import stacktool"
        pythons = [[sys.executable, "-c", fake]]
        for version in ("3.9", "3.10"):
            found = sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}"))
            found = found or (
                [shutil.which(f"python{version}")] if shutil.which(f"python{version}") else []
            )
            pythons += (
                [[str(found[-1]), str(Path(ROOT) / "stack"), "export", "--check"]] if found else []
            )
        for command in pythons:
            proc = subprocess.run(command, capture_output=True, text=True)
            if proc.returncode == 127:  # a pyenv shim whose version is not selected
                continue
            self.assertEqual(proc.returncode, 2, command)
            self.assertIn("stack: python3.11 is required", proc.stderr)


if __name__ == "__main__":
    unittest.main()
