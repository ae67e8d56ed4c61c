"""What bench.png draws (stacktool/bench/plot.py): the ratios per size and the targets marked."""

import unittest

from stacktool.bench.common import FWD, FWD_BWD
from stacktool.bench.plot import ratio_series
from stacktool.tests.bench_fixtures import row, timing


class PlotTest(unittest.TestCase):
    def test_plotted_ratios_and_composite_targets_at_the_largest_thread_count(self):
        rows = [row((64, 32, 32), 2.0, 3.0, 1.0, floor=1.5),
                row((64, 32, 32), 2.0, 9.0, 9.0, threads=1),  # not plotted: 1 thread
                row((512, 64, 64), 4.0, 5.0, None),
                {**row((512, 64, 64), None, 5.0, 6.0), "pass": FWD}]  # fmt: skip
        found = ratio_series(timing(rows))
        self.assertEqual(found[FWD_BWD], {
            "sizes": [(64, 32, 32), (512, 64, 64)],
            "ratios": {"composite": [1.5, 1.25], "compile": [0.5, None]},
            "composite target": [1.5, 1.15],
        })  # fmt: skip
        self.assertEqual(found[FWD], {"sizes": [(512, 64, 64)], "ratios": {},
                                            "composite target": [None]})  # fmt: skip


if __name__ == "__main__":
    unittest.main()
