"""Tests of how the gate runs upstream's suites and counts their tests (stdlib only, < 1 s)."""

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path
from unittest import mock

from stacktool import levels, reduced_bits, suites, tanh_accuracy, tanh_model
from stacktool.config import Layout
from stacktool.errors import StackError
from stacktool.levels import SUITES, Suite
from stacktool.suites import Result, Task, pytest_counts, run_suite, suite_env


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


class BatchTest(unittest.TestCase):
    """Small suites of a level share a pytest process; each file keeps its line of counts."""

    def test_one_selection_as_is_several_scoped_by_file_name(self):
        same = [
            Suite("a", "test/test_a.py", "attn"),
            Suite("b", "test/sub/test_b.py", "attn", deselect={"T::test_x": "why"}),
        ]
        self.assertEqual(levels.batch_command(same), [
            "-m", "pytest", "test/test_a.py", "test/sub/test_b.py", "-k", "attn",
            "--deselect", "test/sub/test_b.py::T::test_x"])  # fmt: skip
        mixed = [Suite("a", "test/test_a.py", "attn"), Suite("b", "test/test_b.py"),
                 Suite("c", "test/test_c.py", "x or y")]  # fmt: skip
        self.assertEqual(levels.batch_command(mixed)[-2:], [
            "-k", "(test_a.py and (attn)) or (test_b.py) or (test_c.py and (x or y))"])  # fmt: skip
        whole = [Suite("a", "test/test_a.py"), Suite("b", "test/test_b.py")]
        self.assertEqual(levels.batch_command(whole), [
            "-m", "pytest", "test/test_a.py", "test/test_b.py"])  # fmt: skip

    def test_batches_by_env_never_alone_per_capability_or_one_name_twice(self):
        def run(name, path, env=None, **kwargs):
            return name, Suite(name, path, **kwargs), env or {}

        runs = [run("a", "test/test_ops.py"), run("b", "test/functorch/test_ops.py"),
                run("c", "test/test_x.py", alone="why"), run("d", "test/test_y.py"),
                run("e", "test/test_z.py", {"SLOW": "1"}), run("f", "test/test_w.py", {"SLOW": "1"}),
                run("g", "test/test_v.py", per_capability=True), run("h", "test/mytest_ops.py"),
                run("i", "test/test_u.py")]  # fmt: skip
        groups = [[name for name, _, _ in group] for group in levels.batches(runs)]
        self.assertEqual(groups, [["a", "d", "i"], ["b"], ["c"], ["e", "f"], ["g"], ["h"]])

    JUNIT = """<testsuites><testsuite>
      <testcase classname="test.test_a.T" name="test_1" time="1.5"/>
      <testcase classname="test.test_a.T" name="test_2" time="0.5"><skipped type="pytest.xfail"/></testcase>
      <testcase classname="test.functorch.test_a.T" name="test_1" time="2"><failure/></testcase>
      <testcase classname="test.functorch.test_a.T" name="test_2"><error/></testcase>
      <testcase classname="test.test_ab.T" name="test_1"/>
    </testsuite></testsuites>"""

    def test_junit_counts_per_file_by_class_name(self):
        counts = suites.junit_counts(self.JUNIT, ["test/test_a.py", "test/functorch/test_a.py"])
        self.assertEqual(counts, {"test/test_a.py": (1, 0, 1, 2.0),
                                  "test/functorch/test_a.py": (0, 2, 0, 2.0)})  # fmt: skip

    def run_batch(self, junit: str | None, returncode: int, summary: str):
        class Fake(suites.Processes):
            def run(self, command, **kwargs):
                report = next(a.split("=", 1)[1] for a in command if a.startswith("--junitxml="))
                if junit is not None:
                    Path(report).write_text(junit)
                return subprocess.CompletedProcess(command, returncode, summary, "")

        names, paths = ["a", "fa"], ["test/test_a.py", "test/functorch/test_a.py"]
        return suites.execute_batch(Layout(Path("/x")), names, paths, ["-m", "pytest"],
                                    processes=Fake())  # fmt: skip

    def test_a_batch_gives_each_file_its_counts(self):
        results, _ = self.run_batch(self.JUNIT, 1, "== 2 failed, 2 passed, 1 xfailed in 3s ==")
        self.assertEqual([(r.name, r.passed, r.failed, r.skipped) for r in results],
                         [("a", 1, 0, 1), ("fa", 0, 2, 0)])  # fmt: skip
        self.assertIn("2 s of tests; one process with 1 more", results[0].note)

    def test_a_crashed_batch_fails_every_file_without_results(self):
        results, _ = self.run_batch(None, -11, "")
        self.assertEqual([(r.passed, r.failed) for r in results], [(0, 1), (0, 1)])
        self.assertTrue(all("the batch's process failed" in r.note for r in results))

    def test_a_failed_process_with_every_test_passing_still_fails(self):
        ok = (
            '<testsuites><testcase classname="test.test_a.T" name="t"/>'
            + '<testcase classname="test.functorch.test_a.T" name="t"/></testsuites>'
        )
        results, _ = self.run_batch(ok, 1, "== 2 passed in 1s ==")
        self.assertEqual([(r.passed, r.failed) for r in results], [(1, 1), (1, 0)])

    def test_run_all_shows_a_batchs_lines_and_its_output_once(self):
        def batch(processes):
            return [Result("a", passed=1), Result("b", failed=1)], "the batch's output"

        out, lines = io.StringIO(), []
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(out):
            results = suites.run_all(Layout(Path(tmp)), [Task("a + b", batch)], lines.append)
        self.assertEqual([r.name for r in results], ["a", "b"])
        self.assertEqual(out.getvalue().count("the batch's output"), 1)
        self.assertEqual([line.split(":")[0] for line in lines], ["a", "b"])


