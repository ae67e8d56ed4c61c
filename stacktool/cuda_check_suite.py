"""attn's OpInfo checks on CUDA, for the stack's C++ built as an extension op.

Runs where the fork cannot (a GPU machine with another PyTorch): cuda_check.py puts
the fork's Attn.cpp and Attn.h, FunctionsManual's attn_backward and attn_jvp, the
OpInfo's sample and error inputs and attn's decomposition beside this file. They are
built unchanged against the installed torch as stack::attn and stack::_attn_backward,
with an autograd.Function whose backward and jvp are FunctionsManual's functions, as
derivatives.yaml wires them. Off the CPU, attn and _attn_backward take exactly the
fork's code. torch.compile gets what the fork gives it: the backward as the op's
autograd kernel, the decomposition in inductor's table. Not checked: the CPU kernel
(a wheel exports neither DispatchStub's implementation nor cpublas::gemm, so CPU
float and double have no kernel here), and the fork's own build (codegen, bindings,
the decomposition as Meta kernel, dynamo's handling of torch.attn).
On the H200 image of 2026-11 (torch 2.11.0+cu130), CXX names /opt/gcc/bin/g++,
whose extensions do not link libstdc++.so (no NEEDED entry): their number formatting
mixes with the process's libstdc++ and crashes (SIGSEGV in test_errors). Build with
the system compiler there: CXX=/usr/bin/g++ (11 of 11 pass).

    python3 cuda_check_suite.py [DEVICE] [unittest args]      (default: cuda)
"""

import operator
import os
import sys
import unittest
from functools import partial
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.append(str(HERE / "site"))  # expecttest, where the machine has none

from torch._inductor.decomposition import decompositions  # noqa: E402
from torch._inductor.utils import run_and_get_code  # noqa: E402
from torch.testing import make_tensor  # noqa: E402
from torch.testing._internal.opinfo.core import ErrorInput, SampleInput  # noqa: E402
from torch.utils import cpp_extension  # noqa: E402

DEVICE, *UNITTEST_ARGS = (
    sys.argv[1:] if sys.argv[1:2] and not sys.argv[1].startswith("-") else ["cuda", *sys.argv[1:]]
)

# The headers that the fork's codegen writes for attn's native functions, and a
# DispatchStub for Attn.h: a wheel does not export DispatchStub's implementation,
# and the CPU kernel is not built here (AttnKernel.cpp's cpublas::gemm is not
# exported either), so a call raises.
SHIM_HEADERS = {
    "ATen/native/DispatchStub.h": """
#pragma once
#include <c10/core/DeviceType.h>
#include <c10/util/Exception.h>
#include <utility>
#define DECLARE_DISPATCH(fn, name)                                            \\
  struct name##_DECLARE_DISPATCH_type {                                        \\
    template <typename... Args>                                                \\
    void operator()(c10::DeviceType, Args&&... args) const {                   \\
      TORCH_CHECK(kernel, #name ": no CPU kernel in this build");              \\
      kernel(std::forward<Args>(args)...);                                     \\
    }                                                                          \\
    fn kernel = nullptr;                                                       \\
  };                                                                           \\
  extern struct name##_DECLARE_DISPATCH_type name;
#define DEFINE_DISPATCH(name) struct name##_DECLARE_DISPATCH_type name
""",
    "ATen/ops/attn_native.h": """
#pragma once
#include <ATen/core/Tensor.h>
#include <tuple>
namespace at::native {
std::tuple<Tensor, Tensor> attn(const Tensor& q, const Tensor& k, const Tensor& v);
}
""",
    "ATen/ops/_attn_backward_native.h": """
#pragma once
#include <ATen/core/Tensor.h>
#include <array>
#include <optional>
#include <tuple>
namespace at::native {
#define STACK_ATTN_BACKWARD_ARGS                                                \\
  const std::optional<Tensor>&, const std::optional<Tensor>&,                  \\
      const std::optional<Tensor>&, const std::optional<Tensor>&,              \\
      const std::optional<Tensor>&, const Tensor&, std::array<bool, 3>
std::tuple<Tensor, Tensor, Tensor> _attn_backward(STACK_ATTN_BACKWARD_ARGS);
std::tuple<Tensor, Tensor, Tensor> _attn_backward_cpu(STACK_ATTN_BACKWARD_ARGS);
}
""",
}

