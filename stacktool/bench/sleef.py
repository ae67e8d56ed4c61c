"""Sleef u10's tanh for the tanh table: v2.6.0's float tanh where it has no MKL, as a small
C++ extension built per CPU capability against the wheel's headers and loaded into v2.6.0's
torch (Sleef's tanh is what Vectorized<float>::tanh calls with AVX2 and AVX512; the default
capability's is std::tanh element by element, so no Sleef there)."""

from pathlib import Path

# v2.6.0's float tanh where it has no MKL (aarch64's builds): IMPLEMENT_ITERATOR_LAMBDA of
# aten/src/ATen/native/cpu/UnaryOpsKernel.cpp (strided data gathered into a buffer) over
# IMPLEMENT_VML(tanh) of aten/src/ATen/cpu/vml.h (vec::map of Vectorized<float>::tanh, which
# is Sleef_tanhf8_u10 / Sleef_tanhf16_u10); BFloat16 and Half converted to float and back by
# vec::map. Built per capability against the wheel's headers (whose libtorch_cpu exports Sleef).
SLEEF_SOURCE = r"""
#include <ATen/Dispatch.h>
#include <ATen/TensorIterator.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/irange.h>
#include <torch/library.h>

namespace {

template <typename scalar_t>
void vtanh(scalar_t* out, const scalar_t* in, int64_t size) {
  using vec_t = at::vec::Vectorized<at::vec::vec_scalar_t<scalar_t>>;
  at::vec::map([](vec_t x) { return x.tanh(); }, out, in, size);
}

at::Tensor& sleef_tanh(const at::Tensor& self, at::Tensor& out) {
  auto iter = at::TensorIterator::unary_op(out, self);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, iter.dtype(), "sleef_tanh", [&]() {
    iter.for_each([](char** data_, const int64_t* strides, int64_t n) {
      scalar_t* out_data = reinterpret_cast<scalar_t*>(data_[0]);
      scalar_t* in_data = reinterpret_cast<scalar_t*>(data_[1]);
      int64_t out_stride = strides[0] / sizeof(scalar_t);
      int64_t in_stride = strides[1] / sizeof(scalar_t);
      if (out_stride == 1 && in_stride == 1) {
        vtanh(out_data, in_data, n);
        return;
      }
      static constexpr int64_t WIDTH = (8 * 1024) / sizeof(scalar_t);
      for (int64_t i = 0; i < n; i += WIDTH) {
        scalar_t buffer[WIDTH];
        const int64_t width = std::min(WIDTH, n - i);
        scalar_t* in_buffer = in_stride == 1 ? &in_data[i] : &buffer[0];
        scalar_t* out_buffer = out_stride == 1 ? &out_data[i] : &buffer[0];
        if (in_stride != 1)
          for (const auto j : c10::irange(width))
            in_buffer[j] = in_data[in_stride * (i + j)];
        vtanh(out_buffer, in_buffer, width);
        if (out_stride != 1)
          for (const auto j : c10::irange(width))
            out_data[out_stride * (i + j)] = out_buffer[j];
      }
    }, /*grain_size=*/2048);
  });
  return out;
}

} // namespace

TORCH_LIBRARY(stack_bench, m) {
  m.def("sleef_tanh(Tensor self, Tensor(a!) out) -> Tensor(a!)");
}

TORCH_LIBRARY_IMPL(stack_bench, CPU, m) {
  m.impl("sleef_tanh", sleef_tanh);
}
"""


def load(torch, build_dir: Path, capability: str):
    """SLEEF_SOURCE built for `capability` (cached in `build_dir`) and loaded: its op."""
    from torch.utils import cpp_extension

    from stacktool.overlay.compile import CPU_CAPABILITIES

    cap = capability.upper()
    build_dir.mkdir(parents=True, exist_ok=True)
    source = build_dir / "sleef_tanh.cpp"
    if not source.exists() or source.read_text() != SLEEF_SOURCE:
        source.write_text(SLEEF_SOURCE)
    flags = [f"-DCPU_CAPABILITY={cap}", f"-DCPU_CAPABILITY_{cap}", *CPU_CAPABILITIES[cap].split()]
    cpp_extension.load(f"stack_bench_sleef_{capability}", [str(source)], extra_cflags=flags,
                       build_directory=str(build_dir), is_python_module=False)  # fmt: skip
    return torch.ops.stack_bench.sleef_tanh
