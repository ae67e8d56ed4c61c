"""cuda_check.prepare: the fork's attn code gathered for the CUDA suite, or a clear error."""

import shutil
import tempfile
import unittest
from pathlib import Path

from stacktool import cuda_check, errors

MANUAL = """// other
Tensor other(const Tensor& t) {
  return t;
}

// attn(q, k, v): x = q k^T, attn = tanh(x), output = attn v.
std::tuple<Tensor, Tensor, Tensor> attn_backward(
    const Tensor& grad_output) {
  return {};
}

std::tuple<Tensor, Tensor> attn_jvp(
    const Tensor& q_p) {
  if (true) {
    return {};
  }
}

Tensor gelu_double_backward(const Tensor& ggI) {
  return ggI;
}
"""

OPINFO = """import torch

def sample_inputs_other(op_info, device, dtype, requires_grad, **kwargs):
    yield None

def sample_inputs_attn(op_info, device, dtype, requires_grad, **kwargs):
    yield 1

def error_inputs_attn(op_info, device, **kwargs):
    yield 2
"""

DECOMP = """@register_decomposition(aten.attn.default)
def attn(q, k, v):
    return q, k


def attn_other(q):
    return q
"""


def fake_fork(root: Path, manual: str = MANUAL, opinfo: str = OPINFO) -> Path:
    for path in cuda_check.COPIED:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(f"// {path}\n")
    for path, text in (
        (cuda_check.MANUAL, manual),
        (cuda_check.OPINFO, opinfo),
        (cuda_check.DECOMP, DECOMP),
    ):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    expecttest = root / "venv" / cuda_check.EXPECTTEST
    (expecttest / "__pycache__").mkdir(parents=True)
    (expecttest / "__init__.py").write_text("# expecttest\n")
    return root


class PrepareTest(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.tmp)

    def test_gathers_the_functions_and_files(self):
        dest = self.tmp / "out"
        (dest / "build").mkdir(parents=True)  # an earlier build: replaced
        fork = fake_fork(self.tmp / "fork")
        cuda_check.prepare(fork, fork / "venv", dest)
        manual = (dest / "src" / "attn_manual.inc").read_text()
        self.assertTrue(manual.startswith("// attn(q, k, v)"))
        self.assertIn("attn_jvp(", manual)
        self.assertTrue(manual.endswith("  }\n}\n"))
        self.assertNotIn("gelu", manual)
        opinfo = (dest / "attn_opinfo.py").read_text()
        self.assertIn("def sample_inputs_attn", opinfo)
        self.assertIn("def error_inputs_attn", opinfo)
        self.assertNotIn("sample_inputs_other", opinfo)
        self.assertEqual(
            (dest / "attn_decomp.py").read_text(), "def attn(q, k, v):\n    return q, k\n"
        )
        self.assertEqual(
            (dest / "src/ATen/native/Attn.cpp").read_text(), "// aten/src/ATen/native/Attn.cpp\n"
        )
        self.assertTrue((dest / "cuda_check_suite.py").is_file())
        self.assertFalse((dest / "build").exists())
        self.assertEqual(
            sorted(p.name for p in (dest / "site" / "expecttest").iterdir()), ["__init__.py"]
        )

    def test_missing_function_is_an_error_that_writes_nothing(self):
        fork = fake_fork(self.tmp / "fork", opinfo="def sample_inputs_attn(): pass\n")
        dest = self.tmp / "out"
        with self.assertRaisesRegex(errors.StackError, "error_inputs_attn not found"):
            cuda_check.prepare(fork, fork / "venv", dest)
        self.assertFalse(dest.exists())

    def test_missing_fork_names_setup(self):
        with self.assertRaisesRegex(errors.StackError, r"run \./stack setup"):
            cuda_check.prepare(self.tmp / "none", self.tmp / "none", self.tmp / "out")

    @unittest.skipUnless(
        (cuda_check.ROOT / "pytorch" / cuda_check.MANUAL).is_file(),
        "no fork (./stack setup makes it)",
    )
    def test_the_fork_has_what_the_suite_reads(self):
        dest = self.tmp / "out"
        cuda_check.prepare(cuda_check.ROOT / "pytorch", cuda_check.ROOT / ".venv", dest)
        manual = (dest / "src" / "attn_manual.inc").read_text()
        self.assertIn("std::tuple<Tensor, Tensor, Tensor> attn_backward(", manual)
        self.assertIn(
            "return std::make_tuple(std::move(output_t), std::move(attn_t));\n}\n", manual
        )
        compile((dest / "attn_opinfo.py").read_text(), "attn_opinfo.py", "exec")
        self.assertIn("return torch.mm(a, v), a\n", (dest / "attn_decomp.py").read_text())


if __name__ == "__main__":
    unittest.main()
