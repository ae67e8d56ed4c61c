"""Tests of the overlay build's pure parts (stdlib only, no torch; < 1 s).

No compiler, except that one test runs the C preprocessor (c++ -E) where one is installed.
"""

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
import unittest.mock
from pathlib import Path

from stacktool import overlay
from stacktool.errors import StackError
from stacktool.overlay import added_lines, changes, compile, generate, load, loader

PRISTINE = textwrap.dedent("""\
    # comment at the top
    - func: add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
      variants: function, method
      dispatch:
        CPU: add_cpu  # trailing comment

    - func: atleast_3d(Tensor self) -> Tensor
      variants: function
    """)


class NewOpsTest(unittest.TestCase):
    def test_no_change_no_ops(self):
        self.assertEqual(changes.diff_ops(PRISTINE, PRISTINE), [])

    def test_comments_and_blank_lines_do_not_count(self):
        patched = PRISTINE.replace("# trailing comment", "# another").replace("\n\n", "\n\n\n")
        self.assertEqual(changes.diff_ops(PRISTINE, patched), [])

    def test_new_op_overloads_and_autogen(self):
        patched = PRISTINE + textwrap.dedent("""\

            - func: attn(Tensor q, Tensor k, Tensor v) -> (Tensor output, Tensor attn)
              variants: function
              autogen: attn.out

            - func: attn.scaled(Tensor q, Tensor k, Tensor v, float s) -> Tensor
            """)
        self.assertEqual(changes.diff_ops(PRISTINE, patched), ["attn", "attn.out", "attn.scaled"])

    def test_changed_schema_of_existing_op_is_refused(self):
        patched = PRISTINE.replace("Scalar alpha=1", "Scalar alpha=2")
        with self.assertRaisesRegex(
            StackError, r"schema of the existing operator add\.Tensor.*" r"cannot be overlaid"
        ):
            changes.diff_ops(PRISTINE, patched)

    def test_changed_dispatch_of_existing_op_is_refused(self):
        patched = PRISTINE.replace("CPU: add_cpu", "CPU: add_cpu\n    CUDA: add_cuda")
        with self.assertRaisesRegex(
            StackError, r"changes the dispatch of the existing operator " r"add\.Tensor"
        ):
            changes.diff_ops(PRISTINE, patched)

    def test_removed_op_is_refused(self):
        patched = PRISTINE.split("- func: atleast_3d")[0]
        with self.assertRaisesRegex(StackError, "removes the existing operator atleast_3d"):
            changes.diff_ops(PRISTINE, patched)

    def test_duplicate_op_is_refused(self):
        patched = PRISTINE + "- func: atleast_3d(Tensor self) -> Tensor\n"
        with self.assertRaisesRegex(StackError, "atleast_3d is declared twice"):
            changes.diff_ops(PRISTINE, patched)

    def test_fields(self):
        fields = changes._fields(changes.yaml_entries(PRISTINE)["add.Tensor"])
        self.assertEqual(fields["variants"], "function, method")
        self.assertEqual(fields["dispatch"], "\nCPU: add_cpu")


DIFF = textwrap.dedent("""\
    diff --git a/f.cpp b/f.cpp
    index 1111111..2222222 100644
    --- a/f.cpp
    +++ b/f.cpp
    @@ -3,0 +4,2 @@ namespace at {
    +  OP_DECOMPOSE(attn);
    +  OP_DECOMPOSE(attn2);
    @@ -10 +12 @@ void f() {
    -  return 1;
    +  return 2;
    """)

SOURCE = textwrap.dedent("""\
    // a header comment with a { brace
    #include <ATen/Operators.h>
    #include <ATen/functorch/BatchRulesHelper.h>

    namespace at::functorch {
    using at::Tensor;
    #define OP_DECOMPOSE(op)  m.impl(#op, static_cast<decltype(&ATEN_FN(op))>(native::op));

    static int helper() { return 1; }

    TORCH_LIBRARY_IMPL(aten, FuncTorchBatchedDecomposition, m) {
      OP_DECOMPOSE(absolute);
      m.impl("x", "}");
    #ifdef FOO
      OP_DECOMPOSE(foo);
    #endif
    }

    int existing(int x) {
      return x + '{';
    }

    }  // namespace at::functorch
    """)


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def insert_after(text: str, needle: str, new: str) -> tuple[str, list[int]]:
    lines = text.splitlines()
    at = line_of(text, needle)
    added = new.splitlines()
    lines[at:at] = added
    return "\n".join(lines) + "\n", list(range(at + 1, at + 1 + len(added)))


