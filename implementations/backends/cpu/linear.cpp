// CPU linear layer and the GEMM wrapper under every product of the backend (cpu_ops.h).
#include <cblas.h>

#include <algorithm>

#include "backends/cpu/cpu_math.h"
#include "backends/cpu/cpu_ops.h"

namespace bertperf::cpu {

template <>
void gemm<float>(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <>
void gemm<double>(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A, int lda,
                  const double* B, int ldb, double beta, double* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int I, int O,
                    WeightLayout layout) {
  // Seeding out with the bias and letting the GEMM accumulate (beta = 1) costs no extra pass.
  if (bias) {
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * O > kParallelMin)
    for (int n = 0; n < N; ++n) std::copy(bias, bias + O, out + static_cast<size_t>(n) * O);
  }
  const bool out_in = layout == WeightLayout::OUT_IN;
  gemm<T>(false, out_in, N, O, I, T(1), inp, I, weight, out_in ? I : O, bias ? T(1) : T(0), out, O);
}

template <typename T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N,
                     int I, int O, WeightLayout layout) {
  const bool out_in = layout == WeightLayout::OUT_IN;
  // dinp (N, I) += dout (N, O) . W^T, where W^T is (O, I).
  if (dinp) gemm<T>(false, !out_in, N, I, O, T(1), dout, O, weight, out_in ? I : O, T(1), dinp, I);
  if (dweight) {
    if (out_in) {
      gemm<T>(true, false, O, I, N, T(1), dout, O, inp, I, T(1), dweight, I);  // (O, I) += dout^T . inp
    } else {
      gemm<T>(true, false, I, O, N, T(1), inp, I, dout, O, T(1), dweight, O);  // (I, O) += inp^T . dout
    }
  }
  if (dbias) {
    for_column_blocks(O, N, [&](int c0, int c1) {
      T acc[kMaxColumnBlock] = {};
      const int w = c1 - c0;
      for (int n = 0; n < N; ++n) {
        const T* row = dout + static_cast<size_t>(n) * O + c0;
#pragma omp simd
        for (int c = 0; c < w; ++c) acc[c] += row[c];
      }
      for (int c = 0; c < w; ++c) dbias[c0 + c] += acc[c];
    });
  }
}

#define BERTPERF_INSTANTIATE(T)                                                                             \
  template void linear_forward<T>(T*, const T*, const T*, const T*, int, int, int, WeightLayout);         \
  template void linear_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int, WeightLayout);
BERTPERF_INSTANTIATE(float)
BERTPERF_INSTANTIATE(double)
#undef BERTPERF_INSTANTIATE

}  // namespace bertperf::cpu
