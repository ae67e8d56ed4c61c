"""`./stack sanitize` (stacktool/sanitize.py): flags, runtimes, environment, reports, checks.

The sanitized build itself and its runs need the venv, pytorch/ and minutes: InjectedTest
(opt-in, STACK_SANITIZE_INJECT=1) builds with a one-element overrun injected and checks the
report; the rest runs on fakes.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from stacktool import cli, config, sanitize, suites
from stacktool.errors import StackError
from stacktool.overlay import compile

ROOT = Path(__file__).resolve().parents[2]


def tmpdir(test: unittest.TestCase) -> Path:
    path = Path(tempfile.mkdtemp())
    test.addCleanup(shutil.rmtree, path)
    return path


class FlagsTest(unittest.TestCase):
    def test_both_sanitizers_fatal_with_frame_pointers_and_lines(self):
        for flag in ("-fsanitize=address,undefined", "-fno-omit-frame-pointer",
                     "-fno-sanitize-recover=undefined", "-g"):  # fmt: skip
            self.assertIn(flag, sanitize.CXXFLAGS.split())
        self.assertEqual(sanitize.LDFLAGS, "-fsanitize=address,undefined")

    def test_the_gate_instruments_the_kernel_files_at_one_capability(self):
        import fnmatch

        patterns = sanitize.gate_objects("avx2")
        objects = {
            "core/aten__src__ATen__native__cpu__AttnKernel.AVX2": True,
            "core/added__aten__src__ATen__native__cpu__UnaryOpsKernel.AVX2": True,
            "core/aten__src__ATen__native__cpu__AttnKernel.DEFAULT": False,
            "core/recompiled__aten__src__ATen__native__cpu__Activation.AVX2": True,  # GELU's
            "core/recompiled__aten__src__ATen__native__cpu__Activation.AVX512": False,
            "core/recompiled__aten__src__ATen__native__quantized__cpu__kernels__"
            "QuantizedOpKernels.AVX2": False,
            "core/aten__src__ATen__native__cpu__AttnKernel.AVX512": False,
            "core/aten__src__ATen__native__Attn": False,
            "core/aten__RegisterCPU": False,
        }
        for name, instrumented in objects.items():
            self.assertEqual(
                any(fnmatch.fnmatchcase(name, p) for p in patterns), instrumented, name
            )


class NinjaVariantTest(unittest.TestCase):
    """The variant's flags reach the compiles it names and both links; the rest is the
    overlay build's command, so ccache has it."""

    def ninja(self, variant):
        tmp = tmpdir(self)
        fork, build = tmp / "pytorch", tmp / "build"
        (fork / "torch" / "lib").mkdir(parents=True)
        core = [(fork / "aten/src/ATen/native/Attn.cpp", "aten__src__ATen__native__Attn", ""),
                (fork / "aten/src/ATen/native/cpu/AttnKernel.cpp",
                 "aten__src__ATen__native__cpu__AttnKernel.AVX2", "-O3 -mavx2")]  # fmt: skip
        return compile._ninja_file(fork, build, "/py", Path("/venv/include"), ".so", core,
                                   [build / "src/bindings/glue.cpp"], [], "", variant)  # fmt: skip

    def edges(self, text: str) -> dict[str, str]:
        """{object or library: its extra flags or ldflags}"""
        lines, found = text.splitlines(), {}
        for line, following in zip(lines, lines[1:], strict=False):
            if line.startswith("build "):
                found[line.split()[1].rstrip(":")] = following.split("=", 1)[1].strip()
        return found

    def test_every_compile_and_both_links(self):
        edges = self.edges(self.ninja(compile.Variant("-fsanitize=address", "-fsanitize=address")))
        self.assertEqual(edges["obj/core/aten__src__ATen__native__Attn.o"], "-fsanitize=address")
        self.assertEqual(edges["obj/core/aten__src__ATen__native__cpu__AttnKernel.AVX2.o"],
                         "-fsanitize=address -O3 -mavx2")  # fmt: skip
        self.assertEqual(edges["obj/bindings/glue.o"], "-fsanitize=address")
        for lib in ("libstack_overlay.so", "_stack_overlay_bindings.so"):
            self.assertIn(" -fsanitize=address", edges[lib])

    def test_only_the_objects_named(self):
        variant = compile.Variant("-fsanitize=address", only=("core/*__cpu__*.AVX2",))
        edges = self.edges(self.ninja(variant))
        self.assertEqual(edges["obj/core/aten__src__ATen__native__Attn.o"], "")
        self.assertEqual(edges["obj/core/aten__src__ATen__native__cpu__AttnKernel.AVX2.o"],
                         "-fsanitize=address -O3 -mavx2")  # fmt: skip

    def test_without_a_variant_the_overlay_builds_own_commands(self):
        edges = self.edges(self.ninja(None))
        self.assertEqual(edges["obj/core/aten__src__ATen__native__Attn.o"], "")
        self.assertNotIn("sanitize", edges["libstack_overlay.so"])


