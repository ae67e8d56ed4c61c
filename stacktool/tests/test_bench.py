"""The benchmark's pure parts (targets, verdicts, the report, the timing loop, the floor's
calls, progress) on synthetic numbers and fakes; no torch."""

import contextlib
import io
import json
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from stacktool import bench
from stacktool.config import Layout
from stacktool.suites import Result


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


def tanh_row(capability, case, threads, old, new, sleef=None):
    ms = {"v2.6.0": old, "this stack": new}
    if sleef is not None:
        ms["Sleef u10"] = sleef
    return {"capability": capability, "case": case, "threads": threads, "ms": ms}


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
        self.assertEqual({c.source for c in found}, {bench.ATTN_GOALS})

    def test_bounds_are_inclusive_and_directions_right(self):
        found = bench.checks(results([
            row((2, 3, 4), native=2.0, composite=3.0, compile=1.9),  # 1.50x met; 0.95x not met
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

    def test_ratios_shown_as_measured_and_never_rounded_into_met(self):
        def check(ratio, bound, at_least):
            return bench.Check("t", "w", ratio, bound, at_least)

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

    def test_native_faster_than_the_floor_is_named(self):
        rows = [row((2048, 64, 64), 30.0, 40.0, 40.0, floor=30.2),
                row((4096, 128, 128), 248.0, 325.0, 247.0, floor=240.0)]  # fmt: skip
        self.assertEqual(bench.below_floor(results(rows, memory(10.0))),
                         ["2048, 64, 64 (30 against 30.2 ms)"])  # fmt: skip
        text = bench.report(results(rows, memory(10.0)), bench.QUICK)
        self.assertIn("native measured faster than the floor at 2048, 64, 64", text)
        rows[0]["ms"]["floor"] = 29.0
        self.assertNotIn("measured faster than the floor", bench.report(results(rows, memory(10.0)),
                                                                bench.QUICK))  # fmt: skip


class TanhChecksTest(unittest.TestCase):
    def test_five_x_for_contiguous_at_one_thread_with_avx2_and_avx512_else_not_slower(self):
        tanh = {"capabilities": ["default", "avx2", "avx512"], "rows": [
            tanh_row("default", "contiguous", 1, 13.5, 13.0),  # 1.04: not slower
            tanh_row("avx2", "contiguous", 1, 14.0, 2.8, sleef=9.0),  # 5.00
            tanh_row("avx2", "contiguous", 2, 7.0, 7.5, sleef=4.5),  # 0.933
            tanh_row("avx2", "rows of 17", 1, 8.65, 1.09),
            tanh_row("avx512", "contiguous", 1, 10.7, 2.2),  # 4.86
            tanh_row("avx512", "bf16 inner stride 2", 1, 10.7, 27.5),
        ]}  # fmt: skip
        found = bench.checks(results([], memory(10.0), tanh=tanh))[1:]
        self.assertEqual([(c.where, c.bound, c.verdict) for c in found], [
            ("tanh contiguous, 1 thread, default", 0.95, "met"),
            ("tanh contiguous, 1 thread, avx2", 5.0, "met"),
            ("tanh contiguous, 2 threads, avx2", 0.95, "not met"),
            ("tanh rows of 17, 1 thread, avx2", 0.95, "met"),
            ("tanh contiguous, 1 thread, avx512", 5.0, "not met"),
            ("tanh bf16 inner stride 2, 1 thread, avx512", 0.95, "not met"),
        ])  # fmt: skip
        self.assertEqual({c.source for c in found}, {bench.ISSUE_18})

        text = bench.report(results([], memory(10.0), tanh=tanh), bench.FULL)
        self.assertIn("| default | contiguous | 1 | 13.5 | n/a | 13 | n/a | 1.038 | >= 0.95 "
                      "| met |", text)  # fmt: skip
        self.assertIn("| avx2 | contiguous | 1 | 14 | 9 | 2.8 | 3.214 | 5.000 | >= 5.00 "
                      "| met |", text)  # fmt: skip
        self.assertIn("| avx512 | contiguous | 1 | 10.7 | n/a | 2.2 | n/a | 4.864 | >= 5.00 "
                      "| not met |", text)  # fmt: skip
        self.assertIn("tanh: 3 met, 3 not met, 0 n/a.", text)
        self.assertNotIn("skipped, this CPU lacks it", text)
        no_avx512 = {**tanh, "capabilities": ["default", "avx2"], "rows": tanh["rows"][:4]}
        text = bench.report(results([], memory(10.0), tanh=no_avx512), bench.FULL)
        self.assertIn("; avx512: skipped, this CPU lacks it.", text)

    def test_rows_merge_the_builds_of_each_capability(self):
        def result(*rows):
            return {"rows": [{"case": c, "threads": t, "impl": i, "ms": ms, "rounds_ms": [ms]}
                             for c, t, i, ms in rows]}  # fmt: skip

        found = {
            ("avx2", "v2.6.0"): result(
                ("contiguous", 1, "torch", 13.0), ("contiguous", 1, "sleef", 9.0)
            ),  # fmt: skip
            ("avx2", "this stack"): result(("contiguous", 1, "torch", 2.5)),
            ("default", "v2.6.0"): result(("column", 1, "torch", 0.04)),
            ("default", "this stack"): result(("column", 1, "torch", 0.05)),
        }
        rows = bench.tanh_rows(["default", "avx2"], found)
        self.assertEqual([(r["capability"], r["case"], r["ms"]) for r in rows], [
            ("default", "column", {"v2.6.0": 0.04, "this stack": 0.05}),
            ("avx2", "contiguous", {"v2.6.0": 13.0, "Sleef u10": 9.0, "this stack": 2.5}),
        ])  # fmt: skip


class ReportTest(unittest.TestCase):
    def test_report_tables_sources_and_tally(self):
        rows = [
            {"size": [2, 3, 4], "pass": bench.FWD, "ms": {"native": 0.01, "composite": 0.0123,
                                                           "function": 0.05, "compile": 0.04}},
            row((2, 3, 4), native=0.1, composite=0.2, compile=0.3, floor=0.05),
        ]  # fmt: skip
        text = bench.report(results(rows, memory(50.0)), bench.QUICK)
        self.assertIn("Each step is a `Timer` with num_threads=2", text)
        self.assertIn("blocked_autorange(min_run_time=0.01)", text)
        self.assertIn("repeated 2 times per step", text)
        self.assertIn("the median of the quietest round", text)
        self.assertIn("load average 0.0 before timing, 2.0 after", text)
        self.assertIn("(README, section Benchmark)", text)
        self.assertNotIn("spec", text)
        self.assertIn(
            "| n, d, dv | pass | native torch.attn | composite (eager) | PR 2 Function "
            "| torch.compile(composite) | floor |", text)  # fmt: skip
        self.assertIn("| 2, 3, 4 | forward | 0.01 | 0.0123 | 0.05 | 0.04 | n/a |", text)
        self.assertIn("| 2, 3, 4 | forward+backward | 0.1 | 0.2 | 1 | 0.3 | 0.05 |", text)
        self.assertIn("| PR 2 Function | 116.0 | 1.731 |", text)
        self.assertIn("| compile / native >= 1.00 | 2, 3, 4 forward | 4.000 | met |", text)
        self.assertIn(
            "| composite / native >= 1.50 | 2, 3, 4 forward+backward | 2.000 | met |", text
        )
        self.assertIn(
            "| native / composite <= 0.75 | 2048, 64, 64 peak memory | 0.746 | met |", text
        )
        self.assertTrue(text.endswith("torch.attn: 4 met, 0 not met, 0 n/a. All targets of this "
                                      "run, tanh's included: 4 met, 0 not met, 0 n/a.\n"))  # fmt: skip
        self.assertIn("(bench.png)", text)
        self.assertNotIn("does not exist", text)
        self.assertNotIn("2^32", text)  # no tanh, accuracy or profile sections in a quick run
        self.assertNotIn("torch.profiler", text)
        self.assertNotIn("Sleef", text)

    def test_summary_quotes_the_targets_ratios(self):
        rows = [row((2, 3, 4), 0.0642, 0.0857, 0.193, floor=0.022),
                row((4096, 128, 128), 248.0, 325.0, 247.0, floor=240.0)]  # fmt: skip
        tanh = {"capabilities": ["default", "avx2"], "rows": [
            tanh_row("default", "contiguous", 1, 13.5, 13.6),
            tanh_row("avx2", "contiguous", 1, 13.5, 2.59),
            tanh_row("avx2", "rows of 17", 1, 8.65, 9.5),
        ]}  # fmt: skip
        text = "\n".join(bench.summary(results(rows, memory(34.9, 50.0), tanh=tanh)))
        self.assertIn("- forward+backward, composite / native: 1.335 at 2, 3, 4; 1.310 at "
                      "4096, 128, 128\n", text)  # fmt: skip
        self.assertIn("- forward+backward, native / floor: 2.918 at 2, 3, 4; 1.033 at 4096, "
                      "128, 128\n", text)  # fmt: skip
        self.assertIn("- peak memory, native / composite: 0.698\n", text)
        self.assertIn("- torch.attn's targets: 4 met, 2 not met, 0 n/a; not met: composite / "
                      "native >= 1.50 at 2, 3, 4 forward+backward (1.335); compile / native >= "
                      "1.00 at 4096, 128, 128 forward+backward (0.996)\n", text)  # fmt: skip
        self.assertIn("- tanh contiguous 2048 x 2048, 1 thread, v2.6.0 / this stack: 0.993 "
                      "default, 5.212 avx2\n", text)  # fmt: skip
        self.assertIn("- tanh's targets: 2 met, 1 not met, 0 n/a; not met: rows of 17, 1 thread, "
                      "avx2 (0.911 for >= 0.95)\n", text)  # fmt: skip

    def test_report_without_native_says_so(self):
        rows = [row((64, 32, 32), None, 1.0, 1.5, floor=0.5)]
        text = bench.report(results(rows, memory(None), has_native=False), bench.FULL)
        self.assertIn("torch.attn does not exist in this build: n/a.", text)
        self.assertIn("| 64, 32, 32 | forward+backward | n/a | 1 | 1 | 1.5 | 0.5 |", text)
        self.assertNotIn("native torch.attn |", text.split("| method |")[1].split("Targets")[0])
        self.assertIn("torch.attn: 0 met, 0 not met, 3 n/a.", text)

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

    def test_plotted_ratios_and_composite_targets(self):
        rows = [row((64, 32, 32), 2.0, 3.0, 1.0, floor=1.5),
                row((512, 64, 64), 4.0, 5.0, None),
                {**row((512, 64, 64), None, 5.0, 6.0), "pass": bench.FWD}]  # fmt: skip
        found = bench.ratio_series(timing(rows))
        self.assertEqual(found[bench.FWD_BWD], {
            "sizes": [(64, 32, 32), (512, 64, 64)],
            "ratios": {"composite": [1.5, 1.25], "compile": [0.5, None]},
            "composite target": [1.5, 1.15],
        })  # fmt: skip
        self.assertEqual(found[bench.FWD], {"sizes": [(512, 64, 64)], "ratios": {},
                                            "composite target": [None]})  # fmt: skip


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
        found = bench.measure(steps, bench.Settings((), rounds=2, min_run_time=0.5), Timer)
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
        found = bench.quietest([disturbed, quiet])
        self.assertAlmostEqual(found["ms"], 2.5)
        self.assertEqual([round(ms, 6) for ms in found["rounds_ms"]], [5.0, 2.5])
        self.assertEqual(found["blocks"], 7)


class Fake:
    """A tensor (or the torch module) that records the calls made on it."""

    def __init__(self, name, log):
        self.name, self.log = name, log

    def __repr__(self):
        return self.name

    @property
    def T(self):
        return Fake(f"{self.name}.T", self.log)

    def detach(self):
        return self

    def tanh_(self):
        self.log.append(f"{self.name}.tanh_()")
        return self

    def mm(self, a, b):
        self.log.append(f"mm({a}, {b})")
        return Fake(f"mm({a}, {b})", self.log)


class FloorTest(unittest.TestCase):
    def test_the_floor_makes_the_calls_of_attn_and_attn_backward(self):
        log = []
        torch = Fake("torch", log)
        torch.addmm = lambda c, a, b: log.append(f"addmm({c}, {a}, {b})") or Fake("gx", log)
        torch.ops = mock.Mock()
        torch.ops.aten.tanh_backward.grad_input = lambda g, a, grad_input: log.append(
            f"tanh_backward({g}, {a}, grad_input={grad_input})"
        )
        q, k, v, go, ga = (Fake(name, log) for name in ("q", "k", "v", "go", "ga"))
        bench.floor_step(torch, q, k, v, go, ga)()
        a = "mm(q, k.T)"
        self.assertEqual(log, [
            a, f"{a}.tanh_()",  # the kernel: tanh in place, no second n x n buffer
            f"mm({a}, v)",
            f"mm({a}.T, go)",  # grad_v
            "addmm(ga, go, v.T)",  # gA + gO v^T in one call
            f"tanh_backward(gx, {a}, grad_input=gx)",  # written into that buffer
            "mm(gx, k)", "mm(gx.T, q)",  # grad_q, grad_k
        ])  # fmt: skip


class RunTest(unittest.TestCase):
    def run_bench(self, quick: bool):
        """bench.run with its workers faked (by what each writes); (spawned, phases, files)."""
        layout = Layout(Path("/nonexistent"))
        spawned = []

        def fake_run(cmd, cwd, env):
            command, args = cmd[3], cmd[4:]
            spawned.append((command, args, env))
            if command == "timing":
                result = timing([row((2, 3, 4), 1.0, 2.0, 2.0, floor=0.5)])
            elif command == "memory":
                result = {"method": args[-1], "mb": 10.0}
            elif command == "tanh":
                wheel = env.get("PYTHONPATH") == str(layout.wheel_tree)
                impls = ["torch", "sleef"] if "--sleef" in args else ["torch"]
                result = {"torch": "t", "capability": env["ATEN_CPU_CAPABILITY"],
                          "has_attn": not wheel,
                          "rows": [{"case": "contiguous", "threads": 1, "impl": impl,
                                    "ms": 2.0 if wheel else 1.0, "rounds_ms": [2.0]}
                                   for impl in impls]}  # fmt: skip
            else:
                return mock.Mock(returncode=0)  # plot: writes no png here
            Path(args[0]).write_text(json.dumps(result))
            return mock.Mock(returncode=0)

        def accuracy(layout, log):
            log("tanh float32, all 2^32 inputs [avx2]: max 1 ULP")
            return [Result("tanh float32, all 2^32 inputs [avx2]", 1, note="max 1 ULP")]

        err, out = io.StringIO(), io.StringIO()
        with (tempfile.TemporaryDirectory() as tmp,
              mock.patch.object(bench.subprocess, "run", fake_run),
              mock.patch.object(bench.tanh_accuracy, "supported", lambda _: ["default", "avx2"]),
              mock.patch.object(bench.tanh_accuracy, "run", accuracy),
              contextlib.redirect_stderr(err), contextlib.redirect_stdout(out)):  # fmt: skip
            self.assertEqual(bench.run(layout, Path(tmp), quick=quick), 0)
            written = sorted(path.name for path in Path(tmp).iterdir())
            report = (Path(tmp) / "bench.md").read_text()
        self.assertEqual(written, ["bench.json", "bench.md"])
        self.assertEqual(out.getvalue(), report + "\n")
        for _, _, env in spawned:  # no "No CUDA runtime is found" from any worker
            self.assertEqual((env["CUDA_HOME"], env["CUDA_PATH"]), ("", ""))
        self.assertEqual(spawned[0][2]["KINETO_LOG_LEVEL"], "5")  # the profiling worker's
        phases = [line.split("] ", 1)[1] for line in err.getvalue().splitlines()]
        self.assertEqual(phases[-2:], ["plotting", f"wrote bench.md, bench.json to {tmp}"])
        return spawned, phases[:-2], report

    def test_quick_run_names_each_phase(self):
        spawned, phases, _ = self.run_bench(quick=True)
        self.assertEqual([name for name, _, _ in spawned], ["timing", "memory", "memory", "plot"])
        self.assertEqual(phases, [
            "timing torch.attn's methods at n, d, dv = 2, 3, 4; 64, 32, 32; 512, 64, 64 "
            "(one process)",
            "peak memory: native torch.attn (a fresh process)",
            "peak memory: composite (eager) (a fresh process)",
        ])  # fmt: skip

    def test_full_run_times_tanh_per_capability_and_checks_accuracy(self):
        spawned, phases, report = self.run_bench(quick=False)
        tanh = [(args, env["ATEN_CPU_CAPABILITY"]) for name, args, env in spawned
                if name == "tanh"]  # fmt: skip
        self.assertEqual([(args[1:], cap) for args, cap in tanh], [
            ([], "default"), ([], "default"),
            (["--sleef", str(Path("/nonexistent/build/bench-sleef/avx2"))], "avx2"), ([], "avx2"),
        ])  # fmt: skip
        self.assertEqual(phases[-6:], [
            "tanh [default]: v2.6.0 (7 cases, a process of its own)",
            "tanh [default]: this stack (7 cases, a process of its own)",
            "tanh [avx2]: v2.6.0 and Sleef u10 (7 cases, a process of its own)",
            "tanh [avx2]: this stack (7 cases, a process of its own)",
            "tanh accuracy: all 2^32 float32 inputs per capability (about a minute each)",
            "tanh float32, all 2^32 inputs [avx2]: max 1 ULP",
        ])  # fmt: skip
        self.assertEqual(len([p for p in phases if p.startswith("peak memory")]), 4)
        self.assertIn("| avx2 | contiguous | 1 | 2 | 2 | 1 | 2.000 | 2.000 | >= 5.00 | not met |",
                      report)  # fmt: skip
        self.assertIn("; avx512: skipped, this CPU lacks it.", report)
        self.assertIn("| tanh float32, all 2^32 inputs [avx2] | passed | max 1 ULP |", report)


if __name__ == "__main__":
    unittest.main()
