"""The gate's CXX shim: inductor's kernels compiled with their first header precompiled (a real
g++ where the machine has one, about 2 s), and the compile left as it was wherever it cannot."""

import os
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from stacktool import gate, inductor_pch
from stacktool.config import Layout
from stacktool.suites import suite_env

GXX = shutil.which("g++")
# A kernel as inductor writes one: its prefix header included first, by absolute path.
HEADER = "#pragma once\n#include <vector>\ninline int twice(int x) { return 2 * x; }\n"
KERNEL = '\n#include "{header}"\nextern "C" int kernel(int x) {{ return twice(x) + N; }}\n'


class HeaderFlagsTest(unittest.TestCase):
    def test_the_header_takes_the_kernels_options_without_output_link_or_source(self):
        args = ["/c/k.cpp", "-D", "CPU_CAPABILITY_AVX2", "-shared", "-fPIC", "-O3", "-mavx2",
                "-I/t/torch/include", "-ltorch", "-L/t/lib", "-Wl,-rpath,/t", "-c", "-o",
                "/c/k.so"]  # fmt: skip
        self.assertEqual(inductor_pch.header_flags(args, "/c/k.cpp"),
                         ["-D", "CPU_CAPABILITY_AVX2", "-fPIC", "-O3", "-mavx2",
                          "-I/t/torch/include"])  # fmt: skip


def which(name: str) -> str:
    """shutil.which on a machine with g++, clang++ and c++ in /usr/bin."""
    return name if name.startswith("/") else f"/usr/bin/{name}"


@mock.patch.object(inductor_pch.shutil, "which", which)
class EnvironmentTest(unittest.TestCase):
    def test_gcc_gets_the_shim_and_another_compiler_keeps_its_own(self):
        env = inductor_pch.environment(Path("/s"), {})
        self.assertEqual((env["CXX"], env[inductor_pch.COMPILER], env[inductor_pch.STORE]),
                         (str(inductor_pch.SHIM), "g++", "/s"))  # fmt: skip
        # c++ too: inductor would take the shim's name for GCC's and pass GCC's flags
        for other in ("clang++", "c++"):
            self.assertEqual(inductor_pch.environment(Path("/s"), {"CXX": other}), {})

    def test_a_process_the_shim_is_cxx_of_keeps_the_compiler_behind_it(self):
        inherited = {"CXX": str(inductor_pch.SHIM), inductor_pch.COMPILER: "/opt/gcc/bin/g++"}
        env = inductor_pch.environment(Path("/s"), inherited)
        self.assertEqual(env[inductor_pch.COMPILER], "/opt/gcc/bin/g++")

    def test_suite_env_stores_them_in_the_trees_inductor_cache(self):
        with mock.patch.dict(os.environ, {"CXX": "g++"}):
            env = suite_env(Layout(Path("/x")), {"ATEN_CPU_CAPABILITY": "avx2"})
        store = "/x/build/inductor-cache/pytorch/avx2-wheel/pch"
        self.assertEqual((env["CXX"], env[inductor_pch.STORE]), (str(inductor_pch.SHIM), store))


@unittest.skipUnless(GXX, "needs g++")
class ShimTest(unittest.TestCase):
    def setUp(self):
        self.dir = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.dir)
        self.header = self.dir / "cache" / "prefix.h"
        self.header.parent.mkdir()
        self.header.write_text(HEADER)
        self.store = self.dir / "store"

    def compile(self, source: str, *flags: str) -> subprocess.CompletedProcess:
        """Compile `source` through the shim with -H (GCC names each header it reads, and a
        precompiled one with `!`)."""
        path = self.dir / "k.cpp"
        path.write_text(source)
        env = {**os.environ, **inductor_pch.environment(self.store, {})}
        return subprocess.run([str(inductor_pch.SHIM), str(path), "-DN=1", "-O2", *flags, "-H",
                               "-c", "-o", str(self.dir / "k.o")], env=env,
                              capture_output=True, text=True)  # fmt: skip

    def test_the_first_header_is_precompiled_once_and_gcc_takes_it(self):
        kernel = KERNEL.format(header=self.header)
        first, again = self.compile(kernel), self.compile(kernel)
        for proc in (first, again):
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertIn(f"! {self.header}.gch/", proc.stderr)
        self.assertEqual(len(list(self.store.glob("*.gch"))), 1)
        self.assertTrue((self.dir / "k.o").exists())

    def test_other_options_get_a_header_of_their_own(self):
        kernel = KERNEL.format(header=self.header)
        self.compile(kernel)
        proc = self.compile(kernel, "-DOTHER=1")
        self.assertIn(f"! {self.header}.gch/", proc.stderr)
        self.assertEqual(len(list(self.store.glob("*.gch"))), 2)

    def test_the_object_is_the_one_g_plus_plus_makes_alone(self):
        kernel = KERNEL.format(header=self.header)
        self.assertIn("!", self.compile(kernel).stderr)
        shim = (self.dir / "k.o").read_bytes()
        subprocess.run([GXX, str(self.dir / "k.cpp"), "-DN=1", "-O2", "-c", "-o",
                        str(self.dir / "alone.o")], check=True)  # fmt: skip
        self.assertEqual(shim, (self.dir / "alone.o").read_bytes())

    def test_a_compiler_that_is_another_shim_runs_gcc_not_itself(self):
        copy = self.dir / "other" / "stacktool"
        shutil.copytree(inductor_pch.SHIM.parent.parent, copy,
                        ignore=shutil.ignore_patterns("tests", "__pycache__"))  # fmt: skip
        env = {**os.environ, **inductor_pch.environment(self.store, {}),
               inductor_pch.COMPILER: str(copy / "bin" / "g++")}  # fmt: skip
        proc = subprocess.run([str(inductor_pch.SHIM), "--version"], env=env, timeout=30,
                              capture_output=True, text=True)  # fmt: skip
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("Free Software Foundation", proc.stdout)

    def test_a_link_left_by_a_removed_store_is_made_again(self):
        kernel = KERNEL.format(header=self.header)
        self.compile(kernel)
        shutil.rmtree(self.store)
        proc = self.compile(kernel)
        self.assertIn(f"! {self.header}.gch/", proc.stderr)

    def test_a_source_without_an_absolute_first_include_compiles_as_it_is(self):
        proc = self.compile('#include <vector>\nextern "C" int kernel() { return N; }\n')
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertFalse(self.store.exists())
        self.assertNotIn("!", proc.stderr)

    def test_a_header_gcc_cannot_precompile_leaves_the_compile_to_fail_as_it_would(self):
        self.header.write_text("this is not C++;\n")
        proc = self.compile(KERNEL.format(header=self.header))
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("prefix.h:1:1: error", proc.stderr)
        self.assertEqual(list(self.store.glob("*.gch*")), [])

    def test_the_gate_removes_the_stores_and_nothing_else(self):
        layout = Layout(self.dir)
        cache = layout.inductor_cache("avx2")
        (cache / "pch").mkdir(parents=True)
        (cache / "pch" / "a.gch").write_text("")
        (cache / "ab").mkdir()
        said = []
        gate.remove_precompiled_headers(layout, said.append)
        self.assertEqual([p.name for p in cache.iterdir()], ["ab"])
        self.assertEqual(
            said, ["removed the 1 precompiled header(s) inductor's kernels took (0 MB)"]
        )


if __name__ == "__main__":
    unittest.main()