class InjectTest(unittest.TestCase):
    """Edits to copies of the sources, never to the tree."""

    def setUp(self):
        self.fork = tmpdir(self)
        self.kernel = self.fork / "aten/src/ATen/native/cpu/AttnKernel.cpp"
        self.kernel.parent.mkdir(parents=True)
        self.kernel.write_text("int j1 = min(j0 + 16, n);\n")
        self.src = self.fork / "build" / "src"

    def inject(self, *edits):
        texts = {"added/aten__src__ATen__native__cpu__UnaryOpsKernel.cpp": "map(out, in, n);\n"}
        added = {"aten/src/ATen/native/cpu/UnaryOpsKernel.cpp": "..."}
        new_files = compile.inject(compile.Variant("", inject=edits), self.fork, texts,
                                   [self.kernel], added, self.src)  # fmt: skip
        return texts, new_files

    def test_a_new_file_is_compiled_from_an_edited_copy(self):
        texts, new_files = self.inject(
            ("aten/src/ATen/native/cpu/AttnKernel.cpp", "n);", "n + 1);")
        )
        name = "injected/aten/src/ATen/native/cpu/AttnKernel.cpp"
        self.assertEqual(texts[name], "int j1 = min(j0 + 16, n + 1);\n")
        self.assertEqual(new_files, [self.src / name])
        self.assertEqual(self.kernel.read_text(), "int j1 = min(j0 + 16, n);\n")  # the tree's

    def test_an_added_lines_tu_is_edited_in_place(self):
        texts, new_files = self.inject(
            ("aten/src/ATen/native/cpu/UnaryOpsKernel.cpp", "n)", "n + 1)")
        )
        self.assertEqual(texts["added/aten__src__ATen__native__cpu__UnaryOpsKernel.cpp"],
                         "map(out, in, n + 1);\n")  # fmt: skip
        self.assertEqual(new_files, [self.kernel])

    def test_text_not_there_once_or_a_file_not_compiled_is_an_error(self):
        with self.assertRaisesRegex(StackError, "occurs 0 times in it, not once"):
            self.inject(("aten/src/ATen/native/cpu/AttnKernel.cpp", "nowhere", "x"))
        with self.assertRaisesRegex(StackError, "the stack compiles no such file"):
            self.inject(("aten/src/ATen/native/Other.cpp", "n", "x"))

    def test_each_injection_names_its_text_and_access_in_the_stack(self):
        fork = ROOT / "pytorch"
        if not fork.exists():
            self.skipTest("no pytorch/ (./stack setup)")
        layout = config.Layout(ROOT)
        for name, injection in sanitize.INJECTIONS.items():
            text = (fork / injection.path).read_text()
            self.assertEqual(text.count(injection.text), 1, name)
            self.assertGreater(sanitize.reported_line(layout, injection), 0)


class RuntimeTest(unittest.TestCase):
    def fake_gcc(self, files: dict[str, str], version: str = "12"):
        def run(command, **kwargs):
            if command[1] == "-dumpversion":
                return subprocess.CompletedProcess(command, 0, f"{version}\n", "")
            name = command[1].split("=", 1)[1]
            return subprocess.CompletedProcess(command, 0, files.get(name, name) + "\n", "")

        return run

    def test_found_and_resolved(self):
        tmp = tmpdir(self)
        (tmp / "libasan.so.8").write_text("")
        (tmp / "libubsan.so.1").write_text("")
        (tmp / "libasan.so").symlink_to("libasan.so.8")
        (tmp / "libubsan.so").symlink_to("libubsan.so.1")
        found = sanitize.find_runtimes(self.fake_gcc({n: str(tmp / n) for n in sanitize.RUNTIMES}))
        self.assertEqual(found, [tmp / "libasan.so.8", tmp / "libubsan.so.1"])

    def test_missing_runtime_is_an_error_naming_the_debian_package(self):
        with self.assertRaisesRegex(StackError, r"libasan.so and libubsan.so not found(.|\n)*"
                                    r"apt-get install libasan8 libubsan1"):  # fmt: skip
            sanitize.find_runtimes(self.fake_gcc({}))
        with self.assertRaisesRegex(StackError, r"apt-get install libasan6 libubsan1\)"):
            sanitize.find_runtimes(self.fake_gcc({}, version="11.4.0"))

    def test_a_dangling_link_is_missing(self):
        tmp = tmpdir(self)
        (tmp / "libasan.so").symlink_to("libasan.so.8")  # libgcc-12-dev without libasan8
        (tmp / "libubsan.so.1").write_text("")
        (tmp / "libubsan.so").symlink_to("libubsan.so.1")
        with self.assertRaisesRegex(StackError, r"libasan.so not found(.|\n)*install Debian's "
                                    r"libasan8 \("):  # fmt: skip
            sanitize.find_runtimes(self.fake_gcc({n: str(tmp / n) for n in sanitize.RUNTIMES}))

    def test_preload_order(self):
        runtimes = [Path("/lib/libasan.so.8"), Path("/lib/libubsan.so.1")]
        self.assertEqual(sanitize.preload(runtimes, "libmine.so"),
                         "/lib/libasan.so.8:/lib/libubsan.so.1:libstdc++.so.6:libmine.so")  # fmt: skip
        self.assertTrue(sanitize.preload(runtimes).endswith(":libstdc++.so.6"))


