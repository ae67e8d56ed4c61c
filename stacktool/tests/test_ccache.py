"""The overlay build's compiler cache: setup installs ccache, and a translation unit another
tree compiled is a hit (a real ccache, c++ and ninja where the machine has them, ~1 s)."""

import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from stacktool import ccache
from stacktool.errors import StackError
from stacktool.overlay import compile

ROOT = Path(__file__).resolve().parents[2]
NINJA = shutil.which("ninja") or next(iter(ROOT.glob(".venv/bin/ninja")), None)


class EnsureTest(unittest.TestCase):
    def ensure(self, found: list, returncodes: list[int], root=True, sudo=True):
        """ccache.ensure with `which` answering from `found` in turn (ccache's lookups) and
        apt-get's steps exiting with `returncodes`; the commands it ran."""
        ran = []

        def run(command, **kwargs):
            ran.append(command)
            return subprocess.CompletedProcess(command, returncodes[len(ran) - 1], "", "E: no")

        def which(name):
            if name == "ccache":
                return found.pop(0)
            return {"apt-get": "/usr/bin/apt-get", "sudo": "/usr/bin/sudo" if sudo else None}[name]

        with (
            mock.patch.object(ccache.shutil, "which", which),
            mock.patch.object(ccache.os, "geteuid", return_value=0 if root else 1000),
        ):
            return ccache.ensure(run), ran

    def test_found_is_used_as_it_is(self):
        self.assertEqual(self.ensure(["/usr/bin/ccache"], []), ("/usr/bin/ccache", []))

    def test_missing_is_installed_with_apt_get(self):
        path, ran = self.ensure([None, "/usr/bin/ccache"], [0])
        self.assertEqual(path, "/usr/bin/ccache")
        self.assertEqual(ran[0][0], "apt-get")
        self.assertEqual(ran[0][-4:], ["-y", "-q", "--no-install-recommends", "ccache"])

    def test_stale_package_lists_are_updated_once(self):
        path, ran = self.ensure([None, "/usr/bin/ccache"], [100, 0, 0])
        self.assertEqual([command[3] for command in ran], ["install", "update", "install"])
        self.assertEqual(path, "/usr/bin/ccache")

    def test_not_root_uses_sudo_without_a_prompt(self):
        _, ran = self.ensure([None, "/usr/bin/ccache"], [0], root=False)
        self.assertEqual(ran[0][:3], ["sudo", "-n", "apt-get"])

    def test_a_failed_install_says_what_to_do(self):
        with self.assertRaisesRegex(StackError, r"ccache is required(.|\n)*E: no(.|\n)*Install "
                                    "ccache, then run ./stack setup again"):  # fmt: skip
            self.ensure([None, None], [100, 0, 100])
        with self.assertRaisesRegex(StackError, "needs root"):
            self.ensure([None], [], root=False, sudo=False)


class LauncherTest(unittest.TestCase):
    def test_launcher_names_the_cache_and_ignores_the_working_directory(self):
        text = ccache.launcher("/usr/bin/ccache", Path("/p/build/ccache"))
        self.assertEqual(text, "env CCACHE_DIR=/p/build/ccache CCACHE_NOHASHDIR=1 "
                         f"CCACHE_MAXSIZE={ccache.MAX_SIZE} /usr/bin/ccache")  # fmt: skip

    def test_stats_counts_hits_and_misses(self):
        with tempfile.TemporaryDirectory() as tmp:
            fake = Path(tmp) / "ccache"
            fake.write_text("#!/bin/sh\nprintf 'direct_cache_hit\\t3\\npreprocessed_cache_hit"
                            "\\t1\\ncache_miss\\t2\\nstats_updated_timestamp\\t0\\n'\n")  # fmt: skip
            fake.chmod(0o755)
            self.assertEqual(ccache.stats(str(fake), Path(tmp)), (4, 2))