class BenchSmokeTest(unittest.TestCase):
    def test_runs_the_quick_bench_on_the_levels_tree_in_a_process_of_its_own(self):
        layout, commands, calls = Layout(Path("/x")).gate_tree(4), [], []

        class Fake(suites.Processes):
            def run(self, command, **kwargs):
                commands.append(command)
                calls.append(kwargs["env"])
                return subprocess.CompletedProcess(command, 0, "", "")

        result, _ = levels.bench_smoke(layout).run(Fake())
        self.assertEqual((result.passed, result.failed), (1, 0))
        self.assertEqual(calls.pop()["OMP_WAIT_POLICY"], "PASSIVE")  # as the suites beside it
        (command,) = commands
        self.assertEqual(command[:2], [sys.executable, "-c"])
        with (
            mock.patch.object(sys, "argv", ["-c", *command[3:]]),
            mock.patch("stacktool.bench.run", lambda *a, **k: calls.append((a, k)) or 0),
            self.assertRaises(SystemExit) as exited,
        ):
            exec(command[2], {})
        self.assertEqual(exited.exception.code, 0)
        self.assertEqual(calls, [((layout, layout.build / "bench-smoke"), {"quick": True})])


class SuiteTableTest(unittest.TestCase):
    """The table's own rules: each choice that is not plain `-k attn` says why, in one line."""

    def test_names_unique_and_levels_known(self):
        for level in (2, 3, 4, 5, 6):
            names = [s.name for s in SUITES if level in s.levels]
            self.assertEqual(len(names), len(set(names)))
        for suite in SUITES:
            self.assertTrue(suite.levels and set(suite.levels) <= {2, 3, 4, 5, 6}, suite.name)

    def test_level_6_runs_pr_2s_file_per_capability_and_the_opinfo_suites_once(self):
        tasks = levels.suite_tasks(Layout(Path("/x")), 6, ["default", "avx2"])
        names = [t.name for t in tasks]
        self.assertEqual([n for n in names if n.startswith("test_attn_gradcheck")], [
            "test_attn_gradcheck (dynamo)",
            "test_attn_gradcheck [default]",
            "test_attn_gradcheck [avx2, ATEN_CPU_FLOAT_TANH=vectorized]",
        ])  # fmt: skip
        batch = next(name for name in names if " + " in name)
        self.assertIn("test_ops", batch.split(" + "))  # attn's OpInfo suites: one process
        self.assertIn("inductor/test_torchinductor_opinfo", names)

    def test_pr_2s_file_runs_through_run_test_once_at_level_2_and_in_the_batch_after(self):
        layout, commands = Layout(Path("/x")), []

        class Fake(suites.Processes):
            def run(self, command, **kwargs):
                commands.append((command, kwargs["env"]))
                return subprocess.CompletedProcess(command, 0, "== 50 passed in 1.0s ==", "")

        result, _ = levels.gradcheck(layout).run(Fake())
        self.assertEqual((result.passed, result.failed), (50, 0))
        ((command, env),) = commands
        self.assertEqual(command[1:], ["test/run_test.py", "-i", "test_attn_gradcheck"])
        self.assertEqual(env["PYTORCH_TEST_RUN_EVERYTHING_IN_SERIAL"], "1")
        for level in (3, 4):
            batch = levels.suite_tasks(layout, level)[0].name.split(" + ")
            self.assertEqual(batch[:2], ["test_attn_gradcheck", "test_ops"])
            with mock.patch.object(levels, "run_all", lambda layout, tasks, log: tasks):
                ran = levels.LEVELS[level](layout, print)
            self.assertNotIn(levels.gradcheck(layout).name, [t.name for t in ran])

    def test_pr_2s_file_runs_under_dynamo_in_a_process_of_its_own_from_level_2(self):
        """CI's dynamo_wrapped config (run_test.py --dynamo) at each level that changes PR 2's
        file or the op: its own process, as the variable holds for the whole process."""
        layout, envs = Layout(Path("/x")), []

        class Fake(suites.Processes):
            def run(self, command, **kwargs):
                envs.append(kwargs["env"])
                return subprocess.CompletedProcess(command, 0, "== 50 passed in 1.0s ==", "")

        for level in (2, 3, 4, 6):
            with (
                mock.patch.object(levels.tanh_accuracy, "supported", return_value=["default"]),
                mock.patch.object(levels, "run_all", lambda layout, tasks, log: tasks),
            ):
                ran = levels.LEVELS[level](layout.gate_tree(level), print)
            (task,) = (t for t in ran if "(dynamo)" in t.name)
            self.assertEqual(task.name, "test_attn_gradcheck (dynamo)")
            result, _ = task.run(Fake())
            self.assertEqual((result.passed, result.failed), (50, 0))
            self.assertEqual(envs[-1]["PYTORCH_TEST_WITH_DYNAMO"], "1")
        self.assertFalse([t for t in levels.suite_tasks(layout, 5) if "(dynamo)" in t.name])

    def test_a_levels_long_processes_start_first(self):
        """run_all starts the longest first: at level 4 the batch, functorch/test_ops and the
        inductor OpInfo test, each a few minutes, before the suites of seconds."""
        for level in (3, 4):
            tasks = levels.suite_tasks(Layout(Path("/x")), level)
            order = [t.name for t in sorted(tasks, key=lambda t: -t.seconds)]
            self.assertTrue(order[0].startswith("test_attn_gradcheck + test_ops + "), order)
            self.assertEqual(order[1], "functorch/test_ops")
        order = [t.name for t in sorted(tasks, key=lambda t: -t.seconds)]
        self.assertEqual(order[2], "inductor/test_torchinductor_opinfo")
        self.assertEqual(order[-1], "test_jit_fuser_te (slow)")

    def test_level_6_runs_the_sanitizers_gate_subset_among_its_checks(self):
        ran = []
        with (
            mock.patch.object(levels.tanh_accuracy, "supported", return_value=["default"]),
            mock.patch.object(levels, "run_all", lambda layout, tasks, log: ran.extend(tasks)),
        ):
            levels.level_6(Layout(Path("/x")).gate_tree(6), print)
        self.assertIn(levels.sanitize.NAME, [t.name for t in ran])

    def test_level_5_runs_each_distinct_kernel_once_per_suite_that_reaches_it(self):
        every = ["default", "avx2", "avx512"]
        names = [t.name for t in levels.suite_tasks(Layout(Path("/x")), 5, every)]
        self.assertEqual(names, [
            "test_unary_ufuncs [default]",
            "test_unary_ufuncs [avx2, ATEN_CPU_FLOAT_TANH=vectorized]",
            "test_unary_ufuncs [avx512, ATEN_CPU_FLOAT_TANH=vectorized]",
            "test_unary_ufuncs [avx2, ATEN_CPU_FLOAT_TANH=vml]",  # each build's float branch
            "test_unary_ufuncs [avx512, ATEN_CPU_FLOAT_TANH=vml]",
            *(f"{suite} {variant}" for suite in ("test_ops", "test_nn", "inductor/test_cpu_repro",
                                                  "inductor/test_torchinductor_opinfo",
                                                  "test_quantized_op")
              for variant in (
                "[avx2, ATEN_CPU_FLOAT_TANH=vectorized]",
                "[avx512, ATEN_CPU_FLOAT_TANH=vectorized]")),  # DEFAULT: v2.6.0's code
        ])  # fmt: skip
        only_default = [t.name for t in levels.suite_tasks(Layout(Path("/x")), 5, ["default"])]
        self.assertEqual(only_default, [f"{suite} [default]" for suite in
                                        ("test_unary_ufuncs", "test_ops", "test_nn",
                                         "inductor/test_cpu_repro",
                                         "inductor/test_torchinductor_opinfo",
                                         "test_quantized_op")])  # fmt: skip
        tasks = levels.suite_tasks(Layout(Path("/x")), 5, ["default", "avx2"])
        self.assertEqual([t.name for t in tasks[:3]], [
            "test_unary_ufuncs [default]",
            "test_unary_ufuncs [avx2, ATEN_CPU_FLOAT_TANH=vectorized]",
            "test_unary_ufuncs [avx2, ATEN_CPU_FLOAT_TANH=vml]",  # the highest this CPU runs
        ])  # fmt: skip
        envs, commands = [], []

        def execute(lay, name, command, env, p):
            envs.append(env)
            commands.append(" ".join(command))

        with mock.patch.object(suites, "execute", execute):
            for task in tasks[:3]:
                task.run(None)
        # =vml runs the float32 tests alone: the other dtypes take the same code either way
        self.assertNotIn("float32", commands[1])
        self.assertIn("(tanh and not atanh and not hardtanh) and (float32)", commands[2])
        self.assertEqual(envs, [
            {"ATEN_CPU_CAPABILITY": "default"},
            {"ATEN_CPU_CAPABILITY": "avx2", "ATEN_CPU_FLOAT_TANH": "vectorized"},
            {"ATEN_CPU_CAPABILITY": "avx2", "ATEN_CPU_FLOAT_TANH": "vml"},
        ])  # fmt: skip

    def test_level_5_leaves_out_what_never_reaches_tanh_stub(self):
        by_name = {s.name: s for s in SUITES if 5 in s.levels}
        for name in ("test_unary_ufuncs", "test_ops", "test_nn"):
            self.assertIn("not hardtanh", by_name[name].select)
        for name in ("test_unary_ufuncs", "test_ops"):  # test_nn has no atanh test
            self.assertIn("not atanh", by_name[name].select)
        self.assertEqual(
            [(s.name, s.vml) for s in SUITES if s.vml], [("test_unary_ufuncs", "each")]
        )

    def level_5(self, runnable: list[str]) -> tuple[list[Result], list[tuple]]:
        """level_5's results on a CPU that runs `runnable`, with stand-in processes; and what
        each process ran: (worker args, capability, float kernel, inductor cache)."""
        ran = []
        model = suites.Task(tanh_model.NAME, lambda _: (Result(tanh_model.NAME, 1), ""))

        class Fake(suites.Processes):
            def run(self, command, **kwargs):
                env = kwargs["env"]
                kernel = env.get("ATEN_CPU_FLOAT_TANH")
                worker = command[command.index("-m") + 1 :]
                cache = env["TORCHINDUCTOR_CACHE_DIR"]
                ran.append((worker, env["ATEN_CPU_CAPABILITY"], kernel, cache))
                if worker[0] == "stacktool.tanh_accuracy":
                    digest = {"vml": 1, "vectorized": 2}.get(kernel, 3)
                    results = "vml" if kernel in ("vml", None) else "tanh_float"
                    Path(worker[2]).write_text(json.dumps({**TanhAccuracyTest.FOUND,
                                                           "digest": digest,
                                                           "results": results}))  # fmt: skip
                    return subprocess.CompletedProcess(command, 0, "", "")
                return subprocess.CompletedProcess(command, 0, "==== 1 passed in 0.1s ====", "")

        with (
            mock.patch.object(suites, "Processes", Fake),
            mock.patch.object(tanh_accuracy, "supported", return_value=runnable),
            mock.patch.object(tanh_model, "task", return_value=model),
            mock.patch.object(
                reduced_bits,
                "task",
                lambda _, cap: suites.Task(
                    f"reduced bits [{cap}]", lambda _: (Result(f"reduced bits [{cap}]", 1), "")
                ),
            ),
            mock.patch("builtins.print"),
        ):
            return levels.level_5(Layout(Path("/x")).gate_tree(5), lambda line: None), ran

    def test_level_5_end_to_end_with_stand_in_processes(self):
        """Every variant's suites and exhaustive checks, the skipped capability, and the check
        that ATEN_CPU_FLOAT_TANH's two values ran two kernels (their digests differ)."""
        results, ran = self.level_5(["default", "avx2"])
        names = [r.name for r in results]
        self.assertIn("test_nn [avx2, ATEN_CPU_FLOAT_TANH=vectorized]", names)
        self.assertIn("tanh float32, all 2^32 inputs [avx2, ATEN_CPU_FLOAT_TANH=vml]", names)
        self.assertIn("reduced bits [default]", names)  # against v2.6.0, each capability
        self.assertIn("reduced bits [avx2]", names)
        workers = [(w, cap, kernel) for w, cap, kernel, _ in ran
                   if w[0] == "stacktool.tanh_accuracy"]  # fmt: skip
        self.assertEqual(len(workers), 3)  # the exhaustive check: default, avx2 twice
        for worker, cap, kernel in workers:  # on one thread each: two run at once
            # every result hashed where `switched` compares them: DEFAULT's and vml's
            flags = ["1"] if kernel == "vectorized" else ["1", tanh_accuracy.RESULTS]
            self.assertEqual((worker[1], worker[3:]), (cap, flags))
        # test_unary_ufuncs and the check under three variants, test_ops, test_nn,
        # test_cpu_repro, test_torchinductor_opinfo and test_quantized_op one
        self.assertEqual(len(ran), 2 * 3 + 5 * 1)
        by_name = {r.name: r for r in results}
        skip = by_name["tanh float32, all 2^32 inputs [avx512, ATEN_CPU_FLOAT_TANH=vectorized]"]
        self.assertEqual((skip.skipped, skip.failed), (1, 0))  # avx512: listed, skipped
        vml = "tanh float32, all 2^32 inputs [avx512, ATEN_CPU_FLOAT_TANH=vml]"
        self.assertNotIn(vml, by_name)  # the float branch ran, at avx2
        switch = by_name["ATEN_CPU_FLOAT_TANH=vml and =vectorized run two kernels [avx2]"]
        self.assertEqual((switch.passed, switch.failed), (1, 0))
        default = by_name["ATEN_CPU_FLOAT_TANH=vml computes DEFAULT's float results [avx2]"]
        self.assertEqual((default.passed, default.failed), (1, 0))
        self.assertEqual(by_name[tanh_model.NAME].passed, 1)  # the AVX512 body, modelled
        self.assertEqual(sum(r.failed for r in results), 0)

    def test_level_5_on_an_avx512_cpu_runs_each_avx_builds_vml_branch(self):
        """An AVX-512 CPU (faked: this one may lack it) runs test_unary_ufuncs under =vml in
        the AVX2 build too, not only at avx512; the exhaustive check runs =vml once, at avx512;
        each capability compiles into a cache of its own."""
        results, ran = self.level_5(["default", "avx2", "avx512"])
        suite_runs = [
            (cap, kernel) for w, cap, kernel, _ in ran if "test/test_unary_ufuncs.py" in w
        ]
        self.assertCountEqual(suite_runs, [("default", None), ("avx2", "vectorized"),
                                           ("avx512", "vectorized"), ("avx2", "vml"),
                                           ("avx512", "vml")])  # fmt: skip
        workers = [(cap, kernel) for w, cap, kernel, _ in ran if w[0] == "stacktool.tanh_accuracy"]
        self.assertCountEqual(workers, [("default", None), ("avx2", "vectorized"),
                                        ("avx512", "vectorized"), ("avx512", "vml")])  # fmt: skip
        for _, cap, _, cache in ran:
            self.assertEqual(cache, f"/x/build/inductor-cache/level-5/{cap}-wheel")
        names = [r.name for r in results]
        self.assertIn("test_unary_ufuncs [avx2, ATEN_CPU_FLOAT_TANH=vml]", names)
        self.assertNotIn("test_ops [avx2, ATEN_CPU_FLOAT_TANH=vml]", names)
        self.assertFalse([r for r in results if r.skipped])  # nothing this CPU lacks
        self.assertNotIn(tanh_model.NAME, names)  # the kernel itself ran
        self.assertIn("ATEN_CPU_FLOAT_TANH=vml computes DEFAULT's float results [avx512]", names)
        self.assertEqual(sum(r.failed for r in results), 0)

    def test_every_deselection_and_unusual_selection_has_a_one_line_reason(self):
        for suite in SUITES:
            for test, reason in suite.deselect.items():
                self.assertTrue(reason and "\n" not in reason, f"{suite.name}: {test}")
            if suite.deselect or suite.env or suite.select != "attn":
                self.assertTrue(suite.why and "\n" not in suite.why, suite.name)

    def test_dtensor_runs_at_both_levels(self):
        (dtensor,) = (s for s in SUITES if "test_dtensor_ops" in s.path)
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

    def test_suite_env_never_inherits_a_kernel_choice(self):
        shell = {"ATEN_CPU_CAPABILITY": "avx2", "ATEN_CPU_FLOAT_TANH": "vml"}
        layout = Layout(Path("/x"))
        with mock.patch.dict(os.environ, shell):
            self.assertFalse(set(shell) & set(suite_env(layout)))
            self.assertEqual(suite_env(layout, {"ATEN_CPU_FLOAT_TANH": "vectorized"})
                             ["ATEN_CPU_FLOAT_TANH"], "vectorized")  # fmt: skip

    def test_suite_env_never_inherits_a_test_configuration(self):
        shell = {
            "PYTORCH_TEST_WITH_DYNAMO": "1",
            "PYTORCH_TEST_RUN_EVERYTHING_IN_SERIAL": "1",
            "PYTORCH_OPINFO_SAMPLE_INPUT_INDEX": "0",
            "SLOW_TESTS_FILE": "/x/slow.json",
        }
        layout = Layout(Path("/x"))
        with mock.patch.dict(os.environ, shell):
            self.assertFalse(set(shell) & set(suite_env(layout)))
            self.assertEqual(suite_env(layout, levels.DYNAMO)["PYTORCH_TEST_WITH_DYNAMO"], "1")

    def test_each_tree_and_capability_compiles_into_a_cache_of_its_own(self):
        """v2.6.0's inductor reuses a kernel compiled under another ATEN_CPU_CAPABILITY (a
        double free): each capability, and each level's tree, gets its folder under build/."""
        level_4, level_6 = (Layout(Path("/x")).gate_tree(level) for level in (4, 6))

        def cache(layout, capability=None):
            extra = tanh_accuracy.variant_env(capability, None) if capability else {}
            return Path(suite_env(layout, extra)["TORCHINDUCTOR_CACHE_DIR"])

        shell = {"TORCHINDUCTOR_CACHE_DIR": "/tmp/shared", "ATEN_CPU_CAPABILITY": "avx512"}
        with mock.patch.dict(os.environ, shell):
            found = [cache(level_4, "avx2"), cache(level_4, "avx512"), cache(level_4),
                     cache(level_6, "avx2"), cache(Layout(Path("/x")))]  # fmt: skip
        self.assertEqual(found, [Path("/x/build/inductor-cache/level-4/avx2-wheel"),
                                 Path("/x/build/inductor-cache/level-4/avx512-wheel"),
                                 Path("/x/build/inductor-cache/level-4/native-wheel"),
                                 Path("/x/build/inductor-cache/level-6/avx2-wheel"),
                                 Path("/x/build/inductor-cache/pytorch/native-wheel")])  # fmt: skip

    def test_suite_env_writes_bytecode_to_one_folder_outside_the_trees(self):
        """A shell's PYTHONDONTWRITEBYTECODE=1 is dropped: a module a suite's process imports
        is compiled once, into build/pycache below its path, never beside it."""
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp).resolve()
            (root / "module.py").write_text("VALUE = 1\n")
            with mock.patch.dict(os.environ, {"PYTHONDONTWRITEBYTECODE": "1"}):
                env = suite_env(Layout(root))
            self.assertNotIn("PYTHONDONTWRITEBYTECODE", env)
            self.assertEqual(env["PYTHONPYCACHEPREFIX"], str(root / "build" / "pycache"))
            subprocess.run([sys.executable, "-c", "import module"], cwd=root, env=env, check=True)
            cached = list((root / "build" / "pycache").rglob("module.*.pyc"))
            self.assertEqual(
                [p.parent for p in cached], [root / "build" / "pycache" / root.relative_to("/")]
            )
            self.assertFalse((root / "__pycache__").exists())

    def test_suite_env_has_waiting_openmp_threads_sleep(self):
        with mock.patch.dict(os.environ, {"OMP_WAIT_POLICY": "ACTIVE"}):
            self.assertEqual(suite_env(Layout(Path("/x")))["OMP_WAIT_POLICY"], "PASSIVE")

    def test_suite_env_leaves_os_environ_alone(self):
        with mock.patch.dict(os.environ, {"CI": "1"}):
            env = suite_env(Layout(Path("/x")), {"PYTORCH_TEST_WITH_INDUCTOR": "1"})
            self.assertNotIn("PYTORCH_TEST_WITH_INDUCTOR", os.environ)
        self.assertNotIn("CI", env)
        self.assertEqual(env["PYTORCH_TEST_WITH_INDUCTOR"], "1")

    def test_runner_failing_without_a_test_failing_counts(self):
        result = self.run_script("print('==== 2 passed in 0.1s ===='); raise SystemExit(3)")
        self.assertEqual((result.passed, result.failed), (2, 1))


