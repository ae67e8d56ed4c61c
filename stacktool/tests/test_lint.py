"""`./stack lint`: what it lints (the working tree, or commits), how it counts and reports."""

import contextlib
import io
import json
import shutil
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from stacktool import config, lint
from stacktool.git import git
from stacktool.suites import Processes

IDENTITY = {"GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "dev@x.invalid"}

# A stand-in for lintrunner: records its arguments, reports two findings in bad.py and one
# in other.py for the FLAKE8 run, one in a file not linted for MYPY, fails for NEWLINE,
# and warns as lintrunner does before `lintrunner init`.
LINTRUNNER = """#!/usr/bin/env python3
import json, os, sys
linter, paths = sys.argv[2], sys.argv[5:]
open({calls!r}, "a").write(json.dumps([linter, paths]) + "\\n")
open({calls!r} + ".data", "a").write(linter + " " + os.environ.get("XDG_DATA_HOME", "-") + "\\n")
print("WARNING: No previous init data found. You should run `lintrunner init`.", file=sys.stderr)
found = [(path, line) for path, line in (("bad.py", 1), ("bad.py", 2), ("other.py", 1))
         if path in paths and linter == "FLAKE8"]
for path, line in found:
    print(json.dumps({{"path": {fork!r} + "/" + path, "line": line, "code": "FLAKE8",
                      "name": "E1", "description": "bad\\nmore"}}))
if linter == "MYPY":  # mypy also reports what the files import: not theirs
    print(json.dumps({{"path": "elsewhere.py", "line": 3, "code": "MYPY", "name": "x",
                      "description": "upstream"}}))
if linter == "NEWLINE":  # the linter itself fails
    print("boom", file=sys.stderr)
    sys.exit(2)
sys.exit(1 if found else 0)
"""


class LintTest(unittest.TestCase):
    def setUp(self):
        self.root = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.root)
        self.layout = config.Layout(self.root)
        self.fork = self.layout.fork
        self.fork.mkdir()
        git(self.fork, "init", "-q", "--initial-branch", config.BRANCH)
        (self.fork / "up.py").write_text("x = 1\n")
        self.commit("pristine")
        git(self.fork, "tag", config.BASE_REF)
        (self.fork / "other.py").write_text("y = 1\n")
        self.commit("level 1")
        self.calls = self.root / "calls"
        venv = self.root / ".venv-lint" / "bin"
        venv.mkdir(parents=True)
        (venv / "lintrunner").write_text(
            LINTRUNNER.format(calls=str(self.calls), fork=str(self.fork))
        )
        (venv / "dmypy").write_text("#!/bin/sh\n")
        # A stand-in for clang-format --dry-run --Werror PATH: fails where PATH says so.
        (venv / "clang-format").write_text('#!/bin/sh\n! grep -q unformatted "$3"\n')
        for tool in venv.iterdir():
            tool.chmod(0o755)
        patcher = mock.patch.object(lint, "ensure", return_value=venv.parent)
        patcher.start()
        self.addCleanup(patcher.stop)

    def commit(self, message):
        git(self.fork, "add", "-A")
        git(self.fork, "commit", "-qm", message, env=IDENTITY)

    def lint(self, layout, base, tip):
        logged, out = [], io.StringIO()
        with contextlib.redirect_stdout(out):
            result = lint.run(layout, base, tip, "lint", logged.append)
        calls = [json.loads(line) for line in self.calls.read_text().splitlines()]
        self.calls.unlink()
        return result, logged, out.getvalue(), calls

    def test_the_working_tree_with_uncommitted_and_untracked_files(self):
        (self.fork / "up.py").write_text("x = 2\n")  # uncommitted
        (self.fork / "bad.py").write_text("z\n")  # untracked
        result, logged, out, calls = self.lint(self.layout, config.BASE_REF, None)
        self.assertEqual([linter for linter, _ in calls], list(lint.LINTERS))
        self.assertEqual(calls[0][1], ["bad.py", "other.py", "up.py"])
        self.assertEqual(logged[0], f"lint: {lint.LINTERS[0]} over 3 file(s)")
        self.assertEqual(logged[-1], "lint: findings in 2 of 3 files")  # files, not findings
        self.assertEqual((result.passed, result.failed), (0, 1))
        self.assertIn("FLAKE8 bad.py:2: E1: bad\n", out)
        self.assertIn("not counted, in files the stack does not change:\nMYPY elsewhere.py:3", out)
        self.assertIn("NEWLINE: lintrunner failed: boom\n", out)
        self.assertNotIn("lintrunner init", out)
        _, _, _, calls = self.lint(self.layout, "HEAD", None)  # --changed
        self.assertEqual(calls[0][1], ["bad.py", "up.py"])

    def test_a_commit_and_a_clean_result(self):
        result, logged, out, calls = self.lint(self.layout, "HEAD~1", "HEAD")
        self.assertEqual(calls[0][1], ["other.py"])
        self.assertEqual(logged[-1], "lint: findings in 1 of 1 files")
        (self.fork / "fine.py").write_text("ok = 1\n")
        self.commit("level 2")
        with mock.patch.object(lint, "LINTERS", ("FLAKE8", "MYPY")):
            result, logged, out, calls = self.lint(self.layout, "HEAD~1", "HEAD")
        self.assertEqual((result.passed, result.failed), (1, 0))
        self.assertEqual(logged[-1], "lint: no findings in 1 files")

    def test_the_gates_two_tasks_share_the_linters_and_each_counts_its_own(self):
        """FLAKE8 apart (bad.py's findings are its own), every other linter and the checks
        of added files in the other; each started once, over the same files."""
        (self.fork / "bad.py").write_text("z\n")
        (self.fork / "kernel.cpp").write_text("int f();  // unformatted\n")
        self.commit("level 2")
        tasks = lint.tasks(self.layout, "HEAD~1", "HEAD", "level 2: lint")
        self.assertEqual([(t.name, t.seconds) for t in tasks],
                         [("level 2: lint (FLAKE8)", 60), ("level 2: lint", 90)])  # fmt: skip
        (flake8, flake8_out), (rest, rest_out) = (t.run(Processes()) for t in tasks)
        calls = [json.loads(line) for line in self.calls.read_text().splitlines()]
        self.assertEqual(sorted(linter for linter, _ in calls), sorted(lint.LINTERS))
        self.assertEqual({tuple(paths) for _, paths in calls}, {("bad.py", "kernel.cpp")})
        self.assertEqual((flake8.name, flake8.failed), ("level 2: lint (FLAKE8)", 1))
        self.assertIn("FLAKE8 bad.py:2: E1: bad", flake8_out)
        self.assertNotIn("CLANGFORMAT", flake8_out)
        self.assertEqual((rest.name, rest.failed), ("level 2: lint", 1))
        self.assertIn("CLANGFORMAT kernel.cpp: not clang-formatted", rest_out)
        self.assertIn("NEWLINE: lintrunner failed: boom", rest_out)
        self.assertNotIn("FLAKE8 bad.py", rest_out)
        stores = dict(line.split(" ", 1) for line in Path(f"{self.calls}.data").read_text()
                      .splitlines())  # fmt: skip
        self.assertNotEqual(stores["FLAKE8"], stores["RUFF"])  # each prunes its own records
        self.assertEqual({stores[linter] for linter in lint.LINTERS if linter != "FLAKE8"},
                         {stores["RUFF"]})  # fmt: skip
        self.assertTrue(stores["FLAKE8"].startswith(str(self.root)))

    def test_the_daemon_warmed_with_upstreams_config_and_torch_init(self):
        """status fails (none runs): started with mypy.ini, then checks torch/__init__.py in
        the tree; mypy's findings (exit 1) are upstream's own, so the warm-up counts."""
        dmypy = self.root / ".venv-lint" / "bin" / "dmypy"
        dmypy.write_text(f'#!/bin/sh\necho "$PWD $*" >> {self.calls}\nexit 1\n')
        self.assertTrue(lint.warm_daemon(self.layout))
        self.assertEqual(self.calls.read_text().splitlines(), [
            f"{self.fork} status",
            f"{self.fork} start --timeout {lint.DMYPY_IDLE_S} -- --config=mypy.ini",
            f"{self.fork} check torch/__init__.py",
        ])  # fmt: skip
        dmypy.write_text("#!/bin/sh\nexit 2\n")  # the daemon crashed
        self.assertFalse(lint.warm_daemon(self.layout))

    def test_a_new_cpp_file_is_formatted_whichever_commit_added_it(self):
        (self.fork / "kernel.cpp").write_text("int f();\n")
        self.commit("level 2 adds kernel.cpp")
        git(self.fork, "tag", "attn/2")
        (self.fork / "kernel.cpp").write_text("int f();  // unformatted\n")
        # --changed: from the last export's tag, where kernel.cpp is modified, not added
        result, logged, out, calls = self.lint(self.layout, "attn/2", None)
        self.assertIn("CLANGFORMAT kernel.cpp: not clang-formatted", out)
        self.assertEqual((result.passed, result.failed), (0, 1))


if __name__ == "__main__":
    unittest.main()