class AddedLinesTest(unittest.TestCase):
    def test_parse_unified_diff(self):
        added, removed = changes.parse_unified_diff(DIFF)
        self.assertEqual(added, [4, 5, 12])
        self.assertEqual(removed, [(10, "  return 1;")])

    def test_line_in_registration_block(self):
        text, added = insert_after(SOURCE, "OP_DECOMPOSE(absolute);", "  OP_DECOMPOSE(attn);")
        tu = added_lines.added_lines_tu(text, added, "f.cpp")
        self.assertIn("#include <ATen/Operators.h>", tu)
        self.assertIn("#define OP_DECOMPOSE(op)", tu)
        self.assertIn("namespace at::functorch {\nusing at::Tensor;", tu)
        self.assertIn(
            "TORCH_LIBRARY_IMPL(aten, FuncTorchBatchedDecomposition, m) {\n"
            f'#line {added[0]} "f.cpp"\n  OP_DECOMPOSE(attn);\n}}',
            tu,
        )
        # nothing of the file's own code comes along: no re-registration, no duplicates
        self.assertNotIn("absolute", tu)
        self.assertNotIn("helper", tu)
        self.assertNotIn("existing", tu)
        self.assertEqual(tu.count("{"), tu.count("}"))

    def test_line_inside_ifdef_in_block_keeps_its_condition(self):
        text, added = insert_after(SOURCE, "OP_DECOMPOSE(foo);", "  OP_DECOMPOSE(bar);")
        tu = added_lines.added_lines_tu(text, added, "f.cpp")
        self.assertIn("#ifdef FOO\n", tu)
        self.assertLess(tu.index("#ifdef FOO"), tu.index("OP_DECOMPOSE(bar)"))
        self.assertLess(tu.index("OP_DECOMPOSE(bar)"), tu.index("#endif"))

    def test_new_function_at_namespace_scope(self):
        new = "int attn_helper(int x) {\n  if (x) { return 1; }\n  return 0;\n}"
        text, added = insert_after(SOURCE, "static int helper()", new)
        tu = added_lines.added_lines_tu(text, added, "f.cpp")
        self.assertIn("namespace at::functorch {\nusing at::Tensor;\n#line", tu)
        self.assertIn(new, tu)
        self.assertNotIn("TORCH_LIBRARY", tu)

    def test_run_that_starts_with_a_directive_keeps_its_lines(self):
        # an added `#if` opening a run must not drop the run's other lines
        new = "#if defined(CPU_CAPABILITY_AVX2)\nint attn_helper() { return 1; }\n#else\n#endif"
        text, added = insert_after(SOURCE, "static int helper()", new)
        tu = added_lines.added_lines_tu(text, added, "f.cpp")
        self.assertIn("int attn_helper() { return 1; }", tu)
        self.assertLess(tu.index("#if defined(CPU_CAPABILITY_AVX2)"), tu.index("attn_helper"))
        self.assertLess(tu.index("attn_helper"), tu.index("#else"))
        self.assertEqual(tu.count("{"), tu.count("}"))

    def test_added_code_sees_the_files_typedefs(self):
        # a batch rule returning the file's `twoOutputs` (BatchRulesLinearAlgebra.cpp)
        text, _ = insert_after(SOURCE, "using at::Tensor;", "typedef std::tuple<Tensor, int> two;")
        text, added = insert_after(text, "static int helper()", "two attn_rule(int x);")
        tu = added_lines.added_lines_tu(text, added, "f.cpp")
        self.assertLess(tu.index("typedef std::tuple<Tensor, int> two;"), tu.index("two attn_rule"))

    def test_git_may_shift_an_added_function(self):
        # "}\n+\n+int g() {\n+  return 2;\n+}" written by git as "+}\n+\n+int g() {\n+  return 2;\n }"
        text, _ = insert_after(
            SOURCE, "  return x + '{';\n}".splitlines()[0], "}\n\nint g() {\n  return 2;"
        )
        start = line_of(text, "return x + '{';") + 1
        tu = added_lines.added_lines_tu(text, list(range(start, start + 4)), "f.cpp")
        self.assertIn("int g() {\n  return 2;\n}", tu)
        self.assertEqual(tu.count("{"), tu.count("}"))

    def test_line_inside_existing_function_is_refused(self):
        text, added = insert_after(SOURCE, "return x + '{';", "  x += 1;")
        with self.assertRaisesRegex(
            StackError,
            rf"f\.cpp:{added[0]}: lines added inside an "
            r"existing function .*int existing\(int x\)",
        ):
            added_lines.added_lines_tu(text, added, "f.cpp")

    def test_torch_library_becomes_fragment(self):
        text = '#include <torch/library.h>\nTORCH_LIBRARY(myns, m) {\n  m.def("a() -> ()");\n}\n'
        text, added = insert_after(text, 'm.def("a', '  m.def("b() -> ()");')
        tu = added_lines.added_lines_tu(text, added, "f.cpp")
        self.assertIn("TORCH_LIBRARY_FRAGMENT(myns, m) {", tu)
        self.assertNotIn('"a() -> ()"', tu)

    def test_comment_only_additions_make_no_tu(self):
        text, added = insert_after(SOURCE, "OP_DECOMPOSE(absolute);", "  // just a note")
        self.assertEqual(added_lines.added_lines_tu(text, added, "f.cpp"), "")

    def test_unbalanced_file_is_refused(self):
        with self.assertRaisesRegex(StackError, "braces do not balance"):
            added_lines.scan("namespace a {\nint f() {\n", "f.cpp")


LIST_HEADER = textwrap.dedent("""\
    #pragma once
    #define KERNEL_CUDA(OP, POLICY) m.impl(#OP, POLICY);
    // the list: AT_FORALL_LOWER(_) in a comment is not a use
    #define AT_FORALL_LOWER(_) \\
      _(mm)                    \\
      _(conv2d, padding)       \\
      _(bmm)

    #define AT_FORALL_FP32(_) _(exp)
    """)

LIST_SOURCE = textwrap.dedent("""\
    #include "autocast_mode.h"

    namespace at::autocast {
    namespace {
    static int helper() { return 1; }

    TORCH_LIBRARY_IMPL(aten, Autocast, m) {
    #define _KERNEL_CUDA_LOW(...) \\
      KERNEL_CUDA(__VA_ARGS__, lower)

      AT_FORALL_LOWER(_KERNEL_CUDA_LOW)
      KERNEL_CUDA(cudnn_convolution, lower)
    #define _KERNEL_CUDA_FP32(...) KERNEL_CUDA(__VA_ARGS__, fp32)
      AT_FORALL_FP32(_KERNEL_CUDA_FP32)
    }

    TORCH_LIBRARY_IMPL(aten, AutocastCPU, m) {
      KERNEL_CUDA(mm, lower)
    }
    } // namespace
    } // namespace at::autocast
    """)


def with_attn(header: str) -> str:
    return header.replace(
        "  _(mm)                    \\\n",
        "  _(mm)                    \\\n  _(attn)                  \\\n",
    )


