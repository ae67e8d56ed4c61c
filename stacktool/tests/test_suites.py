import unittest

from stacktool.suites import pytest_counts


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


if __name__ == "__main__":
    unittest.main()
