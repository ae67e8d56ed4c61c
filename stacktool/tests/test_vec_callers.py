"""The upstream kernel files the overlay compiles again for a changed at::vec function."""

import json
import tempfile
import unittest
from pathlib import Path

from stacktool.config import Layout
from stacktool.errors import StackError
from stacktool.overlay import changes, compile, vec_callers
from stacktool.tests.test_overlay import git

FLOAT_H = """\
namespace at::vec {
template <> class Vectorized<float> {
public:
  Vectorized() {}
  // the tanh of each lane
  Vectorized<float> tanh() const {
    const auto row = [&](int r) {
      return r;
    };
    for (int r = 6; r >= 3; --r) {
      row(r);
    }
    return Sleef_tanhf8_u10(values);
  }
  Vectorized<float> exp() const {
    return Sleef_expf8_u10(values);
  }
};
} // namespace at::vec
"""
ACTIVATION = """\
namespace {
static void gelu_kernel() {
  x.tanh();
}
static void elu_kernel() {
  x.relu();
}
} // namespace
ALSO_REGISTER_AVX512_DISPATCH(GeluKernel, &gelu_kernel)
REGISTER_DISPATCH(elu_stub, &elu_kernel)
"""
QUANTIZED = (
    "static void qtanh_kernel() { x.tanh(); }\nREGISTER_DISPATCH(qtanh_stub, &qtanh_kernel)\n"
)
VEC256 = "aten/src/ATen/cpu/vec/vec256/vec256_float.h"
VEC512 = "aten/src/ATen/cpu/vec/vec512/vec512_float.h"
ACTIVATION_CPP = "aten/src/ATen/native/cpu/Activation.cpp"


class EnclosingFunctionsTest(unittest.TestCase):
    def test_each_line_maps_to_its_outermost_function(self):
        names = vec_callers.enclosing_functions(FLOAT_H)
        line = {text.strip(): names[k] for k, text in enumerate(FLOAT_H.splitlines())}
        self.assertEqual(line["Vectorized<float> tanh() const {"], "tanh")
        self.assertEqual(line["return r;"], "tanh")  # in a lambda inside tanh
        self.assertEqual(line["row(r);"], "tanh")  # in a for loop inside tanh
        self.assertEqual(line["return Sleef_expf8_u10(values);"], "exp")
        self.assertIsNone(line["// the tanh of each lane"])  # a comment outside any body
        self.assertIsNone(line["public:"])
        self.assertIsNone(line["} // namespace at::vec"])


class SourcesTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.fork = Path(self.tmp.name)
        files = {VEC256: FLOAT_H, VEC512: FLOAT_H, ACTIVATION_CPP: ACTIVATION,
                 vec_callers.QUANTIZED_KERNELS: QUANTIZED}  # fmt: skip
        for path, text in files.items():
            (self.fork / path).parent.mkdir(parents=True, exist_ok=True)
            (self.fork / path).write_text(text)
        git(self.fork, "init", "-q")
        git(self.fork, "add", "-A")
        git(self.fork, "commit", "-qm", "pristine")

    def tearDown(self):
        self.tmp.cleanup()

    def edit(self, path: str, old: str, new: str) -> dict[str, str]:
        (self.fork / path).write_text((self.fork / path).read_text().replace(old, new))
        return changes.changed_files(self.fork, "HEAD")

    def test_a_changed_function_recompiles_its_callers_at_its_capability(self):
        changed = self.edit(VEC256, "Sleef_tanhf8_u10(values)", "kernel(values)")
        self.assertEqual(vec_callers.changed_functions(self.fork, "HEAD", changed),
                         {"AVX2": {"tanh"}})  # fmt: skip
        texts = vec_callers.sources(self.fork, "HEAD", changed)
        self.assertEqual(sorted(vec_callers.short_names(texts)),
                         ["Activation.AVX2", "QuantizedOpKernels.AVX2"])  # fmt: skip
        for name in texts:
            self.assertEqual(vec_callers.capability(name), "AVX2")
        text = texts[vec_callers.PREFIX + "aten__src__ATen__native__cpu__Activation.AVX2.cpp"]
        self.assertTrue(text.endswith(f'#line 1 "{ACTIVATION_CPP}"\n' + ACTIVATION))
        # only the callers' stubs are re-pointed: elu_stub keeps the wheel's kernel
        self.assertIn('return stub == "GeluBackwardKernel" || stub == "GeluKernel" || '
                      'stub == "mish_backward_stub" || stub == "mish_stub";', text)  # fmt: skip
        self.assertNotIn('elu_stub"', text)

    def test_at_avx512_only_files_that_register_an_avx512_kernel(self):
        changed = self.edit(VEC512, "Sleef_tanhf8_u10(values)", "kernel(values)")
        texts = vec_callers.sources(self.fork, "HEAD", changed)
        # qtanh_stub's REGISTER_DISPATCH leaves AVX512 null: AVX-512 CPUs run its AVX2 kernel
        self.assertEqual(vec_callers.short_names(texts), ["Activation.AVX512"])

    def test_a_function_without_callers_and_comments_recompile_nothing(self):
        changed = self.edit(VEC256, "Sleef_expf8_u10(values)", "kernel(values)")
        changed = self.edit(VEC256, "// the tanh of each lane", "// tanh, lane by lane")
        self.assertEqual(vec_callers.sources(self.fork, "HEAD", changed), {})

    def test_an_unlisted_caller_is_refused(self):
        other = self.fork / "aten/src/ATen/native/cpu/Other.cpp"
        other.write_text("static void k() { y.tanh(); }\n")
        git(self.fork, "add", "-A")
        git(self.fork, "commit", "-qm", "another caller")
        changed = self.edit(VEC256, "Sleef_tanhf8_u10(values)", "kernel(values)")
        with self.assertRaisesRegex(StackError, r"at::vec's tanh, which .*Other\.cpp call"):
            vec_callers.sources(self.fork, "HEAD", changed)

    def own_change(self, where: str, code: str, guard: bool = True) -> dict[str, str]:
        """The tanh change, and `code` added to Activation.cpp after `where`."""
        self.edit(VEC256, "Sleef_tanhf8_u10(values)", "kernel(values)")
        if guard:
            code = f"#if defined(CPU_CAPABILITY_AVX2) || defined(CPU_CAPABILITY_AVX512)\n{code}\n#endif\n"
        return self.edit(ACTIVATION_CPP, where, where + "\n" + code)

    def check(self, changed: dict[str, str]) -> None:
        stubs = vec_callers.whole_files(self.fork, "HEAD", changed)[ACTIVATION_CPP]
        vec_callers.check_own_changes(self.fork, "HEAD", ACTIVATION_CPP, sorted(stubs))

    def test_own_changes_to_a_file_compiled_whole_under_an_avx_if(self):
        # in a re-pointed stub's kernel, and a new helper outside every function
        changed = self.own_change("static void gelu_kernel() {", "  fast();")
        changed = self.edit(ACTIVATION_CPP, "namespace {", "namespace {\n#if defined("
                            "CPU_CAPABILITY_AVX2)\nstatic int fast() {\n  return 1;\n}\n#endif")  # fmt: skip
        self.assertEqual(set(vec_callers.whole_files(self.fork, "HEAD", changed)),
                         {ACTIVATION_CPP, vec_callers.QUANTIZED_KERNELS})  # fmt: skip
        self.check(changed)
        texts = vec_callers.sources(self.fork, "HEAD", changed)
        self.assertIn(
            "fast();",
            texts[vec_callers.PREFIX + "aten__src__ATen__native__cpu__Activation.AVX2.cpp"],
        )

    def test_own_changes_that_default_would_compile_are_refused(self):
        changed = self.own_change("static void gelu_kernel() {", "  fast();", guard=False)
        with self.assertRaisesRegex(StackError, r"Activation\.cpp:3: .* outside an `#if`"):
            self.check(changed)
        self.tearDown()
        self.setUp()
        changed = self.own_change("static void gelu_kernel() {", "#else\n  fast();")
        with self.assertRaisesRegex(StackError, "outside an `#if`"):  # an #else of one
            self.check(changed)

    def test_own_changes_to_a_kernel_the_overlay_does_not_repoint_are_refused(self):
        changed = self.own_change("static void elu_kernel() {", "  fast();")
        with self.assertRaisesRegex(StackError, r"in elu_kernel, not the kernel of a re-pointed"):
            self.check(changed)

    def test_compiled_once_at_its_capability(self):
        flags = compile._capability_flags()["AVX512"]
        self.assertIn("-DCPU_CAPABILITY_AVX512", flags)
        self.assertEqual(vec_callers.capability("recompiled/a__b__Activation.AVX512.cpp"), "AVX512")


class InductorCacheTest(unittest.TestCase):
    def test_the_cache_folder_follows_the_laid_headers(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            layout = Layout(root=root)
            self.assertTrue(layout.inductor_cache("avx2").name.endswith("avx2-wheel"))
            header = root / "pytorch/torch/include/ATen/cpu/vec/vec256/vec256_float.h"
            header.parent.mkdir(parents=True)
            header.write_text("old")
            (root / "build/overlay").mkdir(parents=True)
            state = {"replaced": ["ATen/cpu/vec/vec256/vec256_float.h"], "added": []}
            (root / "build/overlay/include-state.json").write_text(json.dumps(state))
            before = layout.inductor_cache("avx2")
            header.write_text("new")
            after = layout.inductor_cache("avx2")
            self.assertNotEqual(before, after)
            self.assertEqual(before.parent, after.parent)
            self.assertTrue(after.name.startswith("avx2-"))


if __name__ == "__main__":
    unittest.main()