class EnvironmentTest(unittest.TestCase):
    def test_the_sanitized_build_its_runtimes_options_and_log_folder(self):
        layout, logs = config.Layout(Path("/p")), Path("/logs")
        runtimes = [Path("/lib/libasan.so.8"), Path("/lib/libubsan.so.1")]
        shell = {"ATEN_CPU_CAPABILITY": "avx512", "LD_PRELOAD": "", "CI": "true"}
        with mock.patch.dict(os.environ, shell):
            env = sanitize.environment(layout, Path("/p/build/sanitize/overlay"), logs, runtimes,
                                       {"ATEN_CPU_CAPABILITY": "avx2"})  # fmt: skip
        self.assertEqual(env["STACK_OVERLAY_BUILD"], "/p/build/sanitize/overlay")
        self.assertEqual(env["LD_PRELOAD"], "/lib/libasan.so.8:/lib/libubsan.so.1:libstdc++.so.6")
        self.assertEqual(env["ATEN_CPU_CAPABILITY"], "avx2")  # the check's, not the shell's
        self.assertNotIn("CI", env)
        self.assertEqual(env["PYTHONDONTWRITEBYTECODE"], "1")
        asan = dict(item.split("=", 1) for item in env["ASAN_OPTIONS"].split(":"))
        self.assertEqual(asan["detect_leaks"], "0")
        self.assertEqual(asan["log_path"], "/logs/asan")
        ubsan = dict(item.split("=", 1) for item in env["UBSAN_OPTIONS"].split(":"))
        self.assertEqual((ubsan["print_stacktrace"], ubsan["halt_on_error"]), ("1", "1"))
        self.assertEqual(ubsan["log_path"], "/logs/ubsan")

    def test_build_folders_never_build_overlay(self):
        layout = config.Layout(Path("/p"))
        self.assertEqual(sanitize.build_dir(layout), Path("/p/build/sanitize/overlay"))
        self.assertEqual(sanitize.build_dir(layout, gate=True), Path("/p/build/sanitize/gate"))
        level = layout.gate_tree(6)
        self.assertEqual(sanitize.build_dir(level), Path("/p/build/gate/level-6/sanitize"))
        self.assertNotIn(layout.overlay, [sanitize.build_dir(layout), sanitize.build_dir(level)])


ASAN_REPORT = """=================================================================
==123==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x61f00027c100
READ of size 8 at 0x61f00027c100 thread T0
    #0 0x7f2d623d8bbc in copy_rows<double> src/injected/aten/src/ATen/native/cpu/AttnKernel.cpp:176
    #1 0x7f2d623d8bbc in operator() fork/torch/include/ATen/Parallel-inl.h:29
"""