class NinjaFileTest(unittest.TestCase):
    """Compile commands name no tree: the same TU of another tree has the same command."""

    def test_compile_paths_are_relative_to_the_build_folder(self):
        fork, build = Path("/p/build/gate/level-4/pytorch"), Path("/p/build/gate/level-4/overlay")
        text = compile._ninja_file(
            fork, build, "/usr/include/python3.11", Path("/p/.venv/include"), ".so",
            [(fork / "aten/src/ATen/native/Attn.cpp", "Attn", ""), (build / "src/Ops.cpp", "Ops", "")],
            [build / "src/bindings/b.cpp"], [fork / "aten/src/ATen/functorch/Helper.cpp"], "LAUNCH",
        )  # fmt: skip
        lines = text.splitlines()
        self.assertIn("build obj/core/Attn.o: cxx fork/aten/src/ATen/native/Attn.cpp", lines)
        self.assertIn("build obj/core/Ops.o: cxx src/Ops.cpp", lines)
        self.assertIn("build obj/bindings/b.o: cxx src/bindings/b.cpp", lines)
        self.assertIn(
            "build obj/support/Helper.o: cxx fork/aten/src/ATen/functorch/Helper.cpp", lines
        )
        self.assertIn("launcher = LAUNCH", lines)
        self.assertIn("  command = $launcher $cxx -MMD -MF $out.d $cxxflags $extra $includes -c $in "
                      "-o $out", lines)  # fmt: skip
        compiling = [line for line in lines if "ldflags" not in line]
        self.assertFalse([line for line in compiling if "level-4" in line])

    def test_openmp_as_the_wheel_builds_and_links_it(self):
        # at::parallel_for is inline (ATen/ParallelOpenMP.h): without -fopenmp its pragma is
        # ignored and a kernel's parallel_for runs on one thread. Both libraries link the
        # OpenMP runtime the wheel bundles, where it bundles one.
        root = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, root)
        fork, build = root / "pytorch", root / "overlay"
        (fork / "torch/lib").mkdir(parents=True)

        def flags():
            lines = compile._ninja_file(fork, build, "/usr/include", root / ".venv/include",
                                        ".so", [], [build / "src/b.cpp"], [])  # fmt: skip
            lines = lines.splitlines()
            return ([line for line in lines if line.startswith("cxxflags")],
                    [line for line in lines if line.startswith("  ldflags")])  # fmt: skip

        cxxflags, ldflags = flags()
        self.assertIn("-fopenmp", cxxflags[0].split())
        self.assertEqual(len(ldflags), 2)
        self.assertTrue(all("-lgomp" in line.split() for line in ldflags), ldflags)
        (fork / "torch/lib/libgomp-a34b3233.so.1").write_bytes(b"")
        _, ldflags = flags()
        self.assertTrue(all("-l:libgomp-a34b3233.so.1" in line.split() for line in ldflags),
                        ldflags)  # fmt: skip


@unittest.skipUnless(ccache.find() and shutil.which("c++") and NINJA, "needs ccache, c++, ninja")
class CrossTreeHitTest(unittest.TestCase):
    def test_a_tu_compiled_in_one_tree_is_a_hit_in_another(self):
        root = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, root)
        cache = root / "build" / "ccache"
        found = ccache.find()
        # setup's tree and build, and a gate level's, one level deeper
        pairs = [(root / "pytorch", root / "build" / "overlay"),
                 (root / "build/gate/level-5/pytorch", root / "build/gate/level-5/overlay")]  # fmt: skip
        counts = []
        for fork, build in pairs:
            (fork / "torch/include").mkdir(parents=True)
            (fork / "torch/include/h.h").write_text("inline int h() { return 7; }\n")
            (fork / "k.cpp").write_text('#include <h.h>\nconst char* f() { return __FILE__; }\n'
                                        "int g() { return h(); }\n")  # fmt: skip
            build.mkdir(parents=True)
            compile.link_fork(fork, build)
            (build / "build.ninja").write_text(compile._ninja_file(
                fork, build, "/usr/include", root / ".venv/include", ".so",
                [(fork / "k.cpp", "k", "")], [], [], ccache.launcher(found, cache),
            ))  # fmt: skip
            subprocess.run([str(NINJA), "-C", str(build), "obj/core/k.o"], check=True,
                           capture_output=True)  # fmt: skip
            self.assertTrue((build / "obj/core/k.o").exists())
            counts.append(ccache.stats(found, cache))
        self.assertEqual(counts, [(0, 1), (1, 1)])  # a miss in the first tree, a hit in the second


if __name__ == "__main__":
    unittest.main()