class MacroListTest(unittest.TestCase):
    def test_added_entry_is_found(self):
        self.assertEqual(
            changes.added_list_entries(LIST_HEADER, with_attn(LIST_HEADER), "a.h"),
            {"AT_FORALL_LOWER": ("_", ["_(attn)"])},
        )

    def test_realigned_backslashes_and_a_new_last_entry(self):
        # clang-format re-aligns every backslash for a longer entry; the old last line
        # gains one: only the new entry counts
        new = LIST_HEADER.replace("  _(bmm)\n", "  _(bmm) \\\n  _(scaled_dot_product_attention)\n")
        new = new.replace("                    \\", "                                  \\")
        self.assertEqual(
            changes.added_list_entries(LIST_HEADER, new, "a.h"),
            {"AT_FORALL_LOWER": ("_", ["_(scaled_dot_product_attention)"])},
        )

    def test_removed_or_changed_entry_is_refused(self):
        for new in (LIST_HEADER.replace("  _(bmm)", "  _(attn)"),
                    LIST_HEADER.replace("_(conv2d, padding)", "_(conv2d)        ")):  # fmt: skip
            with self.assertRaisesRegex(StackError, r"a\.h: the stack changes the existing "
                                        r"macro AT_FORALL_LOWER: it removes or changes"):  # fmt: skip
                changes.added_list_entries(LIST_HEADER, new, "a.h")

    def test_changed_macro_that_is_not_a_list_is_refused(self):
        new = LIST_HEADER.replace("m.impl(#OP, POLICY);", "m.impl(#OP, POLICY, 1);")
        with self.assertRaisesRegex(StackError, "changes the existing macro KERNEL_CUDA; only"):
            changes.added_list_entries(LIST_HEADER, new, "a.h")

    def test_expansion_redone_with_the_added_entries_only(self):
        lists = changes.added_list_entries(LIST_HEADER, with_attn(LIST_HEADER), "a.h")
        lines, inserts = added_lines.list_expansions(LIST_SOURCE, "f.cpp", lists)
        self.assertEqual(lines, [line_of(LIST_SOURCE, "AT_FORALL_LOWER(_KERNEL_CUDA_LOW)")])
        tu = added_lines.added_lines_tu(LIST_SOURCE, lines, "f.cpp", inserts)
        block = tu[tu.index("TORCH_LIBRARY_IMPL(aten, Autocast, m) {") :]
        helper = "#define _KERNEL_CUDA_LOW(...) \\\n  KERNEL_CUDA(__VA_ARGS__, lower)\n"
        redefine = "#undef AT_FORALL_LOWER\n#define AT_FORALL_LOWER(_) _(attn)\n"
        expansion = f'#line {lines[0]} "f.cpp"\n  AT_FORALL_LOWER(_KERNEL_CUDA_LOW)\n'
        self.assertLess(block.index(helper), block.index(redefine))
        self.assertLess(block.index(redefine), block.index(expansion))
        self.assertIn(expansion + '#pragma pop_macro("AT_FORALL_LOWER")\n}', block)
        # nothing else of the file: no re-registration of cudnn_convolution, fp32, CPU
        for other in ("cudnn_convolution", "FP32", "AutocastCPU", "helper()"):
            self.assertNotIn(other, tu)
        self.assertEqual(tu.count("{"), tu.count("}"))

    @unittest.skipUnless(shutil.which("c++"), "no C++ preprocessor")
    def test_preprocessed_tu_registers_the_added_entry_only(self):
        new_header = with_attn(LIST_HEADER)
        lists = changes.added_list_entries(LIST_HEADER, new_header, "a.h")
        # the stack also adds a block of its own that expands the list: the whole list there
        source, added = insert_after(LIST_SOURCE, "} // namespace at::autocast",
                                     "TORCH_LIBRARY_IMPL(aten, AutocastXPU, m) {\n"
                                     "  AT_FORALL_LOWER(KERNEL_NEW)\n}")  # fmt: skip
        lines, inserts = added_lines.list_expansions(source, "f.cpp", lists, skip=added)
        tu = added_lines.added_lines_tu(source, sorted(lines + added), "f.cpp", inserts)
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "autocast_mode.h").write_text(new_header)
            Path(tmp, "tu.cpp").write_text(tu)
            out = subprocess.run(["c++", "-E", "-P", "-I", tmp, str(Path(tmp, "tu.cpp"))],
                                 capture_output=True, text=True, check=True).stdout  # fmt: skip
        code = " ".join(out.split())
        self.assertIn('TORCH_LIBRARY_IMPL(aten, Autocast, m) { m.impl("attn", lower); }', code)
        self.assertIn("TORCH_LIBRARY_IMPL(aten, AutocastXPU, m) { KERNEL_NEW(mm) "
                      "KERNEL_NEW(attn) KERNEL_NEW(conv2d, padding) KERNEL_NEW(bmm) }", code)  # fmt: skip
        self.assertEqual(code.count("m.impl("), 1)

    def test_expansion_outside_a_registration_block_is_refused(self):
        source = LIST_SOURCE.replace("static int helper() { return 1; }",
                                     "static void helper() {\n  AT_FORALL_LOWER(F)\n}")  # fmt: skip
        lists = {"AT_FORALL_LOWER": ("_", ["_(attn)"])}
        with self.assertRaisesRegex(
            StackError,
            r"f\.cpp:6: AT_FORALL_LOWER, to which the stack adds entries, is "
            r"expanded outside a registration block \(in 'static void helper\(\)'\)",
        ):
            added_lines.list_expansions(source, "f.cpp", lists)

    def test_expansion_in_a_directive_is_refused(self):
        source = LIST_SOURCE.replace(
            "static int helper()", "#define ALL AT_FORALL_LOWER(F)\nint h()"
        )
        with self.assertRaisesRegex(StackError, r"f\.cpp:5: .* used in a preprocessor directive"):
            added_lines.list_expansions(source, "f.cpp", {"AT_FORALL_LOWER": ("_", ["_(a)"])})


