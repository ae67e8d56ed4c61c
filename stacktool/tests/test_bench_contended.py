"""The contended case (stacktool/bench/contended.py): its busy-loop process, real but brief,
is running through the contended rounds and gone after them, an exception included; the
worker on fakes times both conditions and writes a row per size and condition."""

import contextlib
import sys
import unittest
from unittest import mock

from stacktool.bench import contended
from stacktool.bench.common import FWD_BWD, QUICK
from stacktool.bench.contended import competitor


class CompetitorTest(unittest.TestCase):
    def test_running_in_the_block_and_killed_at_its_end(self):
        with competitor(60) as proc:
            self.assertIsNone(proc.poll())  # it said "busy": it is looping
        self.assertEqual(proc.returncode, -9)  # killed by its pid, not at its deadline

    def test_killed_when_the_block_raises(self):
        for error in (RuntimeError, KeyboardInterrupt):
            with self.assertRaises(error), competitor(60) as proc:
                raise error()
            self.assertEqual(proc.returncode, -9)

    def test_it_exits_by_itself_at_its_deadline(self):
        with competitor(0.2) as proc:
            self.assertEqual(proc.wait(timeout=30), 0)


class ContendedWorkerTest(unittest.TestCase):
    def run_worker(self, measure):
        """contended_worker on a fake torch with `measure` faked; (its result, the busy-loop
        processes it started: real ones, which `measure` can look at in self.procs)."""
        self.procs = []

        @contextlib.contextmanager
        def recorded(seconds):
            with competitor(seconds) as proc:
                self.procs.append(proc)
                yield proc

        torch = mock.MagicMock()
        methods = {"native": mock.Mock(), "composite": mock.Mock()}
        with (mock.patch.object(contended, "load_torch", return_value=(torch, methods)),
              mock.patch.object(contended, "measure", measure),
              mock.patch.object(contended, "competitor", recorded),
              mock.patch.dict(sys.modules, {"torch.utils.benchmark": mock.Mock()}),
              mock.patch.object(contended, "say")):  # fmt: skip
            return contended.contended_worker(mock.Mock(), QUICK, ((512, 64, 64), (2, 3, 4)))

    def test_uncontended_rounds_then_contended_ones_beside_one_busy_loop(self):
        running = []  # at each measure(), the busy loops then running

        def measure(steps, settings, timer):
            self.assertEqual(set(steps), {(s, m) for s in ((512, 64, 64), (2, 3, 4))
                                          for m in ("native", "floor")})  # fmt: skip
            self.assertEqual({threads for _, threads in steps.values()}, {2})
            running.append([p.pid for p in self.procs if p.poll() is None])
            ms = 2.0 if running[-1] else 1.0
            return {key: {"ms": ms, "rounds_ms": [ms, ms + 1]} for key in steps}

        found = self.run_worker(measure)
        self.assertEqual(len(self.procs), 1)  # one busy-loop process
        self.assertEqual(running, [[], [self.procs[0].pid]])  # alone first, then beside it
        self.assertEqual(self.procs[0].returncode, -9)  # killed when the phase ended
        self.assertTrue(found["busy_loop_throughout"])
        self.assertGreaterEqual(found["busy_loop_s"], contended.COMPETITOR_GRACE_S)
        self.assertEqual(len(found["load"]), 3)  # phase start, busy loop started, phase end
        self.assertEqual(
            [(r["size"], r["condition"], r["ms"]) for r in found["rows"]],
            [((512, 64, 64), "uncontended", {"native": 1.0, "floor": 1.0}),
             ((512, 64, 64), "contended", {"native": 2.0, "floor": 2.0}),
             ((2, 3, 4), "uncontended", {"native": 1.0, "floor": 1.0}),
             ((2, 3, 4), "contended", {"native": 2.0, "floor": 2.0})],
        )  # fmt: skip
        self.assertEqual({(r["threads"], r["pass"]) for r in found["rows"]}, {(2, FWD_BWD)})
        self.assertEqual(found["rows"][1]["rounds_ms"]["native"], [2.0, 3.0])

    def test_the_busy_loop_is_gone_when_the_contended_rounds_raise(self):
        for error in (RuntimeError, KeyboardInterrupt):

            def measure(steps, settings, timer, error=error):
                if self.procs:  # the contended rounds
                    raise error()
                return {key: {"ms": 1.0, "rounds_ms": [1.0]} for key in steps}

            with self.assertRaises(error):
                self.run_worker(measure)
            self.assertEqual(len(self.procs), 1)
            self.assertEqual(self.procs[0].returncode, -9)


if __name__ == "__main__":
    unittest.main()
