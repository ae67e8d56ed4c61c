"""The tanh table's tool side (stacktool/bench/tanh.py): which worker processes run, how their
rows merge, and that a worker is refused when it ran something other than its label says."""

import tempfile
import unittest
from pathlib import Path
from unittest import mock

from stacktool import tanh_accuracy
from stacktool.bench import tanh
from stacktool.config import Layout


class TanhTableTest(unittest.TestCase):
    def test_rows_merge_the_workers_of_each_capability(self):
        def result(*rows):
            return {"rows": [{"case": c, "threads": t, "impl": i, "ms": ms, "rounds_ms": [ms]}
                             for c, t, i, ms in rows]}  # fmt: skip

        found = {
            ("default", "v2.6.0"): result(("column", 1, "torch", 0.04)),
            ("default", "this stack"): result(
                ("column", 1, "torch", 0.05), ("column", 1, "copy", 0.01)
            ),  # fmt: skip
            ("avx2", "v2.6.0"): result(
                ("contiguous", 1, "torch", 13.0), ("contiguous", 1, "sleef", 9.0)
            ),  # fmt: skip
            ("avx2", "this stack"): result(("contiguous", 1, "torch", 2.5)),
            ("avx2", tanh.VECTORIZED): result(("contiguous", 1, "torch", 2.0)),
        }
        rows = tanh.tanh_rows(found)
        self.assertEqual([(r["capability"], r["case"], r["ms"]) for r in rows], [
            ("default", "column", {"v2.6.0": 0.04, "this stack": 0.05, "copy": 0.01}),
            ("avx2", "contiguous", {"v2.6.0": 13.0, "Sleef u10": 9.0, "this stack": 2.5,
                                    tanh.VECTORIZED: 2.0}),
        ])  # fmt: skip

    def test_vectorized_is_forced_only_where_pr_5_changes_the_build_and_times_the_copy(self):
        layout = Layout(Path("/p"))
        self.assertEqual(tanh.processes(layout, "default"), [
            ("v2.6.0", {"PYTHONPATH": str(layout.wheel_tree)}, []),
            ("this stack", {}, ["--copy"]),
        ])  # fmt: skip
        self.assertEqual(tanh.processes(layout, "avx512"), [
            ("v2.6.0", {"PYTHONPATH": str(layout.wheel_tree)},
             ["--sleef", "/p/build/bench-sleef/avx512"]),
            ("this stack", {}, []),
            (tanh.VECTORIZED, {"ATEN_CPU_FLOAT_TANH": "vectorized"}, ["--copy"]),
        ])  # fmt: skip

    def test_a_worker_that_ran_another_setting_is_refused(self):
        log, envs = [], []

        def worker(layout, command, *args, env):  # ignores ATEN_CPU_FLOAT_TANH
            envs.append(env)
            return {"torch": "t", "capability": env["ATEN_CPU_CAPABILITY"],
                    "has_attn": "PYTHONPATH" not in env, "float_tanh": None, "rows": []}  # fmt: skip

        with (mock.patch.object(tanh, "worker", worker),
              mock.patch.object(tanh_accuracy, "supported", lambda _: ["avx2"])):  # fmt: skip
            self.assertIsNone(tanh.tanh_speed(Layout(Path("/nonexistent")), log.append, None))
        self.assertEqual([env["ATEN_CPU_FLOAT_TANH"] for env in envs], [None, None, "vectorized"])
        self.assertEqual(log[-1], "this stack, vectorized [avx2] ran t as avx2, "
                                  "ATEN_CPU_FLOAT_TANH=None")  # fmt: skip

    def test_the_in_cache_case_is_given_per_element(self):
        self.assertEqual(tanh.PER_ELEMENT, {"in cache": 16384})
        self.assertIn("randn(16384)", tanh.TANH_CASES["in cache"])
        self.assertEqual(list(tanh.TANH_CASES)[:2], ["contiguous", "in cache"])

    def test_whether_the_build_reads_the_variable_is_read_off_its_library(self):
        with tempfile.TemporaryDirectory() as tmp:
            layout = Layout(Path(tmp))
            self.assertFalse(tanh.reads_float_tanh(layout))  # no build
            layout.overlay.mkdir(parents=True)
            library = layout.overlay / "libstack_overlay.so"
            library.write_bytes(b"\0ATEN_CPU_CAPABILITY\0")
            self.assertFalse(tanh.reads_float_tanh(layout))
            library.write_bytes(b"\0ATEN_CPU_FLOAT_TANH\0vml\0")
            self.assertTrue(tanh.reads_float_tanh(layout))


if __name__ == "__main__":
    unittest.main()
