"""The gate works in a worktree of its own and never moves pytorch/ (tiny git repos)."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path
from unittest import mock

from stacktool import config, gate
from stacktool.errors import StackError
from stacktool.git import git

IDENTITY = {"GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "dev@x.invalid"}
CPU = {"vendor": "AuthenticAMD", "family": 25, "model": 17, "stepping": 1,
       "model name": "AMD EPYC", "flags": ["fpu", "avx2", "fma", "avx512f"]}  # fmt: skip


class GateTreeTest(unittest.TestCase):
    def setUp(self):
        self.root = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.root)
        self.layout = config.Layout(self.root)
        self.fork = self.make_fork(self.layout.fork)

    def make_fork(self, fork: Path) -> Path:
        """pristine (tag attn/0) and two stack commits on branch `stack`."""
        fork.mkdir(parents=True)
        git(fork, "init", "--quiet", "--initial-branch", config.BRANCH)
        for n, text in enumerate(["pristine", "level 1", "level 2"]):
            (fork / "a.txt").write_text(text + "\n")
            git(fork, "add", "a.txt")
            git(fork, "commit", "--quiet", "-m", text, env=IDENTITY)
            if n == 0:
                git(fork, "tag", config.BASE_REF)
        return fork

    def head(self) -> tuple[str, str]:
        return git(self.fork, "symbolic-ref", "HEAD").strip(), git(self.fork, "rev-parse", "HEAD")

    def levels(self, build, link=None, only=None):
        with (
            mock.patch.object(gate.wheel, "fetch"),
            mock.patch.object(gate.wheel, "unpack", return_value=(None, [])),
            mock.patch.object(gate.wheel, "link", link or mock.MagicMock()),
        ):
            return list(gate.each_level(self.layout, lambda message: None, build, only))

    def test_levels_are_built_in_the_gate_tree_and_pytorch_never_moves(self):
        before, seen = self.head(), []

        def build(layout):
            self.assertEqual(self.head(), before)  # the old gate checked levels out in pytorch/
            seen.append((layout.fork, (layout.fork / "a.txt").read_text()))

        self.levels(build)
        tree = [self.root / "build" / "gate" / f"level-{n}" / "pytorch" for n in (1, 2)]
        self.assertEqual(seen, [(tree[0], "level 1\n"), (tree[1], "level 2\n")])
        self.assertEqual(self.head(), before)
        gate_layout = self.layout.gate_tree(2)
        self.assertEqual(gate_layout.overlay, self.root / "build" / "gate" / "level-2" / "overlay")
        self.assertEqual(gate_layout.python_env["PYTHONPATH"], str(tree[1]))
        self.assertEqual(self.layout.python_env, {})

    def test_a_second_run_rewrites_no_file_of_a_level_and_links_the_wheel_once(self):
        links = []
        link = lambda unpacked, tree: links.append(tree)  # noqa: E731
        self.levels(lambda layout: None, link)
        tree = self.layout.gate_tree(2).fork
        stamp = (tree / "a.txt").stat().st_mtime_ns
        self.levels(lambda layout: None, link)
        self.assertEqual((tree / "a.txt").stat().st_mtime_ns, stamp)  # ninja sees nothing new
        self.assertEqual(links, [self.layout.gate_tree(1).fork, tree])

    def test_one_level_and_a_level_that_does_not_exist(self):
        seen = [level for level, _, _ in self.levels(lambda layout: None, only=2)]
        self.assertEqual(seen, [2])
        self.assertFalse(self.layout.gate_tree(1).fork.exists())
        with self.assertRaisesRegex(StackError, "no level 3: the stack has levels 1 to 2"):
            self.levels(lambda layout: None, only=3)

    def test_an_interrupted_run_leaves_pytorch_as_it_was(self):
        before = self.head()
        (self.fork / "work.txt").write_text("uncommitted\n")

        def build(layout):
            raise KeyboardInterrupt

        with self.assertRaises(KeyboardInterrupt):
            self.levels(build)
        self.assertEqual(self.head(), before)
        self.assertEqual((self.fork / "work.txt").read_text(), "uncommitted\n")
        self.assertEqual((self.fork / "a.txt").read_text(), "level 2\n")

    def test_what_a_run_left_in_the_tree_is_reset(self):
        self.levels(lambda layout: None)
        tree = self.layout.gate_tree(2).fork
        (tree / "a.txt").write_text("edited by a test\n")
        (tree / "left.txt").write_text("untracked\n")
        seen = []
        self.levels(lambda layout: seen.append((layout.fork / "a.txt").read_text()))
        self.assertEqual(seen, ["level 1\n", "level 2\n"])
        self.assertFalse((tree / "left.txt").exists())
        self.assertEqual((tree / "a.txt").read_text(), "level 2\n")

    def test_a_broken_or_foreign_tree_is_made_again(self):
        tree = self.layout.gate_tree(2).fork
        tree.mkdir(parents=True)
        (tree / "junk").write_text("half-made\n")  # e.g. an interrupted `worktree add`
        self.levels(lambda layout: None)
        self.assertFalse((tree / "junk").exists())
        self.assertEqual((tree / "a.txt").read_text(), "level 2\n")
        # pytorch/ made again by setup: the tree's .git names a repository that is gone
        shutil.rmtree(self.fork)
        self.make_fork(self.fork)
        seen = []
        self.levels(lambda layout: seen.append((layout.fork / "a.txt").read_text()))
        self.assertEqual(seen, ["level 1\n", "level 2\n"])
        common = git(tree, "rev-parse", "--path-format=absolute", "--git-common-dir").strip()
        self.assertEqual(Path(common), self.fork / ".git")

    def test_lint_of_levels_refuses_uncommitted_work_naming_it(self):
        (self.fork / "a.txt").write_text("edited\n")
        (self.fork / "new.txt").write_text("new\n")
        with self.assertRaisesRegex(StackError, r"uncommitted changes a level's commit lacks "
                                    r"\(a.txt, new.txt\): commit them, or run ./stack lint"):  # fmt: skip
            gate.lint_levels(self.layout, print, lambda layout: None, None)
        self.assertFalse((self.root / "build").exists())  # nothing was made

    def test_the_next_levels_build_runs_while_a_level_is_checked(self):
        """...at BUILD_NICENESS, the processes it starts too; the checks keep theirs."""
        second_built = threading.Event()
        niceness = []
        own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

        def build(layout):
            child = subprocess.run([sys.executable, "-c", "import os; print(os.nice(0))"],
                                   capture_output=True, text=True, check=True)  # fmt: skip
            niceness.append(int(child.stdout))
            if layout.fork.parent.name == "level-2":
                second_built.set()

        with (
            mock.patch.object(gate.wheel, "fetch"),
            mock.patch.object(gate.wheel, "unpack", return_value=(None, [])),
            mock.patch.object(gate.wheel, "link"),
        ):
            levels = gate.each_level(self.layout, lambda message: None, build)
            self.assertEqual(next(levels)[0], 1)
            self.assertTrue(second_built.wait(30))  # while level 1 is being checked
            self.assertEqual([level for level, _, _ in levels], [2])
        expected = max(own, gate.BUILD_NICENESS) if sys.platform == "linux" else own
        self.assertEqual(niceness, [expected, expected])
        self.assertEqual(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()), own)

    def test_lint_tree_takes_each_level_with_its_builds_stubs(self):
        """One lint worktree, checked out at each level's commit, with the Python files the
        level's build generated (copied, not linked) and nothing of the level before."""
        stub, pyi = "torch/_C/__init__.pyi", "pyi/out/torch/_C/__init__.pyi"
        commits = gate.patches.stack_commits(self.fork)
        seen = []
        for level, (commit, text) in enumerate(zip(commits, ["one", "two"], strict=True), start=1):
            level_gate = self.layout.gate_tree(level)
            for path in (level_gate.fork / stub, level_gate.overlay / pyi):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
            with (
                mock.patch.object(gate.wheel, "fetch"),
                mock.patch.object(gate.wheel, "unpack", return_value=(None, [])),
                mock.patch.object(gate.wheel, "link"),
            ):
                tree = gate.lint_checkout(self.layout, level_gate, commit, lambda line: None)
            seen.append(((tree.fork / "a.txt").read_text(), (tree.fork / stub).read_text()))
            self.assertNotEqual((tree.fork / stub).stat().st_ino,
                                (level_gate.fork / stub).stat().st_ino)  # fmt: skip
        self.assertEqual(tree.fork, self.root / "build" / "gate" / "lint" / "pytorch")
        self.assertEqual(seen, [("level 1\n", "one"), ("level 2\n", "two")])