def git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(
        ["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True, env=env
    ).stdout


class GitTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.fork = Path(self.tmp.name)
        git(self.fork, "init", "-q")
        (self.fork / "a.cpp").write_text(SOURCE)
        (self.fork / "gone.cpp").write_text("int x;\n")
        git(self.fork, "add", "-A")
        git(self.fork, "commit", "-qm", "pristine")
        git(self.fork, "tag", "attn/0")

    def tearDown(self):
        self.tmp.cleanup()

    def test_changed_files_include_uncommitted_and_untracked(self):
        text, _ = insert_after(SOURCE, "OP_DECOMPOSE(absolute);", "  OP_DECOMPOSE(attn);")
        (self.fork / "a.cpp").write_text(text)
        (self.fork / "gone.cpp").unlink()
        (self.fork / "New.cpp").write_text("int y;\n")
        self.assertEqual(
            changes.changed_files(self.fork, "attn/0"),
            {"a.cpp": "M", "gone.cpp": "D", "New.cpp": "A"},
        )
        self.assertEqual(
            changes.added_lines(self.fork, "attn/0", "a.cpp"),
            [line_of(text, "OP_DECOMPOSE(attn)")],
        )

    def test_changed_upstream_line_is_refused(self):
        (self.fork / "a.cpp").write_text(SOURCE.replace("x + '{'", "x + 1"))
        with self.assertRaisesRegex(
            StackError, r"a\.cpp:\d+ \(in attn/0\): the stack changes " "or removes upstream code"
        ):
            changes.added_lines(self.fork, "attn/0", "a.cpp")

    def test_header_list_entry_is_expanded_where_upstream_sources_expand_the_list(self):
        # the .cpp is not changed by the stack: only the header is
        header, source = "aten/src/ATen/autocast_mode.h", "aten/src/ATen/autocast_mode.cpp"
        (self.fork / "aten/src/ATen").mkdir(parents=True)
        (self.fork / header).write_text(LIST_HEADER)
        (self.fork / source).write_text(LIST_SOURCE)
        (self.fork / "aten/src/ATen/cuda").mkdir()
        (self.fork / "aten/src/ATen/cuda/Gpu.cu").write_text("// uses AT_FORALL_LOWER(x)\n")
        git(self.fork, "add", "-A")
        git(self.fork, "commit", "-qm", "lists")
        git(self.fork, "tag", "-f", "attn/0")
        (self.fork / header).write_text(with_attn(LIST_HEADER))
        changed = changes.changed_files(self.fork, "attn/0")
        lists = changes.list_additions(self.fork, "attn/0", changed)
        self.assertEqual(lists, {"AT_FORALL_LOWER": (header, "_", ["_(attn)"])})
        new_files, tus, gpu = generate.stack_sources(self.fork, "attn/0", changed, lists)
        self.assertEqual((new_files, list(tus), gpu), ([], [source], []))  # .cu: a comment
        self.assertIn("#define AT_FORALL_LOWER(_) _(attn)\n", tus[source])
        (self.fork / "aten/src/ATen/cuda/Gpu.cu").write_text("AT_FORALL_LOWER(x)\n")
        gpu = generate.stack_sources(self.fork, "attn/0", changed, lists)[2]
        self.assertEqual(gpu, ["aten/src/ATen/cuda/Gpu.cu (expands AT_FORALL_LOWER)"])
        (self.fork / "aten/src/ATen/Other.h").write_text("#define ALL(_) AT_FORALL_LOWER(_)\n")
        git(self.fork, "add", "-A")
        with self.assertRaisesRegex(StackError, r"Other\.h: uses AT_FORALL_LOWER, to which"):
            generate.stack_sources(self.fork, "attn/0", changed, lists)

    def test_new_ops_reads_base_and_working_tree(self):
        nf = self.fork / changes.NATIVE_YAML
        nf.parent.mkdir(parents=True)
        nf.write_text(PRISTINE)
        git(self.fork, "add", "-A")
        git(self.fork, "commit", "-qm", "yaml")
        git(self.fork, "tag", "-f", "attn/0")
        nf.write_text(PRISTINE + "- func: attn(Tensor q, Tensor k, Tensor v) -> Tensor\n")
        self.assertEqual(overlay.new_ops(self.fork), ["attn"])


class FilesTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = Path(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def test_write_if_changed_never_writes_through_a_hardlink(self):
        cache = self.root / "cache.h"
        cache.write_text("wheel")
        tree = self.root / "tree.h"
        os.link(cache, tree)
        self.assertFalse(generate.write_if_changed(tree, "wheel"))
        self.assertTrue(generate.write_if_changed(tree, "patched"))
        self.assertEqual(cache.read_text(), "wheel")
        self.assertEqual(tree.read_text(), "patched")

    def test_headers_refresh_and_restore_keep_the_wheel_copy(self):
        fork, build = self.root / "fork", self.root / "build"
        include = fork / "torch" / "include" / "ATen"
        include.mkdir(parents=True)
        cache = self.root / "Functions.h"
        cache.write_text("wheel")
        os.link(cache, include / "Functions.h")
        headers = generate.Headers(fork, build)
        headers.refresh({"ATen/Functions.h": b"new", "ATen/ops/attn.h": b"op"})
        self.assertEqual((include / "Functions.h").read_text(), "new")
        self.assertEqual((include / "ops/attn.h").read_text(), "op")
        self.assertEqual(cache.read_text(), "wheel")
        again = generate.Headers(fork, build)  # state survives across builds
        self.assertEqual(again.wheel_bytes("ATen/Functions.h"), b"wheel")
        self.assertIsNone(again.wheel_bytes("ATen/ops/attn.h"))
        again.refresh({})
        self.assertEqual((include / "Functions.h").read_text(), "wheel")
        self.assertTrue(os.path.samefile(include / "Functions.h", cache))
        self.assertFalse((include / "ops/attn.h").exists())


class SupportSourcesTest(unittest.TestCase):
    def test_chosen_by_directory_and_refused_with_registrations(self):
        with tempfile.TemporaryDirectory() as tmp:
            fork = Path(tmp)
            for rel in compile.SUPPORT_SOURCES["aten/src/ATen/functorch/"]:
                (fork / rel).parent.mkdir(parents=True, exist_ok=True)
                (fork / rel).write_text("namespace at::functorch { int helper() { return 1; } }\n")
            self.assertEqual(compile._support_sources(fork, ["aten/src/ATen/native/Attn.cpp"]), [])
            added = ["aten/src/ATen/functorch/BatchRulesLinearAlgebra.cpp"]
            self.assertEqual(len(compile._support_sources(fork, added)), 2)
            rel = compile.SUPPORT_SOURCES["aten/src/ATen/functorch/"][0]
            (fork / rel).write_text("TORCH_LIBRARY_IMPL(aten, FuncTorchBatched, m) {}\n")
            with self.assertRaisesRegex(StackError, "now holds registrations"):
                compile._support_sources(fork, added)

    def test_compiled_against_the_wheel_headers_alone(self):
        """Each level generates other headers: the helpers see none of them, so that one
        object (one command, one set of headers) serves every level's build from ccache."""
        with tempfile.TemporaryDirectory() as tmp:
            fork, wheel = Path(tmp, "pytorch"), Path(tmp, "wheel/torch/include")
            helper = fork / compile.SUPPORT_SOURCES["aten/src/ATen/functorch/"][0]
            kernel = fork / "aten/src/ATen/native/Attn.cpp"
            text = compile._ninja_file(fork, Path(tmp, "build"), "/py", Path("/venv/include"),
                                       ".so", [(kernel, "Attn", "")], [], [helper],
                                       wheel_include=wheel)  # fmt: skip
        edges = text.split("\nbuild ")
        support = next(edge for edge in edges if edge.startswith("obj/support/"))
        core = next(edge for edge in edges if edge.startswith("obj/core/"))
        self.assertIn(f"  includes = -I{wheel} -I{wheel}/torch/csrc/api/include -I/py", support)
        self.assertNotIn("includes", core)  # the build's: the overlay's headers first
        self.assertIn("includes = -Iinclude -Ifork/torch/include", text)


class PackageSourcesTest(unittest.TestCase):
    def test_cpublas_shim_only_where_the_stack_calls_gemm(self):
        with tempfile.TemporaryDirectory() as tmp:
            cg, kernel = Path(tmp, "codegen"), Path(tmp, "AttnKernel.cpp")
            for name in ("aten/OperatorsEverything.cpp", "aten/CompositeViewCopyKernels.cpp",
                         *(f"autograd/{n}.cpp" for n in (
                             "VariableTypeEverything", "TraceTypeEverything",
                             "ADInplaceOrViewTypeEverything", "Functions", "ViewFuncs",
                             "python_torch_functionsEverything", "python_functionsEverything",
                             "python_return_types"))):  # fmt: skip
                (cg / "new" / name).parent.mkdir(parents=True, exist_ok=True)
                (cg / "new" / name).write_text("")  # no generated code for the new ops
            kernel.write_text("void f() { cpublas::gemm(TT::Transpose, x); }\n")
            self.assertIn("overlay_cpublas.cpp", generate.sources(cg, ["attn"], {}, [kernel]))
            added = {"torch/csrc/autograd/FunctionsManual.cpp": "int g() { return 1; }\n"}
            texts = generate.sources(cg, ["attn"], added, [])
            self.assertNotIn("overlay_cpublas.cpp", texts)
            self.assertIn("overlay_dispatch_refresh.cpp", texts)


def with_loader(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`code` run by a fresh Python without site-packages that has imported loader.py as l."""
    prefix = (f"import sys; sys.path.insert(0, {str(Path(loader.__file__).parent)!r}); "
              "import loader as l; ")  # fmt: skip
    return subprocess.run([sys.executable, "-S", "-c", prefix + code], capture_output=True,
                          text=True, check=True, env={**os.environ, **(env or {})})  # fmt: skip


class LoaderTest(unittest.TestCase):
    def test_install_loader_writes_pth_and_module(self):
        with tempfile.TemporaryDirectory() as tmp:
            site, build, fork = Path(tmp, "site"), Path(tmp, "build"), Path(tmp, "pytorch")
            overlay.install_loader(site, build, fork)
            pth = (site / "_stack_overlay.pth").read_text()
            args = f"{str(build.resolve())!r}, {str(fork.resolve())!r}"
            self.assertEqual(pth, f"import _stack_overlay; _stack_overlay.activate({args})\n")
            self.assertEqual(
                (site / "_stack_overlay.py").read_text(), Path(loader.__file__).read_text()
            )

    def test_stale_overlay_is_named_with_both_commits(self):
        with tempfile.TemporaryDirectory() as tmp:
            fork = Path(tmp)
            subprocess.run(["git", "init", "-q", "-b", "stack", str(fork)], check=True)
            ident = ["-c", "user.name=t", "-c", "user.email=t@x.invalid"]
            for n in (1, 2):
                subprocess.run(["git", "-C", tmp, *ident, "commit", "-q", "--allow-empty",
                                "-m", str(n)], check=True)  # fmt: skip
            first, second = (
                subprocess.run(["git", "-C", tmp, "rev-parse", rev], capture_output=True,
                               text=True, check=True).stdout.strip()
                for rev in ("HEAD~1", "HEAD")
            )  # fmt: skip
            manifest = {"fork": tmp, "build": "/b", "commit": second}
            self.assertIsNone(loader.stale_message(manifest))
            manifest["commit"] = first
            message = loader.stale_message(manifest)
            self.assertIn(f"at {first[:12]}, but its HEAD is now {second[:12]}", message)
            self.assertIn("./stack build", message)
            # packed refs and a detached HEAD are read too
            subprocess.run(["git", "-C", tmp, "pack-refs", "--all"], check=True)
            self.assertEqual(loader.fork_head(tmp), second)
            subprocess.run(["git", "-C", tmp, "checkout", "-q", "--detach", first], check=True)
            self.assertIsNone(loader.stale_message(manifest))
            # a worktree (the gate's): .git is a file; its HEAD, detached or on a branch
            tree = str(Path(tmp, "tree"))
            subprocess.run(["git", "-C", tmp, "worktree", "add", "-q", "--detach", tree, second],
                           check=True)  # fmt: skip
            self.assertEqual(loader.fork_head(tree), second)
            subprocess.run(["git", "-C", tree, "checkout", "-q", "-b", "other", first], check=True)
            self.assertEqual(loader.fork_head(tree), first)
            self.assertEqual(loader.fork_head(tmp), first)  # tmp's own detached HEAD

    def test_activate_is_a_silent_no_op_without_a_built_overlay(self):
        with tempfile.TemporaryDirectory() as tmp:
            before = list(sys.meta_path)
            loader.activate(tmp)
            Path(tmp, loader.MANIFEST).write_text(json.dumps({"core": ""}))
            loader.activate(tmp)
            self.assertEqual(sys.meta_path, before)

    def test_the_forks_torch_says_when_no_overlay_was_ever_built(self):
        # an interrupted first build: the patched torch would fail on a missing op, unexplained
        with tempfile.TemporaryDirectory() as tmp:
            fork, build = Path(tmp, "pytorch"), Path(tmp, "build")
            (fork / "torch").mkdir(parents=True)
            (fork / "torch" / "__init__.py").write_text("")
            (fork / "torch" / "_C.py").write_text("")
            code = (
                f"l.activate({str(build)!r}, {str(fork)!r}); "
                f"sys.path.insert(0, {str(fork)!r}); import fractions, torch._C"
            )
            for env, said in (({}, True), ({loader.ENV: str(build)}, False)):
                out = with_loader(code, env)
                self.assertEqual("holds no built overlay" in out.stderr, said, out.stderr)
                if said:
                    self.assertIn(f"for {fork} (an interrupted", out.stderr)
                    self.assertIn("run ./stack build", out.stderr)

    def test_activate_loads_the_build_the_environment_names(self):
        with tempfile.TemporaryDirectory() as tmp:
            other = Path(tmp, "gate")
            other.mkdir()
            manifest = {"core": "x.so", "bindings": "y.so", "ops": ["attn"], "fork": tmp}
            Path(other, loader.MANIFEST).write_text(json.dumps(manifest))
            code = (
                f"l.activate({tmp!r}); "
                "print(getattr(sys.meta_path[0], 'manifest', {}).get('build'))"
            )
            # tmp holds no manifest: no finder; with the variable set, gate's is loaded
            for env, expected in (({}, "None"), ({loader.ENV: str(other)}, str(other))):
                self.assertEqual(with_loader(code, env).stdout.strip(), expected)

    def test_activate_installs_a_finder_that_leaves_other_modules_alone(self):
        with tempfile.TemporaryDirectory() as tmp:
            manifest = {"core": "x.so", "bindings": "y.so", "ops": ["attn"], "fork": tmp}
            Path(tmp, loader.MANIFEST).write_text(json.dumps(manifest))
            code = f"l.activate({tmp!r}); import fractions; print(type(sys.meta_path[0]).__name__)"
            self.assertEqual(with_loader(code).stdout.strip(), "_StackOverlayFinder")


KERNELS = textwrap.dedent("""\
    #include <ATen/native/UnaryOps.h>
    namespace at::native {
    inline namespace CPU_CAPABILITY {
    #define IMPLEMENT_KERNEL(op) \\
      inline namespace CPU_CAPABILITY { \\
      static void op##_kernel(TensorIteratorBase& iter) {} \\
      } \\
      ALSO_REGISTER_AVX512_DISPATCH(op##_stub, &CPU_CAPABILITY::op##_kernel)
    static void sin_kernel(TensorIteratorBase& iter) {
      sin_impl(iter);
    }
    } // namespace CPU_CAPABILITY
    REGISTER_DISPATCH(sin_stub, &CPU_CAPABILITY::sin_kernel)
    IMPLEMENT_KERNEL(tanh)
    IMPLEMENT_KERNEL(cos)
    } // namespace at::native
    """)
NEW_TANH = textwrap.dedent("""\
    inline namespace CPU_CAPABILITY {
    static void tanh_kernel(TensorIteratorBase& iter) {
      new_tanh(iter);
    }
    } // namespace CPU_CAPABILITY
    ALSO_REGISTER_AVX512_DISPATCH(tanh_stub, &CPU_CAPABILITY::tanh_kernel)
    """)


class PythonFunctionsTest(unittest.TestCase):
    def test_only_bound_ops_are_torch_functions(self):
        # what the import check expects on torch: torchgen binds no *_backward op
        with tempfile.TemporaryDirectory() as tmp:
            source = Path(tmp) / "src" / "bindings" / "python_torch_functionsEverything.cpp"
            source.parent.mkdir(parents=True)
            source.write_text(
                "static PyMethodDef torch_functions_shard[] = {\n"
                '  {"attn", castPyCFunctionWithKeywords(THPVariable_attn), METH_VARARGS, nullptr},\n'
                "};\n"
                'm.impl("_attn_backward", ...);\n'
            )
            self.assertEqual(load.python_functions(Path(tmp)), {"attn"})


class CpuKernelTest(unittest.TestCase):
    """A stack that replaces a DispatchStub's kernel in aten/src/ATen/native/cpu."""

    PATH = "aten/src/ATen/native/cpu/UnaryOpsKernel.cpp"

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.fork = Path(self.tmp.name)
        git(self.fork, "init", "-q")
        (self.fork / self.PATH).parent.mkdir(parents=True)
        (self.fork / self.PATH).write_text(KERNELS)
        git(self.fork, "add", "-A")
        git(self.fork, "commit", "-qm", "pristine")
        git(self.fork, "tag", "attn/0")

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, text: str) -> None:
        (self.fork / self.PATH).write_text(text)

    def test_stubs_registered_directly_and_through_the_files_macros(self):
        macros = changes.macro_definitions(KERNELS)
        self.assertEqual(changes.registered_stubs("IMPLEMENT_KERNEL(tanh)", macros), {"tanh_stub"})
        line = "REGISTER_DISPATCH(sin_stub, &CPU_CAPABILITY::sin_kernel)"
        self.assertEqual(changes.registered_stubs(line, macros), {"sin_stub"})
        self.assertEqual(changes.registered_stubs("sin_impl(iter);", macros), set())

    def test_replaced_kernel_is_repointed_and_compiled_per_capability(self):
        self.write(KERNELS.replace("IMPLEMENT_KERNEL(tanh)\n", NEW_TANH))
        added = changes.added_lines(self.fork, "attn/0", self.PATH)  # the removal is allowed
        text = (self.fork / self.PATH).read_text()
        self.assertEqual(changes.repointed_stubs(text, added), {"tanh_stub"})
        _, tus, _ = generate.stack_sources(self.fork, "attn/0", {self.PATH: "M"}, {})
        tu = tus[self.PATH]
        self.assertTrue(tu.startswith(generate.REPOINT))  # registrations assign, not define
        self.assertIn("new_tanh(iter);", tu)
        self.assertIn("ALSO_REGISTER_AVX512_DISPATCH(tanh_stub", tu)
        self.assertNotIn("sin_stub", tu)  # only what the stack changed
        self.assertNotIn("IMPLEMENT_KERNEL(cos)", tu)
        # preprocessed, a registration assigns the wheel's per-capability pointer instead of
        # defining it (the header's own macro stands in for DispatchStub.h's)
        header = ("#define C10_CONCATENATE_IMPL(a, b) a##b\n"
                  "#define C10_CONCATENATE(a, b) C10_CONCATENATE_IMPL(a, b)\n"
                  "#define REGISTER_ARCH_DISPATCH(name, arch, fn) DEFINES name arch fn;\n")  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "ATen/native").mkdir(parents=True)
            Path(tmp, "ATen/native/DispatchStub.h").write_text(header)
            Path(tmp, "tu.cpp").write_text(
                generate.REPOINT + "REGISTER_ARCH_DISPATCH(tanh_stub, AVX2, &new_tanh)\n"
            )
            out = subprocess.run(["c++", "-E", "-P", "-I", tmp, str(Path(tmp, "tu.cpp"))],
                                 capture_output=True, text=True, check=True).stdout  # fmt: skip
        code = " ".join(out.split())
        self.assertIn("static const bool stack_overlay_repoint_tanh_stub = "
                      "(tanh_stub_DECLARE_DISPATCH_type::AVX2 = (&new_tanh), true);", code)  # fmt: skip
        self.assertNotIn("DEFINES", code)

    def test_changed_kernel_body_is_refused(self):
        self.write(KERNELS.replace("sin_impl(iter);", "other_sin(iter);"))
        with self.assertRaisesRegex(StackError, r"changes or removes upstream code"):
            changes.added_lines(self.fork, "attn/0", self.PATH)

    def test_removed_registration_not_registered_again_is_refused(self):
        self.write(KERNELS.replace("IMPLEMENT_KERNEL(tanh)\n", ""))
        with self.assertRaisesRegex(StackError, r"IMPLEMENT_KERNEL\(tanh\)"):
            changes.added_lines(self.fork, "attn/0", self.PATH)

    def test_registration_elsewhere_is_not_a_replacement(self):
        other = "aten/src/ATen/native/Other.cpp"  # not a CPU kernel file
        (self.fork / other).write_text(KERNELS)
        git(self.fork, "add", "-A")
        git(self.fork, "commit", "-qm", "other")
        git(self.fork, "tag", "-f", "attn/0")
        (self.fork / other).write_text(KERNELS.replace("IMPLEMENT_KERNEL(tanh)\n", NEW_TANH))
        with self.assertRaisesRegex(StackError, r"changes or removes upstream code"):
            changes.added_lines(self.fork, "attn/0", other)

    def test_ninja_compiles_the_kernel_tu_once_per_capability_at_O3(self):
        name = "added/" + self.PATH.replace("/", "__")
        build = self.fork / "build"
        (build / "src" / "added").mkdir(parents=True)
        captured = {}

        def ninja_file(*args):
            captured["core"] = args[5]
            return ""

        with (
            unittest.mock.patch.object(compile, "_ninja_file", ninja_file),
            unittest.mock.patch.object(compile, "_python_info",
                                       lambda p: {"include": "", "ext_suffix": ".so"}),
            unittest.mock.patch.object(compile, "_ninja", lambda p: "true"),
            unittest.mock.patch.object(compile, "_support_sources", lambda f, o: []),
        ):  # fmt: skip
            compile.compile_libraries(self.fork, Path("/venv/bin/python"), build, [], [name],
                                      [self.PATH], 1)  # fmt: skip
        flags = {stem.rsplit(".", 1)[1]: extra for _, stem, extra in captured["core"]}
        self.assertEqual(set(flags), {"DEFAULT", "AVX2", "AVX512"})
        self.assertIn("-DCPU_CAPABILITY=AVX2 -DCPU_CAPABILITY_AVX2 -O3 -mavx2 -mfma", flags["AVX2"])
        self.assertIn("-DCPU_CAPABILITY=DEFAULT -DCPU_CAPABILITY_DEFAULT -O3", flags["DEFAULT"])


class CodegenSeedTest(unittest.TestCase):
    """A build takes another build's codegen output made from the same inputs (PR 5's gate
    level takes PR 4's or setup's: PR 5 changes no yaml) instead of running the generators."""

    def test_a_seed_with_the_same_digest_is_copied(self):
        tmp = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, tmp)
        fork, ops = tmp / "pytorch", ["attn"]
        (fork / "aten/src/ATen/native").mkdir(parents=True)
        (fork / changes.NATIVE_YAML).write_text("- func: attn\n")
        other, seed = tmp / "level-3" / "codegen", tmp / "overlay" / "codegen"
        for folder, key in ((other, "another digest"), (seed, generate.codegen_key(fork, ops))):
            (folder / "full").mkdir(parents=True)
            (folder / "full" / "x.h").write_text(str(folder))
            (folder / "stamp").write_text(key)
        cg, ran = tmp / "level-5" / "codegen", []
        with (
            unittest.mock.patch.object(generate, "_run_parallel", lambda *a: ran.append(a)),
            contextlib.redirect_stdout(io.StringIO()),
        ):
            self.assertFalse(generate.codegen(fork, Path("python"), cg, ops, [other, seed]))
            self.assertEqual((cg / "full" / "x.h").read_text(), str(seed))
            self.assertEqual((cg / "stamp").read_text(), (seed / "stamp").read_text())
            self.assertEqual(ran, [])
            (fork / changes.NATIVE_YAML).write_text("- func: attn2\n")  # another yaml: runs
            self.assertTrue(generate.codegen(fork, Path("python"), cg, ops, [other, seed]))
        self.assertEqual(len(ran), 1)


class CodegenNeededTest(unittest.TestCase):
    """A checkout that adds no op and changes nothing the generators read (PRs 1 and 2) runs
    no codegen: its generated Python files are the wheel's own, put back in the tree."""

    def test_only_new_ops_or_changed_generator_inputs_need_the_codegen(self):
        docs_and_test = {"attn_gradient.md": "A", "test/test_attn_gradcheck.py": "A"}
        self.assertFalse(overlay.codegen_needed([], docs_and_test))
        self.assertTrue(overlay.codegen_needed(["attn"], docs_and_test))
        for read in (changes.NATIVE_YAML, "tools/autograd/derivatives.yaml",
                     "torch/_torch_docs.py", "tools/pyi/gen_pyi.py"):  # fmt: skip
            self.assertTrue(overlay.codegen_needed([], {**docs_and_test, read: "M"}), read)

    def test_the_wheels_generated_python_files_are_put_back(self):
        tmp = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, tmp)
        fork, wheel = tmp / "pytorch", tmp / "wheel"
        for rel in load.python_outputs():
            for root, text in ((wheel, "v2.6.0"), (fork, "v2.6.0")):
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_text(f"{text} {rel}\n")
        stub = fork / "torch/_C/_VariableFunctions.pyi"
        stub.write_text("def attn(): ...\n")  # refreshed by a build at a later commit
        self.assertEqual(load.restore_wheel_python_files(fork, wheel), 1)
        self.assertEqual(stub.read_text(), "v2.6.0 torch/_C/_VariableFunctions.pyi\n")
        self.assertEqual(load.restore_wheel_python_files(fork, wheel), 0)

    def test_a_build_whose_stubs_are_not_the_listed_ones_is_refused(self):
        """gen_pyi's output is checked against GENERATED_STUBS, the list the lint tree copies
        and a build without codegen restores, at every build that refreshes the tree."""
        tmp = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, tmp)
        fork, build_dir, cg = tmp / "pytorch", tmp / "build", tmp / "build" / "codegen"
        fork.mkdir()
        (cg / "full/gen" / load.ANNOTATED_FN_ARGS).parent.mkdir(parents=True)
        (cg / "full/gen" / load.ANNOTATED_FN_ARGS).write_text("args\n")
        (cg / "stamp").write_text("codegen")
        (build_dir / "pyi").mkdir()
        key = "codegen" + generate.digest(fork, list(load.PYI_INPUTS))
        (build_dir / "pyi" / "stamp").write_text(key)  # gen_pyi's output current: not run
        out = build_dir / "pyi" / "out"
        for rel in load.GENERATED_STUBS:
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_text(rel)
        self.assertEqual(load.refresh_tree(fork, Path("python"), build_dir, cg), 7)
        (out / "torch/extra.pyi").write_text("")
        with self.assertRaisesRegex(StackError, "torch/extra.pyi"):
            load.refresh_tree(fork, Path("python"), build_dir, cg)


