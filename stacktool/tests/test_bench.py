"""The benchmark's pure parts (targets, verdicts, the report) on synthetic numbers; no torch."""

import unittest

from stacktool import bench


def timing(rows, has_native=True):
    return {
        "torch": "2.6.0",
        "cpu": "test CPU",
        "threads": 2,
        "has_native": has_native,
        "load": [0.04, 1.96],
        "rows": rows,
    }


def row(size, native, composite, compile, floor=None, function=1.0):
    ms = {"composite": composite, "function": function, "compile": compile, "floor": floor}
    if native is not None:
        ms["native"] = native
    return {"size": list(size), "pass": bench.FWD_BWD, "ms": ms}


def memory(native, composite=67.0):
    mb = {"composite": composite, "function": 116.0, "compile": 40.0}
    if native is not None:
        mb["native"] = native
    return {"size": list(bench.MEMORY_SIZE), "mb": mb}


def results(rows, mb, has_native=True, **more):
    return {"timing": timing(rows, has_native), "memory": mb, **more}


def verdicts(found):
    return [(c.text, c.where, c.verdict) for c in found]


class ChecksTest(unittest.TestCase):
    def test_targets_by_size(self):
        rows = [row(s, 1.0, 2.0, 2.0, floor=1.0) for s in bench.SIZES]
        found = bench.checks(results(rows, memory(10.0)))
        self.assertEqual(
            [(c.text.split(" ")[0], c.where.split(",")[0]) for c in found],
            [("composite", "2"), ("compile", "2"), ("composite", "64"), ("compile", "64"),
             ("composite", "512"), ("compile", "512"),
             ("composite", "2048"), ("compile", "2048"), ("native", "2048"),
             ("composite", "4096"), ("compile", "4096"), ("native", "4096"),
             ("native", "2048")],
        )  # fmt: skip
        self.assertEqual([c.bound for c in found[:6:2]], [1.5, 1.5, 1.15])

    def test_bounds_are_inclusive_and_directions_right(self):
        found = bench.checks(results([
            row((2, 3, 4), native=0.2, composite=0.3, compile=0.19),  # 1.50x met; 0.95x not met
            row((512, 64, 64), native=10.0, composite=11.4, compile=10.0),  # 1.14x not met; 1.0x met
            row((2048, 64, 64), native=21.9, composite=40.0, compile=30.0, floor=20.0),
            row((4096, 128, 128), native=22.2, composite=40.0, compile=30.0, floor=20.0),
        ], memory(50.0)))  # fmt: skip
        fb = bench.FWD_BWD
        self.assertEqual(verdicts(found), [
            ("composite / native >= 1.50", f"2, 3, 4 {fb}", "met"),
            ("compile / native >= 1.00", f"2, 3, 4 {fb}", "not met"),
            ("composite / native >= 1.15", f"512, 64, 64 {fb}", "not met"),
            ("compile / native >= 1.00", f"512, 64, 64 {fb}", "met"),
            ("composite / native >= 1.15", f"2048, 64, 64 {fb}", "met"),
            ("compile / native >= 1.00", f"2048, 64, 64 {fb}", "met"),
            ("native / floor <= 1.10", f"2048, 64, 64 {fb}", "met"),  # 1.095
            ("composite / native >= 1.15", f"4096, 128, 128 {fb}", "met"),
            ("compile / native >= 1.00", f"4096, 128, 128 {fb}", "met"),
            ("native / floor <= 1.10", f"4096, 128, 128 {fb}", "not met"),  # 1.11
            ("native / composite <= 0.75", "2048, 64, 64 peak memory", "met"),  # 0.746
        ])  # fmt: skip
        self.assertAlmostEqual(found[-1].ratio, 50 / 67)

    def test_memory_over_bound_is_not_met(self):
        found = bench.checks(results([], memory(98.0)))
        self.assertEqual(
            verdicts(found), [("native / composite <= 0.75", "2048, 64, 64 peak memory", "not met")]
        )

    def test_without_native_everything_is_na(self):
        rows = [row(s, None, 2.0, 2.0, floor=1.0) for s in bench.SIZES]
        found = bench.checks(results(rows, memory(None), has_native=False))
        self.assertEqual({c.verdict for c in found}, {"n/a"})
        self.assertEqual({c.ratio for c in found}, {None})

    def test_forward_rows_are_held_to_torch_compile_only(self):
        forward = {**row((64, 32, 32), 1.0, 9.0, 0.9), "pass": bench.FWD}
        found = bench.checks(results([forward], memory(10.0)))
        self.assertEqual(verdicts(found)[0],
                         ("compile / native >= 1.00", "64, 32, 32 forward", "not met"))  # fmt: skip
        self.assertEqual(len(found), 2)

    def test_tanh_target_at_one_thread_on_this_cpus_capability(self):
        def tanh_row(capability, threads, old, new):
            return {"capability": capability, "threads": threads,
                    "ms": {"v2.6.0": old, "this stack": new}}  # fmt: skip

        tanh = {"own": "avx2", "rows": [
            tanh_row("default", 1, 20.0, 40.0), tanh_row("default", 2, 10.0, 20.0),
            tanh_row("avx2", 1, 14.0, 2.8), tanh_row("avx2", 2, 10.0, 2.5),
        ]}  # fmt: skip
        found = bench.checks(results([], memory(10.0), tanh=tanh))
        self.assertEqual(verdicts(found)[-1], (
            "v2.6.0 / this stack >= 5.00", "tanh 2048, 2048, 1 thread, avx2", "met"))  # fmt: skip
        self.assertEqual(len(found), 2)  # default's 0.5x is reported, not a target
        slower = {**tanh, "rows": [tanh_row("avx2", 1, 14.0, 2.9)]}
        self.assertEqual(
            bench.checks(results([], memory(10.0), tanh=slower))[-1].verdict, "not met"
        )
        text = bench.report(results([], memory(10.0), tanh=tanh), bench.FULL)
        self.assertIn("| default | 1 | 20 | 40 | 0.50 |", text)
        self.assertIn("| avx2 (this CPU's) | 1 | 14 | 2.8 | 5.00 |", text)