class RunAllTest(unittest.TestCase):
    """Two suites at a time, each shown whole when it ends, in the table in the given order."""

    def layout(self) -> Layout:
        tmp = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, tmp)
        return Layout(tmp)

    def run_all(self, tasks, workers=2, shown=None):
        """run_all's results, printed output and logged lines; `shown(line)` sees each line."""
        out, lines = io.StringIO(), []

        def log(line):
            lines.append(line)
            if shown:
                shown(line)

        with contextlib.redirect_stdout(out):
            results = suites.run_all(self.layout(), tasks, log, workers)
        return results, out.getvalue(), lines

    def test_two_run_at_once_and_results_keep_the_tasks_order(self):
        both = threading.Barrier(2, timeout=10)  # broken unless two tasks run at once
        second_shown = threading.Event()

        def first(processes):
            both.wait()
            second_shown.wait(10)  # ends once the second one's line is out
            return Result("first", passed=1), ""

        def second(processes):
            both.wait()
            return Result("second", passed=2), ""

        def shown(line):
            if line.startswith("second:"):
                second_shown.set()

        tasks = [Task("first", first), Task("second", second)]
        results, _, lines = self.run_all(tasks, shown=shown)
        self.assertEqual([r.name for r in results], ["first", "second"])
        self.assertEqual([line.split(":")[0] for line in lines], ["second", "first"])
        self.assertEqual(lines[1], "first: 1 passed, 0 failed, 0 skipped ()")

    def test_the_longest_start_first_and_results_keep_the_tasks_order(self):
        started = []

        def task(name, seconds):
            return Task(name, lambda processes: (started.append(name), (Result(name), ""))[1],
                        seconds)  # fmt: skip

        tasks = [task("short", 0), task("long", 200), task("also short", 0), task("mid", 90)]
        results, _, _ = self.run_all(tasks, workers=1)
        self.assertEqual(started, ["long", "mid", "short", "also short"])
        self.assertEqual([r.name for r in results], ["short", "long", "also short", "mid"])

    def test_a_failure_shows_its_own_output_whole_and_the_others_go_on(self):
        def failing(processes):
            return Result("bad", failed=1), "line 1 of bad\nline 2 of bad\n"

        def crashing(processes):
            raise ValueError("a bug in the task")

        tasks = [Task("bad", failing), Task("crash", crashing),
                 Task("good", lambda processes: (Result("good", passed=1), "not shown"))]  # fmt: skip
        results, out, lines = self.run_all(tasks)
        self.assertEqual(
            [(r.name, r.failed) for r in results], [("bad", 1), ("crash", 1), ("good", 0)]
        )
        self.assertIn("line 1 of bad\nline 2 of bad\n", out)  # in one piece
        self.assertIn("ValueError: a bug in the task", out)
        self.assertNotIn("not shown", out)
        self.assertIn("log: ", results[0].note)
        self.assertEqual(len(lines), 3)

    def test_an_interrupt_stops_what_runs_and_starts_nothing_more(self):
        """Ctrl-C reaches the main thread (here: as the first check is shown); cli has stopped
        the processes below it by then, and run_all those its workers start after."""
        started, outcomes = threading.Event(), []

        def sleeper(processes):
            started.set()
            try:
                outcomes.append(processes.run(["sleep", "30"]).returncode)
            except suites.Stopped:
                outcomes.append("not started")
            return Result("sleep", passed=1), ""

        def quick(processes):
            started.wait(10)
            time.sleep(0.2)  # sleep 30 has started
            return Result("quick", passed=1), ""

        def log(line):
            raise KeyboardInterrupt

        tasks = [Task("sleep", sleeper), Task("quick", quick), Task("third", sleeper)]
        began = time.monotonic()
        with self.assertRaises(KeyboardInterrupt), contextlib.redirect_stdout(io.StringIO()):
            suites.run_all(self.layout(), tasks, log, 2)
        self.assertLess(time.monotonic() - began, 10)
        self.assertIn(-signal.SIGTERM, outcomes)
        self.assertLessEqual(set(outcomes), {-signal.SIGTERM, "not started"})

    def test_a_stopped_run_refuses_new_processes(self):
        processes = suites.Processes()
        processes.stop()
        with self.assertRaises(suites.Stopped):
            processes.run([sys.executable, "-c", "pass"])


