"""The timing loop (stacktool/bench/measure.py) with a stand-in for torch's Timer."""

import unittest
from unittest import mock

from stacktool.bench.common import Settings
from stacktool.bench.measure import measure, quietest


class Timer:
    """A stand-in for torch.utils.benchmark.Timer that logs what it is asked."""

    log: list = []

    def __init__(self, stmt, globals, num_threads, timer):
        self.step, self.threads = globals["step"], num_threads
        self.log.append(("Timer", stmt, num_threads))

    def blocked_autorange(self, min_run_time):
        self.step()
        self.log.append(("blocked_autorange", self.threads, min_run_time))
        return mock.Mock(times=[self.threads * 1e-3, self.threads * 3e-3])


class MeasureTest(unittest.TestCase):
    def test_warms_up_then_interleaves_rounds(self):
        calls, Timer.log = [], []
        steps = {"a": (lambda: calls.append("a"), 1), "b": (lambda: calls.append("b"), 2)}
        found = measure(steps, Settings((), rounds=2, min_run_time=0.5), Timer)
        self.assertEqual(calls, ["a", "a", "b", "b", "a", "b", "a", "b"])
        self.assertEqual(Timer.log, [
            ("Timer", "step()", 1), ("Timer", "step()", 2),
            ("blocked_autorange", 1, 0.5), ("blocked_autorange", 2, 0.5),
            ("blocked_autorange", 1, 0.5), ("blocked_autorange", 2, 0.5),
        ])  # fmt: skip
        self.assertEqual(found["a"]["blocks"], 4)  # two blocks from each of two rounds
        self.assertEqual(found["a"]["rounds_ms"], [2.0, 2.0])  # median of 1 and 3 ms
        self.assertAlmostEqual(found["b"]["ms"], 4.0)

    def test_the_quietest_rounds_median(self):
        disturbed = [5e-3, 9e-3, 1e-3]  # median 5 ms: most of this round's blocks were slowed
        quiet = [1e-3, 2e-3, 3e-3, 40e-3]  # median 2.5 ms: one slow block does not move it
        found = quietest([disturbed, quiet])
        self.assertAlmostEqual(found["ms"], 2.5)
        self.assertEqual([round(ms, 6) for ms in found["rounds_ms"]], [5.0, 2.5])
        self.assertEqual(found["blocks"], 7)


if __name__ == "__main__":
    unittest.main()
