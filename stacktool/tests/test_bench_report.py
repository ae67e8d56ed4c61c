"""bench.md (stacktool/bench/report.py) from synthetic results: its tables, summary, notes."""

import unittest

from stacktool.bench.common import FULL, FWD, QUICK
from stacktool.bench.report import report, summary
from stacktool.tests.bench_fixtures import (
    contended,
    contended_row,
    memory,
    per_element,
    results,
    row,
    tanh_row,
    tanh_table,
)


class ReportTest(unittest.TestCase):
    def test_report_tables_sources_and_tally(self):
        rows = [
            {"size": [2, 3, 4], "threads": 1, "pass": FWD,
             "ms": {"native": 0.01, "composite": 0.0123, "function": 0.05, "compile": 0.04,
                    "gemms": 0.005, "pr4": 0.0125}},
            row((2, 3, 4), native=0.1, composite=0.2, compile=0.3, floor=0.05, gemms=0.02),
        ]  # fmt: skip
        text = report(results(rows, memory(20.0, pr4=40.0)), QUICK)
        self.assertIn("CPU AuthenticAMD family 25 model 1 stepping 1 (AMD EPYC), float32, 1 and 2 "
                      "threads.", text)  # fmt: skip
        self.assertIn("Each step is a `Timer` with its thread count (num_threads: 1 and 2 "
                      "threads)", text)  # fmt: skip
        self.assertIn("blocked_autorange(min_run_time=0.01)", text)
        self.assertIn("repeated 2 times per step", text)
        self.assertIn("the median of the quietest round", text)
        self.assertIn("load average 0.0 before timing, 2.0 after", text)
        self.assertIn("(README, section Benchmark)", text)
        self.assertNotIn("spec", text)
        self.assertNotIn("cannot be faster than the floor", text)
        self.assertIn("floor (forward+backward): the ATen calls of PR 4's unfused kernel and "
                      "attn_backward, with no autograd around them", text)  # fmt: skip
        self.assertIn("GEMMs alone: the six GEMMs of attn's shapes (two forward), each one "
                      "at::mm into a preallocated output", text)  # fmt: skip
        self.assertIn(
            "| n, d, dv | threads | pass | native torch.attn | composite (eager) | PR 2 Function "
            "| torch.compile(composite) | torch.compile(torch.attn) | PR 4's torch.attn | floor "
            "| GEMMs alone | native / PR 4's torch.attn |", text)  # fmt: skip
        self.assertIn("| 2, 3, 4 | 1 | forward | 0.01 | 0.0123 | 0.05 | 0.04 | n/a | 0.0125 | n/a "
                      "| 0.005 | 0.800 |", text)  # fmt: skip
        self.assertIn("| 2, 3, 4 | 2 | forward+backward | 0.1 | 0.2 | 1 | 0.3 | n/a | n/a | 0.05 "
                      "| 0.02 | n/a |", text)  # fmt: skip
        self.assertIn("PR 4's torch.attn: the op PR 6's CPU kernel replaces, as users call it "
                      "(through autograd), forward and forward+backward as native's: torch.attn "
                      "of PR 4's commit, from the gate's worktree build/gate/level-4/pytorch with "
                      "its own overlay build (built at 0123456789ab), timed in a process of its "
                      "own", text)  # fmt: skip
        self.assertIn("(1-minute load average 0.5 before, 0.8 after)", text)
        self.assertIn("| method | peak RSS growth (MB) | / composite | / attn output "
                      "| native / it |", text)  # fmt: skip
        self.assertIn("| PR 2 Function | 116.0 | 1.731 | 7.250 | 0.172 |", text)
        self.assertIn("| native torch.attn | 20.0 | 0.299 | 1.250 | 1.000 |", text)
        self.assertIn("| PR 4's torch.attn | 40.0 | 0.597 | 2.500 | 0.500 |", text)
        self.assertIn("PR 4's torch.attn: PR 4's op as users call it, through autograd (its "
                      "kernel, what autograd saves, its derivative), in PR 4's tree as above: "
                      "native's figure is measured the same way, PR 4's unfused path without "
                      "autograd.", text)  # fmt: skip
        self.assertIn("- peak memory, native / PR 4's torch.attn (both through autograd): 0.500\n",
                      text)  # fmt: skip
        self.assertIn("at most 1.00x PR 4's torch.attn's time (the code PR 6 replaces) at every "
                      "size, forward and forward+backward", text)  # fmt: skip
        self.assertIn("| native / pr4 <= 1.00 | 2, 3, 4 forward, 1 thread | 0.800 | met |", text)
        self.assertIn("| native / pr4 <= 1.00 | 2, 3, 4 forward+backward, 2 threads | n/a | n/a |",
                      text)  # fmt: skip
        self.assertIn("attn output: the n x n float32 output a alone, 16.0 MB, computed", text)
        self.assertIn("within 5 % of the GEMMs alone at n >= 512, forward and forward+backward",
                      text)  # fmt: skip
        self.assertIn("| compile / native >= 1.00 | 2, 3, 4 forward, 1 thread | 4.000 | met |",
                      text)  # fmt: skip
        self.assertIn("| composite / native >= 1.50 | 2, 3, 4 forward+backward, 2 threads "
                      "| 2.000 | met |", text)  # fmt: skip
        self.assertIn(
            "| native / composite <= 0.75 | 2048, 64, 64 peak memory | 0.299 | met |", text
        )
        self.assertIn("| native / unfused <= 0.65 | 2048, 64, 64 peak memory | 0.333 | met |", text)
        self.assertIn(
            "| native / attn output <= 1.40 | 2048, 64, 64 peak memory | 1.250 | met |", text
        )
        self.assertIn("| PR 4's unfused path | 60.0 | 0.896 | 3.750 | 0.333 |", text)
        self.assertIn("PR 4's unfused path: the floor's step (PR 4's kernel's and derivative's "
                      "ATen calls", text)  # fmt: skip
        self.assertTrue(text.endswith("torch.attn: 7 met, 0 not met, 1 n/a. All targets of this "
                                      "run, tanh's included: 7 met, 0 not met, 1 n/a.\n"))  # fmt: skip
        self.assertIn("(bench.png)", text)
        self.assertNotIn("does not exist", text)
        self.assertNotIn("2^32", text)  # no tanh, accuracy or profile sections in a quick run
        self.assertNotIn("torch.profiler", text)
        self.assertNotIn("Sleef", text)

    def test_summary_quotes_the_targets_ratios_per_thread_count(self):
        rows = [row((2, 3, 4), 0.0642, 0.0857, 0.193, floor=0.022, threads=1),
                row((4096, 128, 128), 250.0, 500.0, 300.0, floor=240.0, gemms=245.0, threads=1,
                    pr4=260.0),
                # forward at 1 thread: 1.2x the GEMMs, not met
                {**row((4096, 128, 128), 60.0, 80.0, 70.0, gemms=50.0, threads=1), "pass": FWD},
                row((2, 3, 4), 0.0642, 0.0857, 0.193, floor=0.022),
                # PR 4's op 1.0004: not met, shown as its verdict reads it
                row((4096, 128, 128), 248.0, 325.0, 247.0, floor=240.0, gemms=230.0, pr4=247.9)]  # fmt: skip
        tanh = tanh_table([
            tanh_row("default", "contiguous", 1, 13.5, 13.6, copy=1.0),
            tanh_row("avx2", "contiguous", 1, 13.5, 2.59, vectorized=1.2, copy=1.0),
            tanh_row("avx2", "rows of 17", 1, 8.65, 9.5),
        ], ["default", "avx2"])  # fmt: skip
        text = "\n".join(summary(results(rows, memory(34.9, 50.0), tanh=tanh)))
        self.assertIn("## Summary\n\n- CPU: AuthenticAMD family 25 model 1 stepping 1 (AMD EPYC); "
                      "of its SIMD flags: avx2 fma\n", text)  # fmt: skip
        self.assertIn("- 1 thread, forward+backward, native / PR 4's torch.attn: 0.962 at 4096, "
                      "128, 128\n", text)  # fmt: skip
        self.assertIn("- 2 threads, forward+backward, native / PR 4's torch.attn: 1.0004 at 4096, "
                      "128, 128\n", text)  # fmt: skip
        self.assertIn("- 2 threads, forward, native / PR 4's torch.attn: n/a\n", text)
        self.assertIn("- peak memory, native / PR 4's torch.attn (both through autograd): n/a\n",
                      text)  # PR 4's op's memory not measured  # fmt: skip
        self.assertIn("- 1 thread, forward+backward, composite / native: 1.335 at 2, 3, 4; "
                      "2.000 at 4096, 128, 128\n", text)  # fmt: skip
        self.assertIn("- 2 threads, forward+backward, composite / native: 1.335 at 2, 3, 4; "
                      "1.310 at 4096, 128, 128\n", text)  # fmt: skip
        self.assertIn("- 2 threads, forward+backward, native / floor: 2.918 at 2, 3, 4; 1.033 "
                      "at 4096, 128, 128\n", text)  # fmt: skip
        self.assertIn("- 1 thread, forward+backward, native / GEMMs alone: 1.020 at 4096, 128, "
                      "128\n", text)  # fmt: skip
        self.assertIn("- 1 thread, forward, native / GEMMs alone: 1.200 at 4096, 128, 128\n",
                      text)  # fmt: skip
        self.assertIn("- 2 threads, forward, native / GEMMs alone: n/a\n", text)
        self.assertIn("- peak memory, native / composite: 0.698\n", text)
        self.assertIn("- peak memory, native / PR 4's unfused path: 0.582\n", text)
        self.assertIn("- peak memory, native / attn output: 2.181\n", text)
        self.assertIn("- torch.attn's targets: 12 met, 7 not met, 3 n/a; not met: composite / "
                      "native >= 1.50 at 2, 3, 4 forward+backward, 1 thread (1.335); native / "
                      "gemms <= 1.05 at 4096, 128, 128 forward, 1 thread (1.200); "
                      "composite / native >= 1.50 at 2, 3, 4 forward+backward, 2 threads "
                      "(1.335); compile / native >= 1.00 at 4096, 128, 128 forward+backward, 2 "
                      "threads (0.996); native / gemms <= 1.05 at 4096, 128, 128 "
                      "forward+backward, 2 threads (1.078); native / pr4 <= 1.00 at 4096, 128, "
                      "128 forward+backward, 2 threads (1.0004); native / attn output <= 1.40 at "
                      "2048, 64, 64 peak memory (2.181)\n", text)  # fmt: skip
        self.assertIn("- tanh contiguous 2048 x 2048, 1 thread, v2.6.0 / this stack: 0.993 "
                      "default, 5.212 avx2\n", text)  # fmt: skip
        self.assertIn("- tanh contiguous 2048 x 2048, 1 thread, vectorized / copy: 1.200 avx2\n",
                      text)  # fmt: skip
        self.assertIn("- tanh's targets: 3 met, 1 not met, 0 n/a; not met: rows of 17, 1 thread, "
                      "avx2 (0.911 for v2.6.0 / this stack >= 0.95)\n", text)  # fmt: skip
        self.assertNotIn("tanh in cache", text)  # a run without the in-cache row
        self.assertNotIn("vectorized / v2.6.0", text)  # not an Intel CPU

    def test_report_without_native_says_so(self):
        rows = [row((64, 32, 32), None, 1.0, 1.5, floor=0.5, gemms=0.25)]
        text = report(results(rows, memory(None), has_native=False), FULL)
        self.assertIn("torch.attn does not exist in this build: n/a.", text)
        self.assertIn("| 64, 32, 32 | 2 | forward+backward | n/a | 1 | 1 | 1.5 | n/a | n/a | 0.5 "
                      "| 0.25 | n/a |", text)  # fmt: skip
        self.assertNotIn("native torch.attn |", text.split("| method |")[1].split("Targets")[0])
        self.assertIn("| composite (eager) | 67.0 | 1.000 | 4.188 | n/a |", text)
        self.assertIn("torch.attn: 0 met, 0 not met, 6 n/a.", text)

    def test_without_pr_4s_build_the_column_says_why(self):
        rows = [row((64, 32, 32), 1.0, 2.0, 1.5, floor=0.5, gemms=0.25)]
        why = {"note": "not run: no level-4 build (run ./stack test first)", "tree": None}
        text = report(results(rows, memory(10.0), pr4=why), QUICK)
        self.assertIn("## Summary\n\n- CPU: AuthenticAMD family 25 model 1 stepping 1 (AMD "
                      "EPYC); of its SIMD flags: avx2 fma\n- PR 4's torch.attn: not run: no "
                      "level-4 build (run ./stack test first)\n", text)  # fmt: skip
        self.assertIn("them can beat. PR 4's torch.attn: not run: no level-4 build (run ./stack "
                      "test first).", text)  # fmt: skip
        self.assertIn("in PR 4's tree as above (not run: no level-4 build (run ./stack test "
                      "first)): native's figure", text)  # fmt: skip
        self.assertIn("| 64, 32, 32 | 2 | forward+backward | 1 | 2 | 1 | 1.5 | n/a | n/a | 0.5 "
                      "| 0.25 | n/a |", text)  # fmt: skip

    def test_contended_table_load_averages_targets_and_summary(self):
        rows = [contended_row((2048, 64, 64), "uncontended", 20.0, 21.0),
                contended_row((2048, 64, 64), "contended", 40.016, 40.0),
                contended_row((4096, 128, 128), "uncontended", 240.0, 250.0),
                contended_row((4096, 128, 128), "contended", 600.0, 500.0)]  # fmt: skip
        text = report(results([], memory(10.0), contended=contended(rows)), FULL)
        self.assertIn("## Contended: one busy-loop process beside the run\n", text)
        self.assertIn("1-minute load average 0.5 at the phase's start, 1.0 when the busy loop "
                      "had started, 1.6 at the phase's end.", text)  # fmt: skip
        self.assertIn("(it would exit by itself after 95 s: 60 s plus 10x the uncontended "
                      "rounds' time)", text)  # fmt: skip
        self.assertNotIn("reached its deadline", text)
        self.assertIn("| n, d, dv | threads | condition | native torch.attn | floor "
                      "| native / floor |\n", text)  # fmt: skip
        self.assertIn("| 2048, 64, 64 | 2 | uncontended | 20 | 21 | 0.952 |\n", text)
        # shown as its verdict reads it: 1.0004, not 1.000
        self.assertIn("| 2048, 64, 64 | 2 | contended | 40 | 40 | 1.0004 |\n", text)
        self.assertIn("| 4096, 128, 128 | 2 | contended | 600 | 500 | 1.200 |\n", text)
        self.assertIn("| native / floor <= 1.00 | 2048, 64, 64 forward+backward, 2 threads, "
                      "contended | 1.0004 | not met |", text)  # fmt: skip
        self.assertIn("in the contended case, at 2 threads, at most 1.00x the floor", text)
        self.assertIn("- 2 threads, forward+backward, uncontended (nothing beside the run), "
                      "native / floor: 0.952 at 2048, 64, 64; 0.960 at 4096, 128, 128\n", text)  # fmt: skip
        self.assertIn("- 2 threads, forward+backward, contended (one busy-loop process beside "
                      "the run), native / floor: 1.0004 at 2048, 64, 64; 1.200 at 4096, 128, "
                      "128\n", text)  # fmt: skip
        self.assertIn("torch.attn: 5 met, 2 not met, 0 n/a.", text)  # 4 contended, 3 memory
        # the quick run's size has no target; a busy loop gone early is said
        rows = [contended_row((512, 64, 64), "uncontended", 1.0, 1.25),
                contended_row((512, 64, 64), "contended", 3.0, 2.0)]  # fmt: skip
        text = report(results([], memory(10.0), contended=contended(rows, throughout=False)),
                      QUICK)  # fmt: skip
        self.assertIn("| 512, 64, 64 | 2 | contended | 3 | 2 | 1.500 |\n", text)
        self.assertIn("Note: the busy loop reached its deadline before the contended rounds "
                      "ended", text)  # fmt: skip
        self.assertIn("torch.attn: 3 met, 0 not met, 0 n/a.", text)
        self.assertNotIn("## Contended", report(results([], memory(10.0)), QUICK))

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
        text = report(data, FULL)
        self.assertIn("| tanh float32, all 2^32 inputs [avx2] | passed | max 1 ULP |", text)
        self.assertIn("| tanh float32, all 2^32 inputs [avx512] | skipped |", text)
        self.assertIn("| aten::mm | 5 | 40.27 |", text)
        self.assertIn("a step took 120.0 us; the ops' self times add up to 90.0 us", text)