class ReportTest(unittest.TestCase):
    def test_every_non_empty_file_is_a_report(self):
        logs = tmpdir(self)
        (logs / "asan.123").write_text(ASAN_REPORT)
        (logs / "ubsan.7").write_text("x.cpp:3:5: runtime error: signed integer overflow\n")
        (logs / "asan.9").write_text("")
        reports = sanitize.collect("sweep", logs)
        self.assertEqual([(r.check, r.name) for r in reports],
                         [("sweep", "asan.123"), ("sweep", "ubsan.7")])  # fmt: skip
        self.assertEqual(reports[0].first_lines(2).splitlines()[1],
                         "==123==ERROR: AddressSanitizer: heap-buffer-overflow on address "
                         "0x61f00027c100")  # fmt: skip
        self.assertEqual(sanitize.collect("sweep", logs / "absent"), [])

    def test_locations(self):
        report = sanitize.Report("c", "asan.1", ASAN_REPORT)
        self.assertEqual(sanitize.locations(report),
                         [("AttnKernel.cpp", 176), ("Parallel-inl.h", 29)])  # fmt: skip

    def test_closing_lines(self):
        results = [suites.Result("a", 10, 0, 2), suites.Result("b", 5, 0, 0)]
        lines = sanitize.summary(results, [], 12.5).splitlines()
        self.assertRegex(lines[-2], r"^=+ 15 passed, 2 skipped in 12.50s =+$")
        self.assertEqual(lines[-1], "0 sanitizer reports")
        self.assertEqual(suites.pytest_counts(lines[-2]), (15, 0, 2))  # a pytest closing line
        report = sanitize.Report("b", "asan.123", ASAN_REPORT)
        results[1].failed = 2  # one test failed (the process ended) and the report
        lines = sanitize.summary(results, [report], 3).splitlines()
        self.assertIn("----- sanitizer report asan.123 (b) -----", lines)
        self.assertIn(ASAN_REPORT.splitlines()[1], lines)
        self.assertRegex(lines[-2], r"^=+ 1 failed, 15 passed, 2 skipped in 3.00s =+$")
        self.assertEqual(lines[-1], "1 sanitizer report")


class ChecksTest(unittest.TestCase):
    def test_every_capability_and_test_ops_once(self):
        names = [c.name for c in sanitize.checks(["default", "avx2"])]
        self.assertEqual(names, [
            "sanitize_sweep [default]", "test_attn_gradcheck [default]",
            "test_unary_ufuncs -k tanh [default]",
            "sanitize_sweep [avx2, ATEN_CPU_FLOAT_TANH=vectorized]",
            "test_attn_gradcheck [avx2, ATEN_CPU_FLOAT_TANH=vectorized]",
            "test_unary_ufuncs -k tanh [avx2, ATEN_CPU_FLOAT_TANH=vectorized]",
            "test_ops -k attn"])  # fmt: skip
        tanh = sanitize.checks(["default"])[2]
        self.assertEqual(tanh.args, ("test/test_unary_ufuncs.py", "-k",
                                     "tanh and not atanh and not hardtanh"))  # fmt: skip
        sweep = dict(sanitize.checks(["default", "avx2", "avx512"])[6].env)
        self.assertEqual(sweep, {"ATEN_CPU_CAPABILITY": "avx512",
                                 "ATEN_CPU_FLOAT_TANH": "vectorized"})  # fmt: skip

    def test_the_gates_subset_at_avx2_where_the_cpu_runs_it(self):
        """Also on an AVX-512 CPU: ASan does not see AVX512's masked tails (gate_capability)."""
        for capabilities in (["default", "avx2"], ["default", "avx2", "avx512"]):
            checks = sanitize.checks(capabilities, gate=True)
            self.assertEqual([c.name for c in checks], [
                "sanitize_sweep, edges [avx2, ATEN_CPU_FLOAT_TANH=vectorized]",
                "test_attn_gradcheck -k TestAttnCPUKernel [avx2, ATEN_CPU_FLOAT_TANH=vectorized]"])  # fmt: skip
            self.assertEqual(dict(checks[1].env)["ATEN_CPU_CAPABILITY"], "avx2")
        self.assertEqual(sanitize.gate_capability(["default"]), "default")
        self.assertEqual(dict(checks[0].env)["STACK_SWEEP_SIZES"], "edges")
        self.assertTrue(checks[0].in_root)
        self.assertEqual(checks[1].args, ("test/test_attn_gradcheck.py", "-k", "TestAttnCPUKernel"))