class TanhAccuracyTest(unittest.TestCase):
    """The exhaustive check's verdict and its per-capability runs (no torch needed here)."""

    FOUND = {"capability": "AVX2", "max_ulp": 1, "worst_x": 0.5, "not_rounded": 8,
             "nan_lost": 0, "not_odd": 0, "not_one": 0}  # fmt: skip

    def test_verdict(self):
        self.assertTrue(tanh_accuracy.verdict(self.FOUND))
        for key, bad in (("max_ulp", 2), ("nan_lost", 1), ("not_odd", 3), ("not_one", 1)):
            self.assertFalse(tanh_accuracy.verdict({**self.FOUND, key: bad}), key)
        self.assertIn("max 1 ULP", tanh_accuracy.summary(self.FOUND))

    def test_supported_asks_the_hardware_not_the_variable(self):
        # torch reports AVX512 whenever ATEN_CPU_CAPABILITY=avx512, supported or not
        seen = {}

        def probe(command, env, **kwargs):
            seen.update(env)
            return subprocess.CompletedProcess(command, 0, "default avx2 \n", "")

        with mock.patch.dict(os.environ, {"ATEN_CPU_CAPABILITY": "avx512"}), \
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
                mock.patch.object(suites.Processes, "run", lambda self, c, **k: worker(c)):  # fmt: skip
            results = tanh_accuracy.run(Layout(Path("/x")), lambda line: None)
        by_name = {r.name.split("[")[1].rstrip("]"): r for r in results}
        self.assertEqual((by_name["avx512"].skipped, by_name["avx512"].failed), (1, 0))
        self.assertIn("does not support", by_name["avx512"].note)
        self.assertEqual(by_name["avx2"].failed, 1)  # 3 ULP fails the bar

    def test_bench_check_leaves_the_kernel_to_the_vendor(self):
        envs, commands = [], []

        def worker(command, **kwargs):
            envs.append(kwargs["env"])
            commands.append(command)
            Path(command[-1]).write_text(json.dumps(self.FOUND))
            return subprocess.CompletedProcess(command, 0, "", "")

        with mock.patch.dict(os.environ, {"ATEN_CPU_FLOAT_TANH": "vml"}), \
                mock.patch.object(tanh_accuracy, "supported", return_value=["avx2"]), \
                mock.patch.object(suites.Processes, "run", lambda self, c, **k: worker(c, **k)):  # fmt: skip
            tanh_accuracy.run(Layout(Path("/x")), lambda line: None)
        self.assertEqual([env["ATEN_CPU_CAPABILITY"] for env in envs], ["avx2"])
        self.assertNotIn("ATEN_CPU_FLOAT_TANH", envs[0])  # not even the shell's
        self.assertTrue(commands[0][-1].endswith(".json"))  # torch's own thread count

    def test_variants_run_each_distinct_kernel_once(self):
        self.assertEqual(tanh_accuracy.variants(["default", "avx2", "avx512"]), [
            ("default", None), ("avx2", "vectorized"), ("avx512", "vectorized"),
            ("avx512", "vml"),  # the float branch =vml takes: VML's code at any capability
        ])  # fmt: skip
        self.assertEqual(tanh_accuracy.variants(["default", "avx2"]),
                         [("default", None), ("avx2", "vectorized"), ("avx2", "vml")])  # fmt: skip
        self.assertEqual(tanh_accuracy.variants(["default", "avx2"], vml=""),
                         [("default", None), ("avx2", "vectorized")])  # fmt: skip
        self.assertEqual(
            tanh_accuracy.variants(["default", "avx2"], vml="each"),
            tanh_accuracy.variants(["default", "avx2"]),
        )  # one AVX build: the same
        self.assertEqual(tanh_accuracy.variants(["default", "avx2", "avx512"], vml="each")[3:],
                         [("avx2", "vml"), ("avx512", "vml")])  # fmt: skip
        self.assertEqual(tanh_accuracy.variants(["default"]), [("default", None)])
        self.assertEqual(tanh_accuracy.variant_env("default", None),
                         {"ATEN_CPU_CAPABILITY": "default"})  # fmt: skip
        self.assertEqual(tanh_accuracy.label("avx512", "vml"), "[avx512, ATEN_CPU_FLOAT_TANH=vml]")

    def test_switched_fails_when_both_values_gave_the_same_outputs(self):
        found = {("avx2", "vml"): {"digest": 5}, ("avx2", "vectorized"): {"digest": 5},
                 ("avx512", "vml"): {"digest": 5}, ("avx512", "vectorized"): {"digest": 6}}  # fmt: skip
        results = {r.name.rsplit("[", 1)[1]: r for r in tanh_accuracy.switched(found)}
        self.assertEqual(set(results), {"avx2]", "avx512]"})  # default: nothing to switch
        self.assertEqual((results["avx2]"].failed, results["avx512]"].passed), (1, 1))
        self.assertIn("both values ran one kernel", results["avx2]"].note)
        del found["avx512", "vml"]  # its worker failed: that result says so, not this one
        self.assertEqual(len(tanh_accuracy.switched(found)), 1)

    def test_switched_checks_vml_gives_defaults_results_bit_for_bit(self):
        found = {("default", None): {"digest": 5, "results": "ab"},
                 ("avx512", "vml"): {"digest": 5, "results": "ab"},
                 ("avx512", "vectorized"): {"digest": 6, "results": "cd"}}  # fmt: skip
        results = {r.name: r for r in tanh_accuracy.switched(found)}
        same = results["ATEN_CPU_FLOAT_TANH=vml computes DEFAULT's float results [avx512]"]
        self.assertEqual((same.passed, same.failed), (1, 0))
        self.assertEqual(len(results), 2)  # and the switch, at avx512
        found["avx512", "vml"] = {"digest": 5, "results": "ef"}  # same digest, other bits
        results = {r.name: r for r in tanh_accuracy.switched(found)}
        differ = results["ATEN_CPU_FLOAT_TANH=vml computes DEFAULT's float results [avx512]"]
        self.assertEqual((differ.passed, differ.failed), (0, 1))
        self.assertIn("not DEFAULT's", differ.note)

    def test_skipped_lists_what_this_cpu_cannot_run(self):
        def skipped(runnable):
            return [r.name.split(" [", 1)[1] for r in tanh_accuracy.skipped(runnable)]

        self.assertEqual(skipped(["default", "avx2", "avx512"]), [])
        self.assertEqual(skipped(["default", "avx2"]), ["avx512, ATEN_CPU_FLOAT_TANH=vectorized]"])
        self.assertEqual(skipped(["default"]), [
            "avx2, ATEN_CPU_FLOAT_TANH=vectorized]", "avx512, ATEN_CPU_FLOAT_TANH=vectorized]",
            "avx512, ATEN_CPU_FLOAT_TANH=vml]",
        ])  # fmt: skip


if __name__ == "__main__":
    unittest.main()


class CapabilityNameTest(unittest.TestCase):
    def test_default_is_reported_as_no_avx(self):
        from stacktool.tanh_accuracy import capability_name

        self.assertEqual(capability_name("NO AVX\n"), "default")
        self.assertEqual(capability_name("AVX2"), "avx2")
