"""The benchmark's targets and verdicts (stacktool/bench/targets.py) on synthetic numbers."""

import unittest

from stacktool.bench import targets
from stacktool.bench.common import FWD, FWD_BWD, SIZES
from stacktool.tests.bench_fixtures import (
    contended,
    contended_row,
    memory,
    per_element,
    results,
    row,
    tanh_row,
    tanh_table,
    verdicts,
)


class ChecksTest(unittest.TestCase):
    def test_targets_by_size_and_thread_count(self):
        rows = [row(s, 1.0, 2.0, 2.0, floor=1.0, gemms=1.0, pr4=1.0, threads=t) for s in SIZES
                for t in (1, 2)]  # fmt: skip
        found = targets.checks(results(rows, memory(10.0)))
        self.assertEqual([(c.text, c.where) for c in found[:4]], [
            ("composite / native >= 1.50", f"2, 3, 4 {FWD_BWD}, 1 thread"),
            ("compile / native >= 1.00", f"2, 3, 4 {FWD_BWD}, 1 thread"),
            ("native / pr4 <= 1.00", f"2, 3, 4 {FWD_BWD}, 1 thread"),  # at every size
            ("composite / native >= 1.50", f"2, 3, 4 {FWD_BWD}, 2 threads"),
        ])  # fmt: skip
        self.assertEqual(
            [c.text for c in found if c.where.startswith("512, 64, 64 forward+backward, 1 ")],
            ["composite / native >= 1.15", "compile / native >= 1.00", "native / gemms <= 1.05",
             "native / pr4 <= 1.00"],
        )  # fmt: skip
        self.assertEqual(
            [c.text for c in found if c.where.startswith("2048, 64, 64 forward+backward, 2 ")],
            ["composite / native >= 1.15", "compile / native >= 1.00", "native / floor <= 1.10",
             "native / gemms <= 1.05", "native / pr4 <= 1.00"],
        )  # fmt: skip
        # per thread count: 3 at n <= 64, 4 at 512, 5 at 2048 and 4096; then the memory three
        self.assertEqual(len(found), 2 * (3 + 3 + 4 + 5 + 5) + 3)
        self.assertEqual([c.where for c in found[-3:]], ["2048, 64, 64 peak memory"] * 3)

    def test_bounds_are_inclusive_and_directions_right(self):
        found = targets.checks(results([
            row((2, 3, 4), native=2.0, composite=3.0, compile=1.9,
                pr4=2.0),  # 1.50x met; 0.95x not met; PR 4's op 1.000 met
            row((512, 64, 64), native=10.0, composite=11.4, compile=10.0, gemms=9.5, pr4=9.99,
                threads=1),  # 1.14x not met; 1.0x met; 1.0526 not met; 1.001 not met
            row((2048, 64, 64), native=21.9, composite=40.0, compile=30.0, floor=20.0,
                gemms=21.0, pr4=30.0),  # floor 1.095 met, gemms 1.043 met, PR 4's 0.73 met
            row((4096, 128, 128), native=22.2, composite=40.0, compile=30.0, floor=20.0,
                gemms=21.15),  # 1.11 not met; 1.0496 met; PR 4's op not timed: n/a
        ], memory(20.8, unfused=34.7)))  # fmt: skip
        fb = FWD_BWD
        self.assertEqual(verdicts(found), [
            ("composite / native >= 1.50", f"2, 3, 4 {fb}, 2 threads", "met"),
            ("compile / native >= 1.00", f"2, 3, 4 {fb}, 2 threads", "not met"),
            ("native / pr4 <= 1.00", f"2, 3, 4 {fb}, 2 threads", "met"),
            ("composite / native >= 1.15", f"512, 64, 64 {fb}, 1 thread", "not met"),
            ("compile / native >= 1.00", f"512, 64, 64 {fb}, 1 thread", "met"),
            ("native / gemms <= 1.05", f"512, 64, 64 {fb}, 1 thread", "not met"),
            ("native / pr4 <= 1.00", f"512, 64, 64 {fb}, 1 thread", "not met"),
            ("composite / native >= 1.15", f"2048, 64, 64 {fb}, 2 threads", "met"),
            ("compile / native >= 1.00", f"2048, 64, 64 {fb}, 2 threads", "met"),
            ("native / floor <= 1.10", f"2048, 64, 64 {fb}, 2 threads", "met"),
            ("native / gemms <= 1.05", f"2048, 64, 64 {fb}, 2 threads", "met"),
            ("native / pr4 <= 1.00", f"2048, 64, 64 {fb}, 2 threads", "met"),
            ("composite / native >= 1.15", f"4096, 128, 128 {fb}, 2 threads", "met"),
            ("compile / native >= 1.00", f"4096, 128, 128 {fb}, 2 threads", "met"),
            ("native / floor <= 1.10", f"4096, 128, 128 {fb}, 2 threads", "not met"),
            ("native / gemms <= 1.05", f"4096, 128, 128 {fb}, 2 threads", "met"),
            ("native / pr4 <= 1.00", f"4096, 128, 128 {fb}, 2 threads", "n/a"),
            ("native / composite <= 0.75", "2048, 64, 64 peak memory", "met"),  # 0.310
            ("native / unfused <= 0.65", "2048, 64, 64 peak memory", "met"),  # 0.599
            ("native / attn output <= 1.40", "2048, 64, 64 peak memory", "met"),  # 1.300
        ])  # fmt: skip
        self.assertEqual(found[6].shown, "1.001")  # 10.0 / 9.99
        self.assertAlmostEqual(found[-3].ratio, 20.8 / 67)
        self.assertAlmostEqual(found[-2].ratio, 20.8 / 34.7)
        self.assertAlmostEqual(found[-1].ratio, 20.8 / 16)  # 2048 * 2048 * 4 bytes = 16 MB

    def test_memory_over_bound_is_not_met(self):
        found = targets.checks(results([], memory(51.0, composite=67.0)))
        self.assertEqual(verdicts(found), [
            ("native / composite <= 0.75", "2048, 64, 64 peak memory", "not met"),  # 0.761
            ("native / unfused <= 0.65", "2048, 64, 64 peak memory", "not met"),  # 0.850
            ("native / attn output <= 1.40", "2048, 64, 64 peak memory", "not met"),  # 3.19
        ])  # fmt: skip
        # PR 4's own peak, as its unfused path
        found = targets.checks(results([], memory(35.0, composite=67.0, unfused=35.0)))
        self.assertEqual([c.verdict for c in found], ["met", "not met", "not met"])
        # PR 4's op through autograd: a row of its own with no target; the three stay
        found = targets.checks(results([], memory(35.0, composite=67.0, pr4=30.0)))
        self.assertEqual([c.text for c in found], [c.text for c in targets.checks(
            results([], memory(35.0, composite=67.0)))])  # fmt: skip

    def test_without_native_everything_is_na(self):
        rows = [row(s, None, 2.0, 2.0, floor=1.0, gemms=1.0) for s in SIZES]
        found = targets.checks(results(rows, memory(None), has_native=False))
        self.assertEqual({c.verdict for c in found}, {"n/a"})
        self.assertEqual({c.ratio for c in found}, {None})

    def test_forward_rows_are_held_to_torch_compile_and_the_gemms(self):
        forward = {**row((64, 32, 32), 1.0, 9.0, 0.9, gemms=0.5, pr4=0.9), "pass": FWD}
        found = targets.checks(results([forward], memory(10.0)))
        self.assertEqual(verdicts(found)[:-3], [
            ("compile / native >= 1.00", "64, 32, 32 forward, 2 threads", "not met"),
            ("native / pr4 <= 1.00", "64, 32, 32 forward, 2 threads", "not met"),  # 1.111
        ])  # fmt: skip
        forward = {**row((512, 64, 64), 1.0, 9.0, 1.0, floor=0.5, gemms=0.96), "pass": FWD}
        found = targets.checks(results([forward], memory(10.0)))
        self.assertEqual(verdicts(found)[:-3], [
            ("compile / native >= 1.00", "512, 64, 64 forward, 2 threads", "met"),
            ("native / gemms <= 1.05", "512, 64, 64 forward, 2 threads", "met"),  # 1.042
            ("native / pr4 <= 1.00", "512, 64, 64 forward, 2 threads", "n/a"),  # not timed
        ])  # fmt: skip

    def test_contended_case_native_at_most_the_floor_at_n_2048_and_4096_both_conditions(self):
        rows = [
            contended_row((512, 64, 64), "uncontended", 9.0, 5.0),  # no target at n = 512
            contended_row((512, 64, 64), "contended", 9.0, 5.0),
            contended_row((2048, 64, 64), "uncontended", 20.0, 20.0),  # 1.000: met
            contended_row((2048, 64, 64), "contended", 40.016, 40.0),  # 1.0004: not met
            contended_row((4096, 128, 128), "uncontended", 240.0, 250.0),  # 0.960
            contended_row((4096, 128, 128), "contended", 600.0, 500.0),  # 1.200
        ]  # fmt: skip
        found = targets.checks(results([], memory(10.0), contended=contended(rows)))
        fb = f"{FWD_BWD}, 2 threads"
        self.assertEqual(verdicts(found)[:-3], [  # before the memory three
            ("native / floor <= 1.00", f"2048, 64, 64 {fb}, uncontended", "met"),
            ("native / floor <= 1.00", f"2048, 64, 64 {fb}, contended", "not met"),
            ("native / floor <= 1.00", f"4096, 128, 128 {fb}, uncontended", "met"),
            ("native / floor <= 1.00", f"4096, 128, 128 {fb}, contended", "not met"),
        ])  # fmt: skip
        self.assertEqual([c.shown for c in found[:4]], ["1.000", "1.0004", "0.960", "1.200"])
        # a run without the case (no torch.attn, or an older bench.json) has none of them
        self.assertEqual(len(targets.checks(results([], memory(10.0)))), 3)
        missing = contended([contended_row((2048, 64, 64), "contended", None, 40.0)])
        self.assertEqual(verdicts(targets.contended_checks(missing)),
                         [("native / floor <= 1.00", f"2048, 64, 64 {fb}, contended", "n/a")])  # fmt: skip

    def test_ratios_shown_as_measured_and_never_rounded_into_met(self):
        def check(ratio, bound, at_least):
            return targets.Check("t", "w", ratio, bound, at_least)

        tie = check(247 / 248, 1.0, True)  # torch.compile 247 ms against native 248 ms
        self.assertEqual((tie.shown, tie.verdict), ("0.996", "not met"))
        self.assertEqual((check(0.9996, 1.0, True).shown, check(0.9996, 1.0, True).verdict),
                         ("0.9996", "not met"))  # "1.000" would read as met  # fmt: skip
        self.assertEqual((check(1.1004, 1.1, False).shown, check(1.1004, 1.1, False).verdict),
                         ("1.1004", "not met"))  # fmt: skip
        self.assertEqual((check(1.0996, 1.1, False).shown, check(1.0996, 1.1, False).verdict),
                         ("1.100", "met"))  # fmt: skip
        self.assertEqual((check(1.5, 1.5, True).shown, check(1.5, 1.5, True).verdict),
                         ("1.500", "met"))  # fmt: skip
        self.assertEqual((check(None, 1.0, True).shown, check(None, 1.0, True).verdict),
                         ("n/a", "n/a"))  # fmt: skip


