"""The tanh table's tool side (stacktool/bench/tanh.py): how the workers' rows merge."""

import unittest

from stacktool.bench import tanh


class TanhTableTest(unittest.TestCase):
    def test_rows_merge_the_workers_of_each_capability(self):
        def result(*rows):
            return {"rows": [{"case": c, "threads": t, "impl": i, "ms": ms, "rounds_ms": [ms]}
                             for c, t, i, ms in rows]}  # fmt: skip

        found = {
            ("default", "v2.6.0"): result(("column", 1, "torch", 0.04)),
            ("default", "this stack"): result(("column", 1, "torch", 0.05)),
            ("avx2", "v2.6.0"): result(
                ("contiguous", 1, "torch", 13.0), ("contiguous", 1, "sleef", 9.0)
            ),  # fmt: skip
            ("avx2", "this stack"): result(("contiguous", 1, "torch", 2.5)),
        }
        rows = tanh.tanh_rows(["default", "avx2"], found)
        self.assertEqual([(r["capability"], r["case"], r["ms"]) for r in rows], [
            ("default", "column", {"v2.6.0": 0.04, "this stack": 0.05}),
            ("avx2", "contiguous", {"v2.6.0": 13.0, "Sleef u10": 9.0, "this stack": 2.5}),
        ])  # fmt: skip


if __name__ == "__main__":
    unittest.main()