EXTENSION = r"""
#include <torch/extension.h>
#include <ATen/TensorSubclassLikeUtils.h>
#include <ATen/functorch/DynamicLayer.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <ATen/native/Attn.h>
#include <ATen/ops/_attn_backward_native.h>
#include <ATen/ops/attn_native.h>

namespace stack_manual {
// The fork's generated at::_attn_backward, which calls the op through the
// dispatcher. FunctionsManual's code below spells it at::_attn_backward; inside
// stack_manual, `at` is this namespace, whose using-directive serves every other
// at:: name from ::at (a torch with the fork's headers declares its own).
namespace at {
using namespace ::at;
std::tuple<Tensor, Tensor, Tensor> _attn_backward(
    const std::optional<Tensor>& grad_output,
    const std::optional<Tensor>& grad_attn,
    const std::optional<Tensor>& q,
    const std::optional<Tensor>& k,
    const std::optional<Tensor>& v,
    const Tensor& attn,
    std::array<bool, 3> output_mask) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("stack::_attn_backward", "")
                       .typed<std::tuple<Tensor, Tensor, Tensor>(
                           STACK_ATTN_BACKWARD_ARGS)>();
  return op.call(grad_output, grad_attn, q, k, v, attn, output_mask);
}
} // namespace at

using at::areAnyTensorSubclassLike;
using at::Tensor;
// As FunctionsManual.cpp defines it.
bool isFwGradDefined(const std::optional<Tensor>& t) {
  return t.has_value() && t->defined() && t->_fw_grad(/*level */ 0).defined();
}
#include "attn_manual.inc"
} // namespace stack_manual

TORCH_LIBRARY(stack, m) {
  m.def("attn(Tensor q, Tensor k, Tensor v) -> (Tensor output, Tensor attn)");
  m.def(
      "_attn_backward(Tensor? grad_output, Tensor? grad_attn, Tensor? q, "
      "Tensor? k, Tensor? v, Tensor attn, bool[3] output_mask) "
      "-> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(stack, CompositeExplicitAutograd, m) {
  m.impl("attn", TORCH_FN(at::native::attn));
  m.impl("_attn_backward", TORCH_FN(at::native::_attn_backward));
}

TORCH_LIBRARY_IMPL(stack, CPU, m) {
  m.impl("_attn_backward", TORCH_FN(at::native::_attn_backward_cpu));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def(
      "attn_backward",
      [](const std::optional<at::Tensor>& grad_output,
         const std::optional<at::Tensor>& grad_attn,
         const std::optional<at::Tensor>& q,
         const std::optional<at::Tensor>& k,
         const std::optional<at::Tensor>& v,
         const at::Tensor& attn,
         std::array<bool, 3> grad_input_mask) {
        return stack_manual::attn_backward(
            grad_output.value_or(at::Tensor()),
            grad_attn.value_or(at::Tensor()),
            q, k, v, attn, grad_input_mask);
      });
  module.def(
      "attn_jvp",
      [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
         const at::Tensor& attn,
         const std::optional<at::Tensor>& q_t,
         const std::optional<at::Tensor>& k_t,
         const std::optional<at::Tensor>& v_t) {
        return stack_manual::attn_jvp(
            q, k, v, attn, q_t.value_or(at::Tensor()),
            k_t.value_or(at::Tensor()), v_t.value_or(at::Tensor()));
      });
}
"""


