// CPU linear layer and the GEMM wrapper under every product of the backend (cpu_ops.h).
#include <chrono>
#include <cblas.h>

#include <algorithm>

#include "backends/cpu/cpu_math.h"
#include "backends/cpu/cpu_ops.h"

namespace bertperf::cpu {

namespace {

void blas_gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
               const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void blas_gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A, int lda,
               const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// Products below this many flops run on the calling thread.
constexpr double kSplitFlops = 4e6;

}  // namespace

// OpenMP is the backend's only thread pool: OpenBLAS runs single-threaded and a large product is
// split into one block of C per OpenMP thread. Two pools on the same cores (OpenBLAS's pthreads
// spinning after a GEMM while OpenMP threads run the next elementwise loop, and the reverse) cost
// more than the duplicated packing of the shared operand. Inside a parallel region (attention's
// per-head products) the call goes straight to BLAS; the caller keeps BLAS single-threaded there.
GemmProfile& gemm_profile() {
  static GemmProfile profile;
  return profile;
}

template <typename T>
void gemm_unprofiled(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B,
                     int ldb, T beta, T* C, int ldc);

template <typename T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb,
          T beta, T* C, int ldc) {
  GemmProfile& profile = gemm_profile();
  if (!profile.enabled || omp_in_parallel()) {
    gemm_unprofiled(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  gemm_unprofiled(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  profile.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  profile.flops += 2.0 * M * N * K;
}

template <typename T>
void gemm_unprofiled(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B,
                     int ldb, T beta, T* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (omp_in_parallel()) {
    blas_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  SingleThreadedBlas single(true);
  const int threads = omp_get_max_threads();
  if (threads == 1 || 2.0 * M * N * K < kSplitFlops) {
    blas_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  // Split the longer side of C; blocks are multiples of 16 to keep BLAS on its full-width kernels.
  const bool split_rows = M >= N;
  const int extent = split_rows ? M : N;
  const int block = std::max(16, (extent + threads - 1) / threads + 15) / 16 * 16;
  const int blocks = (extent + block - 1) / block;
#pragma omp parallel for schedule(static, 1)
  for (int b = 0; b < blocks; ++b) {
    const int lo = b * block, len = std::min(block, extent - lo);
    if (split_rows) {
      const T* a = trans_a ? A + lo : A + static_cast<size_t>(lo) * lda;
      blas_gemm(trans_a, trans_b, len, N, K, alpha, a, lda, B, ldb, beta, C + static_cast<size_t>(lo) * ldc, ldc);
    } else {
      const T* b_part = trans_b ? B + static_cast<size_t>(lo) * ldb : B + lo;
      blas_gemm(trans_a, trans_b, M, len, K, alpha, A, lda, b_part, ldb, beta, C + lo, ldc);
    }
  }
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
  template void gemm<T>(bool, bool, int, int, int, T, const T*, int, const T*, int, T, T*, int);             \
  template void linear_forward<T>(T*, const T*, const T*, const T*, int, int, int, WeightLayout);         \
  template void linear_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int, WeightLayout);
BERTPERF_INSTANTIATE(float)
BERTPERF_INSTANTIATE(double)
#undef BERTPERF_INSTANTIATE

}  // namespace bertperf::cpu
