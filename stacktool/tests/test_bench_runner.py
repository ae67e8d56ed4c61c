"""`./stack bench` end to end (stacktool/bench/runner.py) with every worker process faked by
what it writes: the phases, the workers' arguments and environments, the files written."""

import contextlib
import io
import json
import os
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from stacktool import tanh_accuracy
from stacktool.bench import callers, pr4, runner, workers
from stacktool.bench.common import FWD_BWD
from stacktool.config import Layout
from stacktool.suites import INDUCTOR_CACHE, Result
from stacktool.tests.bench_fixtures import CPU, contended, contended_row, row, timing

LEVEL_4 = Layout(Path("/nonexistent")).gate_tree(4)  # the gate's worktree and build of PR 4


class RunTest(unittest.TestCase):
    def run_bench(self, quick: bool, has_native: bool = True, build=None):
        """bench.run with its workers faked (by what each writes); (spawned, phases, report,
        bench.json). A worker whose environment names the level-4 build runs PR 4's torch."""
        layout = Layout(Path("/nonexistent"))
        spawned = []

        calls = {}

        def fake_run(cmd, cwd, env):
            command, args = cmd[3], cmd[4:]
            spawned.append((command, args, env))
            level_4 = env.get("STACK_OVERLAY_BUILD") == str(LEVEL_4.overlay)
            torch_file = str((LEVEL_4 if level_4 else layout).fork / "torch" / "__init__.py")
            if command == "timing" and level_4:
                result = {**timing([{**row((2, 3, 4), 1.25, None, None), "rounds_ms": {
                    "native": [1.25, 1.5]}}]), "torch_file": torch_file, "load": [0.5, 0.75]}  # fmt: skip
            elif command == "timing":
                result = timing([{**row((2, 3, 4), 1.0, 2.0, 2.0, floor=0.5), "rounds_ms": {}}],
                                has_native)  # fmt: skip
            elif command == "contended":
                result = contended([contended_row((512, 64, 64), c, 1.0, 1.0)
                                    for c in ("uncontended", "contended")])  # fmt: skip
            elif command == "memory":
                mb = 20.0 if level_4 else 10.0
                result = {"method": args[-1], "mb": mb, "torch_file": torch_file}
            elif command == "tanh":
                wheel = env.get("PYTHONPATH") == str(layout.wheel_tree)
                impls = ["torch"] + [name for name in ("sleef", "copy") if f"--{name}" in args]
                result = {"torch": "t", "capability": env["ATEN_CPU_CAPABILITY"],
                          "has_attn": not wheel, "float_tanh": env.get("ATEN_CPU_FLOAT_TANH"),
                          "rows": [{"case": case, "threads": 1, "impl": impl,
                                    "ms": ms * (2 if wheel else 1), "rounds_ms": [2.0]}
                                   for case, ms in (("contiguous", 1.0), ("in cache", 0.004096))
                                   for impl in impls]}  # fmt: skip
            elif command == "callers":
                wheel = env.get("PYTHONPATH") == str(layout.wheel_tree)
                ms = {case: 1.0 for case in callers.CALLER_CASES}
                ms.update({"gelu(tanh)": 1.2, "mish": 2.0, "compiled tanh": 1.1})
                # each build's second process: v2.6.0 faster, this stack slower (min kept)
                calls["callers"] = calls.get("callers", 0) + 1
                later = 1 if calls["callers"] % 4 in (0, 3) else 0
                result = {"torch": "t", "capability": env["ATEN_CPU_CAPABILITY"],
                          "has_attn": not wheel,
                          "rows": [{"case": case, "condition": condition,
                                    "ms": (2.0 - 0.5 * later) if wheel else value + later,
                                    "rounds_ms": [2.0]} for case, value in ms.items()
                                   for condition in callers.CONDITIONS
                                   if condition == "1 thread" or case not in callers.COMPILED]}  # fmt: skip
            else:
                return mock.Mock(returncode=0)  # plot: writes no png here
            Path(args[0]).write_text(json.dumps(result))
            return mock.Mock(returncode=0)

        def accuracy(layout, log):
            log("tanh float32, all 2^32 inputs [avx2]: max 1 ULP")
            return [Result("tanh float32, all 2^32 inputs [avx2]", 1, note="max 1 ULP")]

        err, out = io.StringIO(), io.StringIO()
        with (tempfile.TemporaryDirectory() as tmp,
              mock.patch.dict(os.environ, {"ATEN_CPU_FLOAT_TANH": "vml"}),  # the user's own
              mock.patch.object(workers.subprocess, "run", fake_run),
              mock.patch.object(tanh_accuracy, "supported", lambda _: ["default", "avx2"]),
              mock.patch.object(tanh_accuracy, "run", accuracy),
              mock.patch.object(runner, "cpu_facts", lambda: {**CPU, "vendor": "GenuineIntel"}),
              contextlib.redirect_stderr(err), contextlib.redirect_stdout(out)):  # fmt: skip
            self.assertEqual(runner.run(layout, Path(tmp), quick=quick, build=build), 0)
            written = sorted(path.name for path in Path(tmp).iterdir())
            report = (Path(tmp) / "bench.md").read_text()
            found = json.loads((Path(tmp) / "bench.json").read_text())
        # the CPU's facts, and the vendor the Intel-only target reads, from the same record
        self.assertEqual(found["cpu"], {**CPU, "vendor": "GenuineIntel"})
        if not quick:
            self.assertEqual(found["tanh"]["cpu_vendor"], "GenuineIntel")
        self.assertEqual(written, ["bench.json", "bench.md"])
        self.assertEqual(out.getvalue(), report + "\n")
        for _, _, env in spawned:  # no "No CUDA runtime is found" from any worker
            self.assertEqual((env["CUDA_HOME"], env["CUDA_PATH"]), ("", ""))
        self.assertEqual(spawned[0][2]["KINETO_LOG_LEVEL"], "5")  # the profiling worker's
        phases = [line.split("] ", 1)[1] for line in err.getvalue().splitlines()]
        self.assertEqual(phases[-2:], ["plotting", f"wrote bench.md, bench.json to {tmp}"])
        return spawned, phases[:-2], report, found

    def test_quick_run_names_each_phase(self):
        spawned, phases, report, found = self.run_bench(quick=True)
        self.assertEqual([name for name, _, _ in spawned], ["timing", "contended", "memory",
                                                         "memory", "memory", "plot"])  # fmt: skip
        self.assertEqual(spawned[1][1][1:], ["/nonexistent/pytorch", "--quick"])
        self.assertIn("| 512, 64, 64 | 2 | contended |", report)
        self.assertEqual(phases, [
            "PR 4's torch.attn: the gate's worktree and build of PR 4 (build/gate/level-4)",
            "PR 4's torch.attn: not run: no level-4 build (run ./stack test first)",
            "timing torch.attn's methods at n, d, dv = 512, 64, 64 (one process)",
            "contended: native torch.attn and the floor, forward+backward at n, d, dv = "
            "512, 64, 64, 2 threads: alone, then beside one busy-loop process (one process)",
            "peak memory: native torch.attn (a fresh process)",
            "peak memory: composite (eager) (a fresh process)",
            "peak memory: PR 4's unfused path (a fresh process)",
        ])  # fmt: skip
        # no build asked for (the gate's smoke run) and none there: the column says why
        self.assertEqual(found["pr4"], {"note": pr4.NO_BUILD, "tree": None})
        self.assertIn("- PR 4's torch.attn: not run: no level-4 build (run ./stack test first)\n",
                      report)  # fmt: skip
        self.assertEqual(found["memory"]["ratios"], {"native / pr4": None})

    def test_pr_4s_op_is_timed_and_measured_in_the_gates_level_4_tree(self):
        made = []

        def each_level(layout, log, build, only):
            made.append((build, only))  # made and built as the gate makes them
            yield 4, "0123456789abcdef", LEVEL_4

        with mock.patch.object(pr4.gate, "each_level", each_level):
            spawned, phases, report, found = self.run_bench(quick=True, build="cli's build")
        self.assertEqual(made, [("cli's build", 4)])
        self.assertEqual([(name, args[1:]) for name, args, _ in spawned], [
            ("timing", ["/nonexistent/pytorch", "--quick"]),
            ("timing", [str(LEVEL_4.fork), "--native-only", "--quick"]),
            ("contended", ["/nonexistent/pytorch", "--quick"]),
            ("memory", ["/nonexistent/pytorch", "--method", "native"]),
            ("memory", ["/nonexistent/pytorch", "--method", "composite"]),
            ("memory", ["/nonexistent/pytorch", "--method", "unfused"]),
            ("memory", [str(LEVEL_4.fork), "--method", "native"]),
            ("plot", [str(Path(spawned[-1][1][0]).parent / "bench.png")]),
        ])  # fmt: skip
        for index in (1, 6):  # PR 4's torch: its tree first on sys.path, its build loaded
            env = spawned[index][2]
            self.assertEqual((env["PYTHONPATH"], env["STACK_OVERLAY_BUILD"]),
                             (str(LEVEL_4.fork), str(LEVEL_4.overlay)))  # fmt: skip
        self.assertEqual(spawned[6][2]["MALLOC_MMAP_THRESHOLD_"], "65536")  # as every memory run
        self.assertNotIn("STACK_OVERLAY_BUILD", spawned[0][2])
        self.assertEqual(phases[:3], [
            "PR 4's torch.attn: the gate's worktree and build of PR 4 (build/gate/level-4)",
            "PR 4's torch.attn: built at 0123456789ab",
            "timing torch.attn's methods at n, d, dv = 512, 64, 64 (one process)",
        ])  # fmt: skip
        self.assertIn("timing PR 4's torch.attn at n, d, dv = 512, 64, 64 (a "
                      "process of its own, build/gate/level-4/pytorch)", phases)  # fmt: skip
        self.assertIn("peak memory: PR 4's torch.attn (a fresh process, "
                      "build/gate/level-4/pytorch)", phases)  # fmt: skip
        self.assertEqual(found["pr4"], {"note": "built at 0123456789ab",
                                        "tree": "build/gate/level-4/pytorch", "load": [0.5, 0.75]})  # fmt: skip
        (timed,) = found["timing"]["rows"]
        self.assertEqual((timed["pass"], timed["ms"]["pr4"], timed["rounds_ms"]["pr4"]),
                         (FWD_BWD, 1.25, [1.25, 1.5]))  # fmt: skip
        self.assertEqual(timed["ratios"], {"native / pr4": 0.8})
        self.assertEqual(found["memory"]["mb"]["pr4"], 20.0)
        self.assertEqual(found["memory"]["ratios"], {"native / pr4": 0.5})
        self.assertIn("| native / pr4 <= 1.00 | 2, 3, 4 forward+backward, 2 threads | 0.800 | met |",
                      report)  # fmt: skip

    def test_without_torch_attn_there_is_no_contended_case(self):
        spawned, phases, report, _ = self.run_bench(quick=True, has_native=False)
        self.assertEqual([name for name, _, _ in spawned], ["timing", "memory", "plot"])
        self.assertFalse([p for p in phases if p.startswith("contended")])
        self.assertNotIn("## Contended", report)

    def test_full_run_times_tanh_per_capability_and_checks_accuracy(self):
        spawned, phases, report, _ = self.run_bench(quick=False)
        tanh = [(args, env["ATEN_CPU_CAPABILITY"]) for name, args, env in spawned
                if name == "tanh"]  # fmt: skip
        self.assertEqual([(args[1:], cap) for args, cap in tanh], [
            ([], "default"), (["--copy"], "default"),
            (["--sleef", str(Path("/nonexistent/build/bench-sleef/avx2"))], "avx2"),
            ([], "avx2"), (["--copy"], "avx2"),
        ])  # fmt: skip
        # unset (what users get) in every worker but the one that forces it, whatever ours says
        self.assertEqual([env.get("ATEN_CPU_FLOAT_TANH") for name, _, env in spawned
                          if name == "tanh"], [None, None, None, None, "vectorized"])  # fmt: skip
        self.assertEqual(phases[-15:], [
            "tanh [default]: v2.6.0 (9 cases, a process of its own)",
            "tanh [default]: this stack and copy (9 cases, a process of its own)",
            "tanh [avx2]: v2.6.0 and Sleef u10 (9 cases, a process of its own)",
            "tanh [avx2]: this stack (9 cases, a process of its own)",
            "tanh [avx2]: this stack, vectorized and copy (9 cases, a process of its own)",
            "tanh's callers [default]: v2.6.0 (15 cases, a process of its own)",
            "tanh's callers [default]: this stack (15 cases, a process of its own)",
            "tanh's callers [default]: this stack (15 cases, a process of its own)",
            "tanh's callers [default]: v2.6.0 (15 cases, a process of its own)",
            "tanh's callers [avx2]: v2.6.0 (15 cases, a process of its own)",
            "tanh's callers [avx2]: this stack (15 cases, a process of its own)",
            "tanh's callers [avx2]: this stack (15 cases, a process of its own)",
            "tanh's callers [avx2]: v2.6.0 (15 cases, a process of its own)",
            "tanh accuracy: all 2^32 float32 inputs per capability (about a minute each)",
            "tanh float32, all 2^32 inputs [avx2]: max 1 ULP",
        ])  # fmt: skip
        self.assertEqual(len([p for p in phases if p.startswith("peak memory")]), 6)
        self.assertEqual([args[1:] for name, args, _ in spawned if name == "contended"],
                         [["/nonexistent/pytorch"]])  # fmt: skip
        self.assertIn("contended: native torch.attn and the floor, forward+backward at n, d, dv "
                      "= 2048, 64, 64; 4096, 128, 128, 2 threads: alone, then beside one "
                      "busy-loop process (one process)", phases)  # fmt: skip
        self.assertIn("| avx2 | contiguous | 1 | 2 | 2 | 1 | 1 | 1 | 2.000 | 2.000 | 1.000 "
                      "| 1.000 | 0.500 |\n", report)  # fmt: skip
        self.assertIn("| avx2 | in cache (ns per element) | 1 | 0.5 | 0.5 | 0.25 | 0.25 | 0.25 "
                      "| 2.000 | 2.000 | 1.000 | 1.000 | 0.500 |\n", report)  # fmt: skip
        self.assertIn("| vectorized / v2.6.0 <= 1.05 | tanh in cache, 1 thread, avx2 | 0.500 "
                      "| met |", report)  # the vendor the runner read: Intel  # fmt: skip
        self.assertIn("; avx512: skipped, this CPU lacks it.", report)
        self.assertIn("does not read ATEN_CPU_FLOAT_TANH", report)  # no build here
        self.assertIn("| tanh float32, all 2^32 inputs [avx2] | passed | max 1 ULP |", report)
        # tanh's callers: v2.6.0's compiled kernels cached apart from the tree's
        caches = {env[INDUCTOR_CACHE] for name, _, env in spawned
                  if name == "callers" and env.get("PYTHONPATH")}  # fmt: skip
        self.assertEqual(caches, {"/nonexistent/build/inductor-cache/v2.6.0/default",
                                  "/nonexistent/build/inductor-cache/v2.6.0/avx2"})  # fmt: skip
        self.assertIn("## tanh's other callers", report)
        self.assertIn("| gelu(tanh) / tanh <= 1.30 | gelu(tanh), 1 thread, avx2 | 1.200 | met |",
                      report)  # fmt: skip
        self.assertIn("| compiled tanh / tanh <= 1.05 | compiled tanh, 1 thread, avx2 | 1.100 "
                      "| not met |", report)  # fmt: skip
        self.assertIn("| this stack / v2.6.0 <= 0.60 | mish, 1 thread, avx2 | 1.333 | not met |",
                      report)  # fmt: skip


class SpawnTest(unittest.TestCase):
    def test_workers_write_bytecode_to_build_pycache_whatever_the_shell_says(self):
        """As suites.suite_env: a shell's PYTHONDONTWRITEBYTECODE=1 would have every worker
        compile torch's modules again (the bench smoke by hand: 37-40 s, 23-31 s without)."""
        with mock.patch.dict(os.environ, {"PYTHONDONTWRITEBYTECODE": "1"}), \
                mock.patch.object(workers.subprocess, "run") as run:  # fmt: skip
            run.return_value.returncode = 0
            self.assertTrue(workers.spawn(Layout(Path("/x")), "timing"))
        env = run.call_args.kwargs["env"]
        self.assertNotIn("PYTHONDONTWRITEBYTECODE", env)
        self.assertEqual(env["PYTHONPYCACHEPREFIX"], "/x/build/pycache")


if __name__ == "__main__":
    unittest.main()
