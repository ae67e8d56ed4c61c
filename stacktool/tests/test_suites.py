"""Tests of how the gate runs upstream's suites and counts their tests (stdlib only, < 1 s)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from stacktool import levels, tanh_accuracy
from stacktool.config import Layout
from stacktool.errors import StackError
from stacktool.levels import SUITES, Suite
from stacktool.suites import pytest_counts, run_suite, suite_env


class PytestCountsTest(unittest.TestCase):
    def test_sums_every_session_of_run_test(self):
        output = (
            "============================ 2 deselected in 0.02s =============================\n"
            "test_x.py::T::test_a PASSED\n"
            "========================= 1 passed, 1 skipped in 0.04s =========================\n"
            "== 3 failed, 10 passed, 2 skipped, 1 xfailed, 1 xpassed, 1 error, 4 warnings in 9.1s "
            "(0:00:09) ==\n"
        )
        # an xfail counts as a skip; an xpass (a stale expectation) as a failure
        self.assertEqual(pytest_counts(output), (11, 5, 4))

    def test_no_summary_counts_nothing(self):
        self.assertEqual(pytest_counts("Traceback (most recent call last):\n"), (0, 0, 0))


class SuiteCommandTest(unittest.TestCase):
    def test_selection_and_deselections(self):
        suite = Suite(
            "x", "test/test_x.py", "attn", deselect={"T::test_a": "why", "T::test_b": "why"}
        )
        self.assertEqual(
            suite.command(),
            ["-m", "pytest", "test/test_x.py", "-k", "attn",
             "--deselect", "test/test_x.py::T::test_a", "--deselect", "test/test_x.py::T::test_b"],
        )  # fmt: skip

    def test_whole_file(self):
        self.assertEqual(Suite("x", "test/test_x.py").command(), ["-m", "pytest", "test/test_x.py"])


class SuiteTableTest(unittest.TestCase):
    """The table's own rules: each choice that is not plain `-k attn` says why, in one line."""

    def test_names_unique_and_levels_known(self):
        for level in (3, 4, 5):
            names = [s.name for s in SUITES if level in s.levels]
            self.assertEqual(len(names), len(set(names)))
        for suite in SUITES:
            self.assertTrue(suite.levels and set(suite.levels) <= {3, 4, 5}, suite.name)

    def test_level_5_runs_each_suite_under_each_supported_capability(self):
        ran = []

        def run_suite(layout, name, command, log, env):
            ran.append((name, env.get("ATEN_CPU_CAPABILITY")))

        with (
            mock.patch.object(levels, "run_suite", run_suite),
            mock.patch.object(levels.tanh_accuracy, "supported", return_value=["default", "avx2"]),
        ):
            levels.upstream_suites(Layout(Path("/x")), lambda line: None, 5)
        self.assertIn(("test_nn [avx2]", "avx2"), ran)
        self.assertIn(("test_unary_ufuncs [default]", "default"), ran)
        self.assertEqual(len(ran), 2 * len([s for s in SUITES if 5 in s.levels]))

    def test_every_deselection_and_unusual_selection_has_a_one_line_reason(self):
        for suite in SUITES:
            for test, reason in suite.deselect.items():
                self.assertTrue(reason and "\n" not in reason, f"{suite.name}: {test}")
            if suite.deselect or suite.env or suite.select != "attn":
                self.assertTrue(suite.why and "\n" not in suite.why, suite.name)

    def test_dtensor_runs_at_both_levels(self):
        (dtensor,) = (s for s in SUITES if "dtensor" in s.path)
        self.assertEqual(dtensor.levels, (3, 4))


