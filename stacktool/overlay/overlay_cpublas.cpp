// Part of the overlay build's core library (stacktool/overlay/), compiled when the stack's
// C++ calls at::native::cpublas::gemm.
//
// libtorch_cpu defines the float and double overloads of cpublas::gemm in
// aten/src/ATen/native/CPUBlas.cpp but does not export them (declared without TORCH_API).
// Same steps here as there for a build with BLAS: normalize_last_dims, then BLAS's
// sgemm_ / dgemm_ (the wheel's MKL, which libtorch_cpu exports) when the sizes suit it,
// else gemm_stub (exported). Upstream's float overload first offers the product to
// oneDNN's bf32 gemm (mkldnn_bf32_gemm), which takes it only at float32 matmul precision
// "medium" on a CPU with bf16 support; neither it nor its CPU check is exported, so at
// "medium" the product goes to at::addmm_out instead, whose CPU kernel makes the same
// choice (oneDNN's bf32 matmul there, else the same BLAS call). The library is compiled
// with -fvisibility=hidden, so these stay private to it.
#include <ATen/Context.h>
#include <ATen/Functions.h>
#include <ATen/native/CPUBlas.h>

#include <algorithm>
#include <climits>

extern "C" void sgemm_(char* transa, char* transb, int* m, int* n, int* k, float* alpha,
                       const float* a, int* lda, const float* b, int* ldb, float* beta,
                       float* c, int* ldc);
extern "C" void dgemm_(char* transa, char* transb, int* m, int* n, int* k, double* alpha,
                       const double* a, int* lda, const double* b, int* ldb, double* beta,
                       double* c, int* ldc);

namespace at::native::cpublas {

namespace internal {
void normalize_last_dims(TransposeType transa, TransposeType transb, int64_t m, int64_t n,
                         int64_t k, int64_t* lda, int64_t* ldb, int64_t* ldc) {
  if (n == 1) {
    *ldc = m;
  }
  if (transa != TransposeType::NoTranspose) {
    if (m == 1) {
      *lda = k;
    }
  } else if (k == 1) {
    *lda = m;
  }
  if (transb != TransposeType::NoTranspose) {
    if (k == 1) {
      *ldb = n;
    }
  } else if (n == 1) {
    *ldb = k;
  }
}
} // namespace internal

namespace {
bool use_blas_gemm(TransposeType transa, TransposeType transb, int64_t m, int64_t n, int64_t k,
                   int64_t lda, int64_t ldb, int64_t ldc) {
  const bool ta = transa != TransposeType::NoTranspose;
  const bool tb = transb != TransposeType::NoTranspose;
  return m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX &&
      ldc <= INT_MAX && lda >= std::max(int64_t{1}, ta ? k : m) &&
      ldb >= std::max(int64_t{1}, tb ? n : k) && ldc >= std::max(int64_t{1}, m);
}

template <typename scalar_t, typename Blas>
void blas_or_stub(Blas blas, TransposeType transa, TransposeType transb, int64_t m, int64_t n,
                  int64_t k, scalar_t alpha, const scalar_t* a, int64_t lda, const scalar_t* b,
                  int64_t ldb, scalar_t beta, scalar_t* c, int64_t ldc) {
  internal::normalize_last_dims(transa, transb, m, n, k, &lda, &ldb, &ldc);
  if (use_blas_gemm(transa, transb, m, n, k, lda, ldb, ldc)) {
    int m_ = m, n_ = n, k_ = k, lda_ = lda, ldb_ = ldb, ldc_ = ldc;
    char transa_ = to_blas(transa), transb_ = to_blas(transb);
    blas(&transa_, &transb_, &m_, &n_, &k_, &alpha, a, &lda_, b, &ldb_, &beta, c, &ldc_);
    return;
  }
  gemm_stub(kCPU, c10::CppTypeToScalarType<scalar_t>::value, transa, transb, m, n, k, alpha, a,
            lda, b, ldb, beta, c, ldc);
}
} // namespace

void gemm(TransposeType transa, TransposeType transb, int64_t m, int64_t n, int64_t k,
          const double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
          const double beta, double* c, int64_t ldc) {
  blas_or_stub(dgemm_, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

namespace {
// c = alpha op(a) op(b) + beta c (column-major) by at::addmm_out over row-major views:
// c^T = op(b)^T op(a)^T. As BLAS, beta = 0 ignores c's contents.
void addmm_gemm(TransposeType transa, TransposeType transb, int64_t m, int64_t n, int64_t k,
                float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                float beta, float* c, int64_t ldc) {
  const auto view = [](const float* data, int64_t rows, int64_t cols, int64_t ld,
                       bool transposed) {
    return at::from_blob(const_cast<float*>(data), {rows, cols},
                         {transposed ? 1 : ld, transposed ? ld : 1}, at::kFloat);
  };
  auto c_t = view(c, n, m, ldc, false);
  at::addmm_out(c_t, c_t, view(b, n, k, ldb, transb != TransposeType::NoTranspose),
                view(a, k, m, lda, transa != TransposeType::NoTranspose), beta, alpha);
}
} // namespace

void gemm(TransposeType transa, TransposeType transb, int64_t m, int64_t n, int64_t k,
          const float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
          const float beta, float* c, int64_t ldc) {
  if (at::globalContext().float32MatmulPrecision() == at::Float32MatmulPrecision::MEDIUM) {
    addmm_gemm(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  blas_or_stub(sgemm_, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

} // namespace at::native::cpublas