def build():
    """The extension, built in a folder of its own under this one. A torch that has the
    stack's own attn (the fork) exports the same C++ symbols, which the dynamic linker
    would call in place of the copies built here: such a torch is refused."""
    if hasattr(torch.ops.aten, "attn"):
        sys.exit(f"cuda_check_suite: torch {torch.__version__} at {torch.__file__} has the "
                 "stack's attn, whose symbols would replace this build's; run it under a "
                 "torch without it (here: PYTHONPATH=.cache/torch-2.6.0-<wheel's tag>)")  # fmt: skip
    src = HERE / "src"
    for name, text in SHIM_HEADERS.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    (src / "attn_extension.cpp").write_text(EXTENSION)
    build_dir = HERE / "build"
    build_dir.mkdir(exist_ok=True)
    return cpp_extension.load(
        name="stack_attn",
        sources=[str(src / "attn_extension.cpp"), str(src / "ATen/native/Attn.cpp")],
        extra_include_paths=[str(src)],
        extra_cflags=["-O2", "-DAT_PER_OPERATOR_HEADERS"],
        build_directory=str(build_dir),
        verbose=False,
    )


ext = build()
opinfo = {
    "partial": partial,
    "make_tensor": make_tensor,
    "SampleInput": SampleInput,
    "ErrorInput": ErrorInput,
    "torch": torch,
    "operator": operator,
}
exec((HERE / "attn_opinfo.py").read_text(), opinfo)
decomp = {"torch": torch, "Tensor": torch.Tensor, "Tuple": tuple}
exec((HERE / "attn_decomp.py").read_text(), decomp)


class Attn(torch.autograd.Function):
    """attn with derivatives.yaml's formulas: FunctionsManual's attn_backward and attn_jvp."""

    @staticmethod
    def forward(q, k, v):
        return torch.ops.stack.attn(q, k, v)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(*inputs, output[1])
        ctx.save_for_forward(*inputs, output[1])

    @staticmethod
    def backward(ctx, grad_output, grad_attn):
        q, k, v, attn = ctx.saved_tensors
        mask = list(ctx.needs_input_grad)
        return ext.attn_backward(grad_output, grad_attn, *read_inputs(mask, q, k, v), attn, mask)

    @staticmethod
    def jvp(ctx, q_t, k_t, v_t):
        q, k, v, attn = ctx.saved_tensors
        output_t, attn_t = ext.attn_jvp(q, k, v, attn, q_t, k_t, v_t)
        n, dv = q.shape[0], v.shape[1]
        return (
            torch.zeros(n, dv, dtype=q.dtype, device=q.device) if output_t is None else output_t,
            torch.zeros(n, n, dtype=q.dtype, device=q.device) if attn_t is None else attn_t,
        )


def forward_backward(fn, args, pick):
    """fn's outputs (as pick takes them) and the inputs' grads for random output grads,
    an unused input's as zeros (which compiled code returns where eager has None)."""
    outs = pick(fn(*args))
    outs = outs if isinstance(outs, tuple) else (outs,)
    grads = [torch.randn_like(out) for out in outs]
    return outs, torch.autograd.grad(outs, args, grads, materialize_grads=True)


def read_inputs(mask, q, k, v):
    """derivatives.yaml's wrap_opt_if: q for grad_k, k for grad_q, v for either; else None."""
    return q if mask[1] else None, k if mask[0] else None, v if mask[0] or mask[1] else None


def reference(q, k, v):
    """The OpInfo's ref, in NumPy's float64."""
    q, k, v = (t.detach().cpu().double().numpy() for t in (q, k, v))
    a = np.tanh(q @ k.T)
    return torch.from_numpy(a @ v), torch.from_numpy(a)


def samples(dtype, requires_grad=False):
    return list(opinfo["sample_inputs_attn"](None, DEVICE, dtype, requires_grad))


# Each dtype against the math of the same inputs in a wider one, within: float32's
# 1e-5 (as the float64 reference's), the OpInfo's float16 override, bfloat16's
# default rtol with a wider atol.
WIDER = {torch.float32: torch.float64, torch.float16: torch.float32, torch.bfloat16: torch.float32}
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (5e-4, 3e-3), torch.bfloat16: (1e-2, 1.6e-2)}
LOW = (torch.float16, torch.bfloat16)