class TanhReportTest(unittest.TestCase):
    def tanh_report(self, **table):
        tanh = tanh_table([
            tanh_row("default", "contiguous", 1, 13.5, 13.0, copy=1.0),
            tanh_row("avx2", "contiguous", 1, 1.46, 1.45, sleef=10.4, vectorized=1.6, copy=1.0),
            tanh_row("avx2", "contiguous", 2, 0.94996, 1.0, vectorized=0.7),
            tanh_row("avx512", "contiguous", 1, 1.44, 1.43, vectorized=2.1, copy=1.3),
        ], **table)  # fmt: skip
        return report(results([], memory(10.0), tanh=tanh), FULL)

    def test_times_ratios_and_targets(self):
        text = self.tanh_report()
        self.assertIn("| capability | case | threads | v2.6.0 | Sleef u10 | this stack | this "
                      "stack, vectorized | copy | v2.6.0 / this stack | Sleef / this stack | this "
                      "stack / copy | vectorized / copy |", text)  # fmt: skip
        self.assertIn("| default | contiguous | 1 | 13.5 | n/a | 13 | n/a | 1 | 1.038 | n/a "
                      "| 13.000 | n/a |", text)  # fmt: skip
        self.assertIn("| avx2 | contiguous | 1 | 1.46 | 10.4 | 1.45 | 1.6 | 1 | 1.007 | 7.172 "
                      "| 1.450 | 1.600 |", text)  # fmt: skip
        # a ratio with a target is shown as its verdict reads it: 0.94996, not 0.950
        self.assertIn("| avx2 | contiguous | 2 | 0.95 | n/a | 1 | 0.7 | n/a | 0.94996 | n/a "
                      "| n/a | n/a |", text)  # fmt: skip
        self.assertIn("| vectorized / copy <= 1.60 | tanh contiguous, 1 thread, avx2 | 1.600 "
                      "| met |", text)  # fmt: skip
        self.assertIn("| vectorized / copy <= 1.60 | tanh contiguous, 1 thread, avx512 | 1.615 "
                      "| not met |", text)  # fmt: skip
        self.assertIn("| v2.6.0 / this stack >= 0.95 | tanh contiguous, 2 threads, avx2 | 0.94996 "
                      "| not met |", text)  # fmt: skip
        self.assertIn("tanh: 4 met, 2 not met, 0 n/a.", text)
        self.assertNotIn("skipped, this CPU lacks it", text)
        self.assertNotIn("does not read ATEN_CPU_FLOAT_TANH", text)

    def in_cache_report(self, vendor):
        tanh = tanh_table([
            tanh_row("default", "in cache", 1, per_element(1.2), per_element(1.25),
                     copy=per_element(0.1)),
            tanh_row("avx2", "contiguous", 1, 2.0, 1.9, vectorized=2.1, copy=1.4),
            tanh_row("avx2", "in cache", 1, per_element(0.5), per_element(0.45),
                     sleef=per_element(0.6), vectorized=per_element(0.45), copy=per_element(0.1)),
        ], ["default", "avx2"], cpu_vendor=vendor)  # fmt: skip
        return report(results([], memory(10.0), tanh=tanh), FULL)

    def test_the_in_cache_row_in_ns_per_element_and_the_vml_bound_on_intel(self):
        text = self.in_cache_report("GenuineIntel")
        self.assertIn("| vectorized / copy | vectorized / v2.6.0 |\n", text)
        # ns per element in the in-cache row (ms per call x 10^6 / 16384), ms in the others
        self.assertIn("| default | in cache (ns per element) | 1 | 1.2 | n/a | 1.25 | n/a | 0.1 "
                      "| 0.960 | n/a | 12.500 | n/a | n/a |\n", text)  # fmt: skip
        self.assertIn("| avx2 | in cache (ns per element) | 1 | 0.5 | 0.6 | 0.45 | 0.45 | 0.1 "
                      "| 1.111 | 1.333 | 4.500 | 4.500 | 0.900 |\n", text)  # fmt: skip
        self.assertIn("| avx2 | contiguous | 1 | 2 | n/a | 1.9 | 2.1 | 1.4 | 1.053 | n/a | 1.357 "
                      "| 1.500 | 1.050 |\n", text)  # fmt: skip
        self.assertIn("the in cache case's times in ns per element (ms per call x 10^6 / "
                      "16384), its row's name says so", text)  # fmt: skip
        self.assertIn("| v2.6.0 / this stack >= 0.95 | tanh in cache, 1 thread, default | 0.960 "
                      "| met |", text)  # fmt: skip
        self.assertIn("| vectorized / v2.6.0 <= 1.05 | tanh contiguous, 1 thread, avx2 | 1.050 "
                      "| met |", text)  # fmt: skip
        self.assertIn("| vectorized / v2.6.0 <= 1.05 | tanh in cache, 1 thread, avx2 | 0.900 "
                      "| met |", text)  # fmt: skip
        self.assertIn("This CPU's vendor: GenuineIntel, so that target is applied here.", text)
        self.assertIn("tanh: 6 met, 0 not met, 0 n/a.", text)
        self.assertIn("- tanh in cache (16384 floats), 1 thread, ns per element, v2.6.0 / this "
                      "stack / copy: 1.2 / 1.25 / 0.1 default; 0.5 / 0.45 / 0.1 avx2\n", text)  # fmt: skip
        self.assertIn("- tanh in cache (16384 floats), 1 thread, v2.6.0 / this stack: 0.960 "
                      "default, 1.111 avx2\n", text)  # fmt: skip
        self.assertIn("- tanh contiguous, 1 thread, vectorized / v2.6.0 (an Intel CPU's VML): "
                      "1.050 avx2\n", text)  # fmt: skip
        self.assertIn("- tanh in cache, 1 thread, vectorized / v2.6.0 (an Intel CPU's VML): "
                      "0.900 avx2\n", text)  # fmt: skip

    def test_elsewhere_the_vml_bound_is_not_applied_but_its_ratio_shown(self):
        text = self.in_cache_report("AuthenticAMD")
        self.assertIn("| avx2 | in cache (ns per element) | 1 | 0.5 | 0.6 | 0.45 | 0.45 | 0.1 "
                      "| 1.111 | 1.333 | 4.500 | 4.500 | 0.900 |\n", text)  # fmt: skip
        self.assertIn("This CPU's vendor: AuthenticAMD, so that target is not applied here.", text)
        self.assertNotIn("| vectorized / v2.6.0 <= 1.05 |", text)
        self.assertNotIn("(an Intel CPU's VML)", text)
        self.assertIn("tanh: 4 met, 0 not met, 0 n/a.", text)

    def test_the_unset_column_is_the_vectorized_kernel_on_every_x86_cpu(self):
        text = self.tanh_report()
        self.assertIn("this stack: PR 5's kernel through the overlay as users get it, "
                      "ATEN_CPU_FLOAT_TANH unset (float: PR 5's vectorized kernel at avx2 and "
                      "avx512 on every x86 CPU, Intel's included; VML only with "
                      "ATEN_CPU_FLOAT_TANH=vml)", text)  # fmt: skip
        self.assertIn("so the same kernel as this stack's column, which is the one users get",
                      text)  # fmt: skip
        self.assertNotIn("VML on Intel", text)

    def test_a_missing_capability_and_an_unread_variable_are_said(self):
        text = self.tanh_report(capabilities=["default", "avx2"], reads_float_tanh=False)
        self.assertIn("; avx512: skipped, this CPU lacks it.", text)
        self.assertIn("Note: this stack's build does not read ATEN_CPU_FLOAT_TANH: its vectorized "
                      "column is what users get.", text)  # fmt: skip
        self.assertIn("vectorized / copy: 1.600 avx2, 1.615 avx512 (this stack's build does not "
                      "read ATEN_CPU_FLOAT_TANH", text)  # fmt: skip


if __name__ == "__main__":
    unittest.main()