class RunSuiteTest(unittest.TestCase):
    """run_suite with a stand-in venv (this Python) and a script for the test command."""

    def run_script(self, script: str, env=None):
        with tempfile.TemporaryDirectory() as tmp:
            layout = Layout(Path(tmp))
            layout.python.parent.mkdir(parents=True)
            layout.python.symlink_to(sys.executable)
            layout.fork.mkdir()
            with mock.patch("builtins.print"):
                return run_suite(layout, "t", ["-c", script], lambda line: None, env)

    def test_env_is_set_and_ci_unset(self):
        script = (
            "import os, sys\n"
            "ok = os.environ.get('PYTORCH_TEST_WITH_SLOW') == '1' and 'CI' not in os.environ\n"
            "print('==== 1 passed in 0.1s ====' if ok else '==== 1 failed in 0.1s ====')\n"
        )
        with mock.patch.dict(os.environ, {"CI": "1"}):
            result = self.run_script(script, {"PYTORCH_TEST_WITH_SLOW": "1"})
            self.assertEqual(os.environ["CI"], "1")  # this process's environment is untouched
        self.assertEqual((result.passed, result.failed), (1, 0))

    def test_suite_env_leaves_os_environ_alone(self):
        with mock.patch.dict(os.environ, {"CI": "1"}):
            env = suite_env({"PYTORCH_TEST_WITH_INDUCTOR": "1"})
            self.assertNotIn("PYTORCH_TEST_WITH_INDUCTOR", os.environ)
        self.assertNotIn("CI", env)
        self.assertEqual(env["PYTORCH_TEST_WITH_INDUCTOR"], "1")

    def test_runner_failing_without_a_test_failing_counts(self):
        result = self.run_script("print('==== 2 passed in 0.1s ===='); raise SystemExit(3)")
        self.assertEqual((result.passed, result.failed), (2, 1))


class TanhAccuracyTest(unittest.TestCase):
    """The exhaustive check's verdict and its per-capability runs (no torch needed here)."""

    FOUND = {"capability": "AVX2", "max_ulp": 1, "worst_x": 0.5, "not_rounded": 8,
             "nan_lost": 0, "not_odd": 0}  # fmt: skip

    def test_verdict(self):
        self.assertTrue(tanh_accuracy.verdict(self.FOUND))
        for key, bad in (("max_ulp", 2), ("nan_lost", 1), ("not_odd", 3)):
            self.assertFalse(tanh_accuracy.verdict({**self.FOUND, key: bad}), key)
        self.assertIn("max 1 ULP", tanh_accuracy.summary(self.FOUND))

    def test_supported_asks_the_hardware_not_the_variable(self):
        # torch reports AVX512 whenever ATEN_CPU_CAPABILITY=avx512, supported or not
        seen = {}

        def probe(command, env, **kwargs):
            seen.update(env)
            return subprocess.CompletedProcess(command, 0, "default avx2 \n", "")

        with mock.patch.dict(tanh_accuracy.os.environ, {"ATEN_CPU_CAPABILITY": "avx512"}), \
                mock.patch.object(tanh_accuracy.subprocess, "run", probe):  # fmt: skip
            self.assertEqual(tanh_accuracy.supported(Layout(Path("/x"))), ["default", "avx2"])
        self.assertNotIn("ATEN_CPU_CAPABILITY", seen)

        def broken(command, **kwargs):
            return subprocess.CompletedProcess(command, 1, "", "ImportError: no torch")

        with mock.patch.object(tanh_accuracy.subprocess, "run", broken):
            with self.assertRaisesRegex(StackError, "no torch"):
                tanh_accuracy.supported(Layout(Path("/x")))

    def test_unsupported_capability_is_skipped_and_named(self):
        def worker(command, **kwargs):
            Path(command[-1]).write_text(json.dumps({**self.FOUND, "max_ulp": 3}))
            return subprocess.CompletedProcess(command, 0, "", "")

        with mock.patch.object(tanh_accuracy, "supported", return_value=["default", "avx2"]), \
                mock.patch.object(tanh_accuracy.subprocess, "run", worker):  # fmt: skip
            results = tanh_accuracy.run(Layout(Path("/x")), lambda line: None)
        by_name = {r.name.split("[")[1].rstrip("]"): r for r in results}
        self.assertEqual((by_name["avx512"].skipped, by_name["avx512"].failed), (1, 0))
        self.assertIn("does not support", by_name["avx512"].note)
        self.assertEqual(by_name["avx2"].failed, 1)  # 3 ULP fails the bar


if __name__ == "__main__":
    unittest.main()


class CapabilityNameTest(unittest.TestCase):
    def test_default_is_reported_as_no_avx(self):
        from stacktool.tanh_accuracy import capability_name

        self.assertEqual(capability_name("NO AVX\n"), "default")
        self.assertEqual(capability_name("AVX2"), "avx2")