class TestAttnDevice(unittest.TestCase):
    def test_numpy_ref_float64(self):
        for sample in samples(torch.float64):
            out = torch.ops.stack.attn(sample.input, *sample.args)
            for got, want in zip(out, reference(sample.input, *sample.args), strict=True):
                self.assertEqual(got.device.type, torch.device(DEVICE).type)
                torch.testing.assert_close(got.cpu(), want, atol=1e-12, rtol=1e-10)

    def test_low_precision_matches_float32(self):
        for dtype in LOW:
            for sample in samples(dtype):
                with self.subTest(dtype=dtype, shape=tuple(sample.input.shape)):
                    out = torch.ops.stack.attn(sample.input, *sample.args)
                    want = torch.ops.stack.attn(*(t.float() for t in (sample.input, *sample.args)))
                    atol, rtol = TOL[dtype]
                    for got, ref in zip(out, want, strict=True):
                        self.assertEqual(got.dtype, dtype)
                        torch.testing.assert_close(got.float(), ref, atol=atol, rtol=rtol)

    def test_float32_matches_reference(self):
        for sample in samples(torch.float32):
            out = torch.ops.stack.attn(sample.input, *sample.args)
            for got, want in zip(out, reference(sample.input, *sample.args), strict=True):
                torch.testing.assert_close(got.cpu().double(), want, atol=1e-5, rtol=1e-5)

    def test_noncontiguous_samples(self):
        for dtype in (torch.float32, torch.float64):
            for sample in samples(dtype):
                args = (sample.input, *sample.args)
                strided = [
                    make_tensor(t.shape, dtype=dtype, device=DEVICE, noncontiguous=True)
                    for t in args
                ]
                for s, t in zip(strided, args, strict=True):
                    s.copy_(t)
                # within the dtype's default tolerance: cuBLAS may take another
                # algorithm for another layout (6e-8 apart in float32 on an H200)
                for g, w in zip(
                    torch.ops.stack.attn(*strided), torch.ops.stack.attn(*args), strict=True
                ):
                    torch.testing.assert_close(g, w)

    def test_errors(self):
        inputs = list(opinfo["error_inputs_attn"](None, DEVICE))
        self.assertGreater(len(inputs), 10)
        for error in inputs:
            with self.subTest(regex=error.error_regex):
                with self.assertRaisesRegex(error.error_type, error.error_regex):
                    torch.ops.stack.attn(error.sample_input.input, *error.sample_input.args)

    def check_every_sample(self, check, **options):
        """check (gradcheck or gradgradcheck) of Attn on every float64 sample."""
        for sample in samples(torch.float64, requires_grad=True):
            args = (sample.input, *sample.args)
            with self.subTest(shapes=[tuple(a.shape) for a in args]):
                pick = sample.output_process_fn_grad
                self.assertTrue(check(lambda *a, pick=pick: pick(Attn.apply(*a)), args, **options))

    def test_gradcheck(self):
        self.check_every_sample(
            torch.autograd.gradcheck, check_forward_ad=True, check_undefined_grad=True
        )

    def test_gradgradcheck(self):
        self.check_every_sample(torch.autograd.gradgradcheck, check_fwd_over_rev=True)

    def test_backward_matches_wider_dtype(self):
        for dtype, wider in WIDER.items():
            for sample in samples(dtype, requires_grad=True):
                args = (sample.input, *sample.args)
                wide = [t.detach().to(wider).requires_grad_() for t in args]
                outs = Attn.apply(*args)
                outs_wide = Attn.apply(*wide)
                grads = [torch.randn_like(o) for o in outs_wide]
                got = torch.autograd.grad(
                    outs, args, [g.to(dtype) for g in grads], allow_unused=True
                )
                want = torch.autograd.grad(outs_wide, wide, grads, allow_unused=True)
                atol, rtol = TOL[dtype]
                for g, w in zip(got, want, strict=True):
                    torch.testing.assert_close(g.to(wider), w, atol=atol * 10, rtol=rtol)

    def compile_as_the_fork(self):
        """attn as torch.compile sees it in the fork, for this test: differentiable with
        Attn's backward (derivatives.yaml's; compile traces no forward AD), decomposed by
        inductor (torch/_decomp's attn, in the fork's core ATen decompositions)."""
        lib = torch.library.Library("stack", "FRAGMENT")
        self.addCleanup(lib._destroy)
        torch.library.register_autograd(
            "stack::attn", Attn.backward, setup_context=Attn.setup_context, lib=lib
        )
        decompositions[torch.ops.stack.attn.default] = decomp["attn"]
        self.addCleanup(decompositions.pop, torch.ops.stack.attn.default)
        # Their keys do not cover the table: a graph cached without the decomposition
        # (another process, an earlier run) would be taken as it is.
        self.enterContext(torch._inductor.config.patch(fx_graph_cache=False))
        self.enterContext(torch._functorch.config.patch(enable_autograd_cache=False))

    def test_compiled_matches_eager(self):
        """inductor's code for attn and its backward, compiled per sample (static shapes),
        calls neither stack op (the decomposition forward; FunctionsManual's math
        backward, as off the CPU kernel in the fork) and matches eager."""
        self.compile_as_the_fork()
        for dtype in (torch.float32, torch.bfloat16):
            for sample in samples(dtype, requires_grad=True):
                args = (sample.input, *sample.args)
                run = partial(forward_backward, args=args, pick=sample.output_process_fn_grad)
                shapes = [tuple(a.shape) for a in args]
                with self.subTest(dtype=dtype, shapes=shapes):
                    torch._dynamo.reset()
                    compiled = torch.compile(
                        torch.ops.stack.attn, backend="inductor", fullgraph=True, dynamic=False
                    )
                    torch.manual_seed(0)
                    got, code = run_and_get_code(run, compiled)
                    self.assertEqual(len(code), 2)  # the forward's and the backward's
                    lines = [line for text in code for line in text.splitlines()]
                    self.assertEqual([s for s in lines if "torch.ops.stack." in s], [])
                    atol, rtol = TOL[dtype]
                    torch.manual_seed(0)
                    torch.testing.assert_close(got, run(Attn.apply), atol=atol, rtol=rtol)

    def test_attn_backward_device_checks(self):
        if DEVICE == "cpu":
            self.skipTest("needs a second device")
        q, k, v = (make_tensor((3, 4), dtype=torch.float32, device=DEVICE) for _ in range(3))
        attn = torch.ops.stack.attn(q, k, v)[1]
        with self.assertRaisesRegex(
            RuntimeError, r"expected grad_output on attn's device cuda:0, but got cpu"
        ):
            torch.ops.stack._attn_backward(
                torch.ones(3, 4), None, q, k, v, attn, [True, True, True]
            )
        with self.assertRaisesRegex(RuntimeError, r"expected q, k and v to be on the same device"):
            torch.ops.stack.attn(q, k.cpu(), v)

    def test_attn_backward_output_mask(self):
        q, k, v = (make_tensor((5, 3), dtype=torch.float64, device=DEVICE) for _ in range(3))
        out, attn = torch.ops.stack.attn(q, k, v)
        g_out, g_attn = torch.randn_like(out), torch.randn_like(attn)
        full = torch.ops.stack._attn_backward(g_out, g_attn, q, k, v, attn, [True, True, True])
        for mask in ([True, False, False], [False, True, False], [False, False, True]):
            part = torch.ops.stack._attn_backward(
                g_out, g_attn, *read_inputs(mask, q, k, v), attn, mask
            )
            for asked, p, f in zip(mask, part, full, strict=True):
                if asked:
                    torch.testing.assert_close(p, f, atol=0, rtol=0)
                else:
                    self.assertIsNone(p)


if __name__ == "__main__":
    print(
        f"torch {torch.__version__}, device {DEVICE}:",
        torch.cuda.get_device_name() if DEVICE == "cuda" else os.uname().machine,
        flush=True,
    )
    unittest.main(argv=[sys.argv[0], "-v", *UNITTEST_ARGS])