class RunCheckTest(unittest.TestCase):
    """A check's counts: its tests', and a failure per report, from any of its processes."""

    def run_check(self, stdout: str, returncode: int = 0, reports: dict[str, str] | None = None):
        class Fake(suites.Processes):
            def run(self, command, **kwargs):
                self.seen = (command, kwargs)
                logs = Path(kwargs["env"]["ASAN_OPTIONS"].split("log_path=")[1].split(":")[0])
                for name, text in (reports or {}).items():
                    (logs.parent / name).write_text(text)  # e.g. a subprocess's asan.PID
                return subprocess.CompletedProcess(command, returncode, stdout, "")

        layout, found, fake = config.Layout(Path("/p")), [], Fake()
        check = sanitize.Check("sweep", ("x.py",), (("ATEN_CPU_CAPABILITY", "avx2"),), True)
        result, _ = sanitize.run_check(
            layout, check, Path("/b"), [Path("/libasan.so")], found, fake
        )
        return result, found, fake.seen

    def test_clean(self):
        result, found, (command, kwargs) = self.run_check("=== 3 passed, 1 skipped in 1.0s ===\n")
        self.assertEqual((result.passed, result.failed, result.skipped), (3, 0, 1))
        self.assertEqual(found, [])
        self.assertEqual(command[1:], ["-m", "pytest", "x.py", "-p", "no:cacheprovider"])
        self.assertEqual(kwargs["cwd"], Path("/p"))  # in_root: the sweep
        self.assertEqual(kwargs["env"]["ATEN_CPU_CAPABILITY"], "avx2")

    def test_a_report_fails_the_check(self):
        result, found, _ = self.run_check("=== 3 passed in 1.0s ===\n", 0, {"asan.77": ASAN_REPORT})
        self.assertEqual((result.passed, result.failed), (3, 1))
        self.assertEqual([r.name for r in found], ["asan.77"])
        self.assertIn("1 sanitizer report(s)", result.note)

    def test_a_process_ended_by_a_sanitizer_fails_its_check(self):
        result, found, _ = self.run_check("...", 1, {"asan.5": ASAN_REPORT})
        self.assertEqual((result.passed, result.failed), (0, 2))  # the process, the report


class TaskTest(unittest.TestCase):
    """The gate's check: a process of its own; its rows become the level's results."""

    def run_task(self, rows, returncode=0):
        class Fake(suites.Processes):
            def run(self, command, **kwargs):
                if rows is not None:
                    Path(command[-1]).write_text(json.dumps(rows))
                return subprocess.CompletedProcess(command, returncode, "out", "")

        layout = config.Layout(Path("/p")).gate_tree(6)
        task = sanitize.task(layout)
        self.assertEqual(task.name, sanitize.NAME)
        return task.run(Fake())

    def test_rows(self):
        row = {"name": "sanitizers (ASan, UBSan): sweep", "passed": 3, "failed": 0,
               "skipped": 0, "note": "1 s"}  # fmt: skip
        results, output = self.run_task([row])
        self.assertEqual(results, [suites.Result(**row)])
        self.assertEqual(output, "out")

    def test_no_rows_is_a_failure(self):
        results, _ = self.run_task(None, returncode=1)
        self.assertEqual((results[0].name, results[0].failed), (sanitize.NAME, 1))


class CliTest(unittest.TestCase):
    def test_sanitize_takes_the_lock_for_its_build_only(self):
        for sig in (signal.SIGINT, signal.SIGTERM):  # main installs its handlers
            self.addCleanup(signal.signal, sig, signal.getsignal(sig))
        seen = []
        with (
            mock.patch.object(cli.sanitize, "run", lambda layout, log, locked, gate: seen.append(
                (locked, gate)) or 0),
            mock.patch.object(cli.lock, "held", side_effect=AssertionError("held")),
            mock.patch.dict(os.environ),  # main sets PYTHONUNBUFFERED
        ):  # fmt: skip
            self.assertEqual(cli.main(["sanitize", "--gate"]), 0)
        self.assertEqual(seen[0][1], True)
        self.assertTrue(callable(seen[0][0]))


@unittest.skipUnless(os.environ.get("STACK_SANITIZE_INJECT") == "1",
                     "slow (about 80 s: a partly sanitized build, two runs): "
                     "STACK_SANITIZE_INJECT=1 runs it")  # fmt: skip
class InjectedTest(unittest.TestCase):
    """The sanitizers catch what they are for: a build with a one-element overrun injected
    into copy_rows (AttnKernel.cpp) and into tanh_float_loop's tail (UnaryOpsKernel.cpp),
    each reported by ASan at the line of the access."""

    def test_injected_overruns_are_reported_with_their_line(self):
        layout = config.Layout(ROOT)
        target = layout.build / "sanitize" / "inject"
        found = sanitize.inject_and_run(layout, list(sanitize.INJECTIONS), target)
        for name, injection in sanitize.INJECTIONS.items():
            with self.subTest(name):
                self.assertEqual(len(found[name]), 1, found[name])
                report = found[name][0]
                self.assertIn("ERROR: AddressSanitizer: heap-buffer-overflow", report.text)
                where = (Path(injection.path).name, sanitize.reported_line(layout, injection))
                self.assertIn(where, sanitize.locations(report), report.text[:3000])
                print(f"\n{name}:\n{report.first_lines(8)}")


if __name__ == "__main__":
    unittest.main()