class StopDaemonsTest(unittest.TestCase):
    """The gate stops the mypy daemons in its worktrees when it ends, however it ends; the
    one in pytorch/ (the edit loop's) stays. dmypy is a stand-in that records where it ran."""

    def setUp(self):
        self.root = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.root)
        self.layout = config.Layout(self.root)
        self.calls = self.root / "calls"
        self.logged = []
        dmypy = self.root / ".venv-lint" / "bin" / "dmypy"
        dmypy.parent.mkdir(parents=True)
        dmypy.write_text(f'#!/bin/sh\necho "$PWD $*" >> {self.calls}\n')
        dmypy.chmod(0o755)
        self.trees = [self.layout.gate_tree(n).fork for n in (1, 2, 3)]
        lint = self.layout.lint_tree().fork
        for tree in [*self.trees, lint, self.layout.fork, self.root / "build" / "loop" / "pytorch"]:
            tree.mkdir(parents=True)
        for tree in (self.trees[0], self.trees[2], lint, self.layout.fork):  # level 2 has none
            (tree / ".dmypy.json").write_text("{}")
        (self.root / "build" / "loop" / "pytorch" / ".dmypy.json").write_text("{}")

    def stopped(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    def expected(self) -> list[str]:
        loop = self.root / "build" / "loop" / "pytorch"
        lint = self.root / "build" / "gate" / "lint" / "pytorch"
        return [f"{tree} stop" for tree in (self.trees[0], self.trees[2], lint, loop)]

    def run_gate(self, level_results, warm=lambda layout, log: None):
        """gate.run with every check faked: one level, whose checks give `level_results`
        (or raise it); `warm` stands in for warm_lint."""
        level = (1, "c" * 40, self.layout.gate_tree(1))
        with (
            mock.patch.object(gate, "warm_lint", warm),
            mock.patch.object(gate, "tool_tests", return_value=gate.Result("t", 1)),
            mock.patch.object(gate.lint, "tool", return_value=gate.Result("ruff", 1)),
            mock.patch.object(gate.patches, "export", return_value=[]),
            mock.patch.object(gate.patches, "stack_commits", return_value=["c" * 40]),
            mock.patch.object(gate, "applies_to_pristine", return_value=gate.Result("a", 1)),
            mock.patch.object(gate, "each_level", return_value=iter([level])),
            mock.patch.object(gate, "lint_checkout", return_value=level[2]),
            mock.patch.object(gate.venv, "prove_torch", return_value="torch from the tree"),
            mock.patch.object(gate.levels, "run", side_effect=[level_results]),
            mock.patch.object(gate, "cpu_facts", return_value=CPU),
            mock.patch("os.cpu_count", return_value=2),
            mock.patch("builtins.print") as self.printed,
        ):
            return gate.run(self.layout, self.logged.append, lambda layout: None)

    def test_the_closing_lines_name_the_cpu_and_each_levels_time(self):
        """The CPU, as bench.md names it, is logged first and given again with the time
        before level 1 and per level above the counts, where CI's page shows them."""
        self.assertEqual(self.run_gate([gate.Result("level 1: x", 3)]), 0)
        cpu = "AuthenticAMD family 25 model 17 stepping 1 (AMD EPYC), 2 CPUs, avx2 fma avx512f"
        self.assertEqual(self.logged[0], f"on {cpu}")
        out = [str(call.args[0]) for call in self.printed.call_args_list]
        self.assertEqual(out[-1], "7 passed, 0 failed")
        self.assertRegex(out[-2], rf"^\non {re.escape(cpu)}: before level 1 \d+ s, "
                                  r"level 1 \d+ s; \d+ s in all$")  # fmt: skip

    def test_only_the_gates_trees_with_a_daemon(self):
        logged = []
        gate.stop_daemons(self.layout, logged.append)
        self.assertEqual(self.stopped(), self.expected())
        self.assertEqual(logged[0], "stopped mypy's daemon in build/gate/level-1/pytorch")

    def test_a_failed_level_and_an_interrupted_run_stop_them_too(self):
        self.assertEqual(self.run_gate([gate.Result("level 1: x", failed=1)]), 1)
        self.assertEqual(self.stopped(), self.expected())
        self.calls.unlink()
        with self.assertRaises(KeyboardInterrupt):
            self.run_gate(KeyboardInterrupt())
        self.assertEqual(self.stopped(), self.expected())

    def test_a_warm_up_that_fails_only_logs(self):
        """Level 3's lint then starts the daemon itself: the run goes on."""
        for error in (StackError("no lint venv"), FileNotFoundError("dmypy")):
            logged = []
            with mock.patch.object(gate, "worktree", side_effect=error):
                gate.warm_lint(self.layout, logged.append)
            self.assertEqual(logged, [f"mypy's daemon in the lint tree not loaded ahead: {error}"])

    def test_the_daemon_loaded_ahead_is_stopped_too(self):
        """The warm-up runs beside the checks; the stop waits for it, also when the checks
        end first (here at once, with an interrupt)."""

        def warm(layout, log):
            time.sleep(0.3)
            with self.calls.open("a") as calls:
                calls.write("warmed\n")

        with self.assertRaises(KeyboardInterrupt):
            self.run_gate(KeyboardInterrupt(), warm)
        self.assertEqual(self.stopped(), ["warmed", *self.expected()])


class ReportTest(unittest.TestCase):
    def test_a_failed_checks_log_ends_below_the_table(self):
        """CI shows a run's last lines: each failed check's last lines come after the table,
        before the failing levels and the counts."""
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "lint.log"
            log.write_text("".join(f"line {n}\n" for n in range(20)) + "error: os error 2\n")
            results = [gate.Result("level 1: lint", failed=1, log=log),
                       gate.Result("level 1: doc", passed=1),
                       gate.Result("level 2: x", failed=1, note="no log")]  # fmt: skip
            with mock.patch("builtins.print") as printed:
                self.assertEqual(gate.report(results), 1)
        out = "\n".join(str(call.args[0]) for call in printed.call_args_list).splitlines()
        tail = out.index("level 1: lint failed; the end of its log:")
        self.assertGreater(tail, max(n for n, line in enumerate(out) if "level 1: doc" in line))
        self.assertEqual(out[tail + 1 : tail + 1 + gate.FAILED_TAIL][-2:],
                         ["line 19", "error: os error 2"])  # fmt: skip
        self.assertNotIn("line 8", out)
        self.assertEqual(out[-2:], ["failing: level 1, level 2", "1 passed, 2 failed"])


class ToolTestsTest(unittest.TestCase):
    """The tool's tests run in a process of their own (their mock.patch would reach the
    gate's other threads), counted from unittest's closing lines."""

    def test_counts(self):
        self.assertEqual(gate.unittest_counts("...\nRan 283 tests in 16.4s\n\nOK (skipped=1)\n", 0),
                         (282, 0, 1))  # fmt: skip
        self.assertEqual(gate.unittest_counts("Ran 5 tests in 1s\n\nOK\n", 0), (5, 0, 0))
        failed = "Ran 9 tests in 1s\n\nFAILED (failures=1, errors=2, skipped=3)\n"
        self.assertEqual(gate.unittest_counts(failed, 1), (3, 3, 3))
        unexpected = "Ran 2 tests in 1s\n\nFAILED (unexpected successes=1)\n"
        self.assertEqual(gate.unittest_counts(unexpected, 1), (1, 1, 0))

    def test_a_run_without_its_closing_lines_fails(self):
        self.assertEqual(gate.unittest_counts("Traceback ...\nImportError: x\n", 1), (0, 1, 0))
        self.assertEqual(gate.unittest_counts("Ran 1 test in 1s\n\nOK\n", -11), (0, 1, 0))

    def test_runs_apart_from_the_gates_process(self):
        with mock.patch.object(gate.subprocess, "run") as run:
            run.return_value = subprocess.CompletedProcess([], 0, "Ran 1 test in 0s\n\nOK\n")
            with mock.patch("builtins.print"):
                result = gate.tool_tests(lambda line: None)
        command = run.call_args.args[0]
        self.assertEqual(command[:4], [sys.executable, "-m", "unittest", "discover"])
        self.assertEqual((result.passed, result.failed), (1, 0))


if __name__ == "__main__":
    unittest.main()