class TanhChecksTest(unittest.TestCase):
    def test_not_slower_everywhere_and_the_copy_bound_for_contiguous_at_one_thread(self):
        tanh = tanh_table([
            tanh_row("default", "contiguous", 1, 13.5, 13.0, copy=1.0),  # 1.04; no copy target
            tanh_row("avx2", "contiguous", 1, 1.46, 1.45, sleef=10.4, vectorized=1.6, copy=1.0),
            tanh_row("avx2", "contiguous", 2, 7.0, 7.5, vectorized=1.0),  # 0.933
            tanh_row("avx2", "rows of 17", 1, 8.65, 1.09, vectorized=9.0, copy=1.0),
            tanh_row("avx512", "contiguous", 1, 1.44, 1.43, vectorized=2.1, copy=1.3),  # 1.615
            tanh_row("avx512", "f16 inner stride 2", 1, 10.7, 27.5),
        ])  # fmt: skip
        found = targets.checks(results([], memory(10.0), tanh=tanh))[3:]
        self.assertEqual(verdicts(found), [
            ("v2.6.0 / this stack >= 0.95", "tanh contiguous, 1 thread, default", "met"),
            ("v2.6.0 / this stack >= 0.95", "tanh contiguous, 1 thread, avx2", "met"),
            ("vectorized / copy <= 1.60", "tanh contiguous, 1 thread, avx2", "met"),  # 1.60
            ("v2.6.0 / this stack >= 0.95", "tanh contiguous, 2 threads, avx2", "not met"),
            ("v2.6.0 / this stack >= 0.95", "tanh rows of 17, 1 thread, avx2", "met"),
            ("v2.6.0 / this stack >= 0.95", "tanh contiguous, 1 thread, avx512", "met"),
            ("vectorized / copy <= 1.60", "tanh contiguous, 1 thread, avx512", "not met"),
            ("v2.6.0 / this stack >= 0.95", "tanh f16 inner stride 2, 1 thread, avx512", "not met"),
        ])  # fmt: skip

    def test_the_copy_bound_without_a_vectorized_time_is_na(self):
        row = tanh_row("avx2", "contiguous", 1, 1.46, 1.45, copy=1.0)
        found = targets.tanh_row_checks(row, intel=True)
        self.assertEqual(found["vectorized / copy"].verdict, "n/a")
        self.assertEqual(found["vectorized / v2.6.0"].verdict, "n/a")

    # the in-cache case (16384 floats) at 1 thread; ns per element given, ms per call stored
    ROWS = [
        tanh_row("default", "in cache", 1, per_element(1.2), per_element(1.25),
                 copy=per_element(0.1)),  # 0.960: only the not-slower target at default
        tanh_row("avx2", "contiguous", 1, 2.0, 1.9, vectorized=2.1, copy=1.4),  # 1.050: met
        tanh_row("avx2", "contiguous", 2, 0.9, 1.0, vectorized=1.0),  # no VML bound at 2 threads
        tanh_row("avx2", "in cache", 1, per_element(0.5), per_element(0.55),
                 vectorized=per_element(0.53), copy=per_element(0.1)),  # 0.909, 1.060
        tanh_row("avx512", "in cache", 1, per_element(0.4), per_element(0.3),
                 vectorized=per_element(0.3), copy=per_element(0.1)),  # 1.333, 0.750
        tanh_row("avx512", "rows of 17", 1, 8.0, 1.0, vectorized=1.0),  # not a VML case
    ]  # fmt: skip

    def test_the_in_cache_row_is_held_to_not_slower_and_on_intel_to_vml(self):
        found = targets.tanh_checks(tanh_table(self.ROWS, cpu_vendor="GenuineIntel"))
        self.assertEqual(verdicts(found), [
            ("v2.6.0 / this stack >= 0.95", "tanh in cache, 1 thread, default", "met"),
            ("v2.6.0 / this stack >= 0.95", "tanh contiguous, 1 thread, avx2", "met"),
            ("vectorized / copy <= 1.60", "tanh contiguous, 1 thread, avx2", "met"),  # 1.500
            ("vectorized / v2.6.0 <= 1.05", "tanh contiguous, 1 thread, avx2", "met"),
            ("v2.6.0 / this stack >= 0.95", "tanh contiguous, 2 threads, avx2", "not met"),
            ("v2.6.0 / this stack >= 0.95", "tanh in cache, 1 thread, avx2", "not met"),
            ("vectorized / v2.6.0 <= 1.05", "tanh in cache, 1 thread, avx2", "not met"),
            ("v2.6.0 / this stack >= 0.95", "tanh in cache, 1 thread, avx512", "met"),
            ("vectorized / v2.6.0 <= 1.05", "tanh in cache, 1 thread, avx512", "met"),
            ("v2.6.0 / this stack >= 0.95", "tanh rows of 17, 1 thread, avx512", "met"),
        ])  # fmt: skip
        self.assertEqual([c.shown for c in found if c.text.startswith("vectorized / v2.6.0")],
                         ["1.050", "1.060", "0.750"])  # fmt: skip
        self.assertEqual(found[0].shown, "0.960")

    def test_the_vml_bound_applies_on_intel_cpus_only(self):
        for vendor in ("AuthenticAMD", None):
            found = targets.tanh_checks(tanh_table(self.ROWS, cpu_vendor=vendor))
            self.assertEqual(len(found), 7)
            self.assertFalse([c for c in found if c.text.startswith("vectorized / v2.6.0")])
        older = tanh_table(self.ROWS)  # a bench.json from before the vendor was recorded
        del older["cpu_vendor"]
        self.assertEqual(len(targets.tanh_checks(older)), 7)


if __name__ == "__main__":
    unittest.main()