class NinjaProgressTest(unittest.TestCase):
    """The build names each translation unit as it finishes, counted against the run's total."""

    def fake_ninja(self, status: int) -> tuple[str, Path]:
        tmp = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, tmp)
        script = tmp / "ninja"
        script.write_text(
            "#!/bin/sh\n"
            'case "$*" in *-n*) printf "[1/3] CXX /f/a.cpp\\n[2/3] CXX /f/b.cpp\\n"; exit 0;; esac\n'
            'echo "[1/3] CXX /f/a.cpp"; echo "[2/3] CXX /f/b.cpp"\n'
            f'[ {status} = 0 ] || printf "FAILED: [code=1] b.o\\nb.cpp:1: error\\n"\n'
            f"exit {status}\n"
        )
        script.chmod(0o755)
        return str(script), tmp

    def test_each_finished_tu_is_a_line(self):
        script, tmp = self.fake_ninja(0)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(compile.ninja(script, tmp, 2), 2)
        self.assertEqual(
            out.getvalue().splitlines(),
            ["overlay build: compiled 1/2 TUs: a.cpp", "overlay build: compiled 2/2 TUs: b.cpp"],
        )

    def test_a_line_as_each_finishes_not_at_the_end(self):
        script, tmp = self.fake_ninja(0)
        Path(script).write_text(Path(script).read_text().replace("exit 0\n", "sleep 1; exit 0\n"))
        printed = []
        with unittest.mock.patch(
            "builtins.print", lambda *a, **k: printed.append(time.monotonic())
        ):
            compile.ninja(script, tmp, 2)
            returned = time.monotonic()
        self.assertLess(printed[0], returned - 0.5)  # a.cpp's line before ninja's last second

    def test_a_failed_compile_shows_the_compiler_output(self):
        script, tmp = self.fake_ninja(1)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            with self.assertRaisesRegex(StackError, "overlay compile failed(.|\n)*b.cpp:1: error"):
                compile.ninja(script, tmp, 2)
        self.assertEqual(
            out.getvalue().splitlines(),
            ["overlay build: compiled 1/2 TUs: a.cpp", "overlay build: FAILED to compile b.cpp"],
        )


if __name__ == "__main__":
    unittest.main()