class ReportTest(unittest.TestCase):
    def test_report_tables_and_tally(self):
        rows = [
            {"size": [2, 3, 4], "pass": bench.FWD, "ms": {"native": 0.01, "composite": 0.0123,
                                                           "function": 0.05, "compile": 0.04}},
            row((2, 3, 4), native=0.1, composite=0.2, compile=0.3, floor=0.05),
        ]  # fmt: skip
        text = bench.report(results(rows, memory(50.0)), bench.QUICK)
        self.assertIn("2 threads (torch.set_num_threads)", text)
        self.assertIn("minimum over 3 repeats", text)
        self.assertIn("load average 0.0 before timing, 2.0 after", text)
        self.assertIn(
            "| n, d, dv | pass | native torch.attn | composite (eager) | PR 2 Function "
            "| torch.compile(composite) | floor |", text)  # fmt: skip
        self.assertIn("| 2, 3, 4 | forward | 0.01 | 0.0123 | 0.05 | 0.04 | n/a |", text)
        self.assertIn("| 2, 3, 4 | forward+backward | 0.1 | 0.2 | 1 | 0.3 | 0.05 |", text)
        self.assertIn("| PR 2 Function | 116.0 | 1.73 |", text)
        self.assertIn("| compile / native >= 1.00 | 2, 3, 4 forward | 4.00 | met |", text)
        self.assertIn(
            "| composite / native >= 1.50 | 2, 3, 4 forward+backward | 2.00 | met |", text
        )
        self.assertIn(
            "| native / composite <= 0.75 | 2048, 64, 64 peak memory | 0.75 | met |", text
        )
        self.assertTrue(text.endswith("4 met, 0 not met, 0 n/a\n"))
        self.assertNotIn("does not exist", text)
        self.assertNotIn("2^32", text)  # no accuracy or profile sections in a quick run
        self.assertNotIn("torch.profiler", text)

    def test_report_without_native_says_so(self):
        rows = [row((64, 32, 32), None, 1.0, 1.5, floor=0.5)]
        text = bench.report(results(rows, memory(None), has_native=False), bench.FULL)
        self.assertIn("torch.attn does not exist in this build: n/a.", text)
        self.assertIn("| 64, 32, 32 | forward+backward | n/a | 1 | 1 | 1.5 | 0.5 |", text)
        self.assertNotIn("native torch.attn |", text.split("| method |")[1].split("Targets")[0])
        self.assertTrue(text.endswith("0 met, 0 not met, 3 n/a\n"))

    def test_accuracy_and_profile_sections(self):
        accuracy = [
            {"name": "tanh float32, all 2^32 inputs [avx2]", "passed": 1, "failed": 0,
             "skipped": 0, "note": "max 1 ULP"},
            {"name": "tanh float32, all 2^32 inputs [avx512]", "passed": 0, "failed": 0,
             "skipped": 1, "note": "this CPU does not support it"},
        ]  # fmt: skip
        profile = {"size": [2, 3, 4], "rounds": 5, "steps": 1000, "step_us": 120.0,
                   "ops_us": 90.0,
                   "ops": [{"name": "aten::mm", "calls": 5.0, "self_us": 40.27}]}  # fmt: skip
        data = results([], memory(10.0), accuracy=accuracy)
        data["timing"]["profile"] = profile
        text = bench.report(data, bench.FULL)
        self.assertIn("| tanh float32, all 2^32 inputs [avx2] | passed | max 1 ULP |", text)
        self.assertIn("| tanh float32, all 2^32 inputs [avx512] | skipped |", text)
        self.assertIn("| aten::mm | 5 | 40.27 |", text)
        self.assertIn("a step took 120.0 us; the ops' self times add up to 90.0 us", text)


class BestTimesTest(unittest.TestCase):
    def test_warms_up_then_interleaves_repeats(self):
        calls = []
        steps = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
        found = bench.best_times(steps, repeats=2, block_s=0.0)  # one call per block
        self.assertEqual(calls, ["a"] * 3 + ["b"] * 3 + ["a", "b", "a", "b"])
        self.assertEqual(sorted(found), ["a", "b"])


if __name__ == "__main__":
    unittest.main()
