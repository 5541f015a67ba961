// CPU linear layer (grouped, with its activation fused) and the GEMM wrapper under every product of the backend
// (cpu_ops.h).
#include <cblas.h>

#include <algorithm>
#include <chrono>

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
  // Split C by rows only, in blocks of 48: OpenBLAS's kernels then compute every element of C with the
  // same instruction sequence as one call over all of C, so any thread count gives the same bits (a
  // column split, or row blocks of other sizes, move elements onto edge kernels that round differently).
  constexpr int kRowBlock = 48;
  const int block = (M + threads - 1) / threads + kRowBlock - 1 - ((M + threads - 1) / threads + kRowBlock - 1) % kRowBlock;
  const int blocks = (M + block - 1) / block;
  if (blocks == 1) {
    blas_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
#pragma omp parallel for schedule(static, 1)
  for (int b = 0; b < blocks; ++b) {
    const int lo = b * block, len = std::min(block, M - lo);
    const T* a = trans_a ? A + lo : A + static_cast<size_t>(lo) * lda;
    blas_gemm(trans_a, trans_b, len, N, K, alpha, a, lda, B, ldb, beta, C + static_cast<size_t>(lo) * ldc, ldc);
  }
}

template <typename T>
void linear_forward(const ops::LinearForward& p) {
  const int N = p.N, I = p.I, O = p.O, G = p.groups;
  const size_t ldo = p.ldo ? p.ldo : static_cast<size_t>(G) * O;
  BERT_CHECK(G >= 1 && ldo >= static_cast<size_t>(G) * O, "linear: ", G, " groups of ", O, " columns in rows of ", ldo);
  BERT_CHECK(p.act != Activation::GELU || p.pre, "linear: GELU needs its pre-activation buffer");
  const bool out_in = p.layout == WeightLayout::OUT_IN;
  // The product goes into pre for GELU (out = gelu(pre) after), else straight into out (tanh applied in place).
  T* dst = static_cast<T*>(p.act == Activation::GELU ? p.pre : p.out);
  const T* inp = static_cast<const T*>(p.inp);
  for (int g = 0; g < G; ++g) {
    const T* weight = static_cast<const T*>(p.weight) + g * p.weight_stride;
    const T* bias = p.bias ? static_cast<const T*>(p.bias) + g * p.bias_stride : nullptr;
    T* out = dst + static_cast<size_t>(g) * O;
    // Seeding out with the bias and letting the GEMM accumulate (beta = 1) costs no extra pass.
    if (bias) {
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * O > kParallelMin)
      for (int n = 0; n < N; ++n) std::copy(bias, bias + O, out + n * ldo);
    }
    gemm<T>(false, out_in, N, O, I, T(1), inp, I, weight, out_in ? I : O, bias ? T(1) : T(0), out,
            static_cast<int>(ldo));
  }
  T* out = static_cast<T*>(p.out);
  if (p.act == Activation::GELU) {
    for_row_ranges(N, G * O, ldo, [&](size_t at, size_t n) { gelu_forward<T>(out + at, dst + at, n); });
  } else if (p.act == Activation::TANH) {
    for_row_ranges(N, G * O, ldo, [&](size_t at, size_t n) { tanh_forward<T>(out + at, out + at, n); });
  }
}

template <typename T>
void linear_backward(const ops::LinearBackward& p) {
  const int N = p.N, I = p.I, O = p.O, G = p.groups;
  const int ldo = p.ldo ? p.ldo : G * O;
  BERT_CHECK(G >= 1 && ldo >= G * O, "linear backward: ", G, " groups of ", O, " columns in rows of ", ldo);
  BERT_CHECK(p.dinp_act == Activation::NONE || (!p.accumulate_dinp && p.dinp_act_saved),
             "linear backward: a fused activation backward overwrites dinp and needs its saved tensor");
  const bool out_in = p.layout == WeightLayout::OUT_IN;
  const T* dout = static_cast<const T*>(p.dout);
  const T* inp = static_cast<const T*>(p.inp);
  auto weight = [&](int g) { return static_cast<const T*>(p.weight) + g * p.weight_stride; };
  if (p.dinp) {
    // dinp (N, I) = sum over groups of dout_g (N, O) . W_g^T, where W^T is (O, I).
    T* dinp = static_cast<T*>(p.dinp);
    for (int g = 0; g < G; ++g) {
      const T beta = g > 0 || p.accumulate_dinp ? T(1) : T(0);
      gemm<T>(false, !out_in, N, I, O, T(1), dout + g * O, ldo, weight(g), out_in ? I : O, beta, dinp, I);
    }
    if (p.dinp_act != Activation::NONE) {
      const size_t n = static_cast<size_t>(N) * I;
      const T* saved = static_cast<const T*>(p.dinp_act_saved);
      if (p.dinp_act == Activation::GELU) {
        gelu_backward<T>(dinp, saved, dinp, n);
      } else {
        tanh_backward<T>(dinp, saved, dinp, n);
      }
      if (p.dinp_act_dbias) add_column_sums(static_cast<T*>(p.dinp_act_dbias), dinp, N, I, I);
    }
  }
  for (int g = 0; g < G; ++g) {
    const T* dout_g = dout + g * O;
    if (p.dweight) {
      T* dweight = static_cast<T*>(p.dweight) + g * p.weight_stride;
      if (out_in) {
        gemm<T>(true, false, O, I, N, T(1), dout_g, ldo, inp, I, T(1), dweight, I);  // (O, I) += dout^T . inp
      } else {
        gemm<T>(true, false, I, O, N, T(1), inp, I, dout_g, ldo, T(1), dweight, O);  // (I, O) += inp^T . dout
      }
    }
    if (p.dbias) add_column_sums(static_cast<T*>(p.dbias) + g * p.bias_stride, dout_g, N, O, ldo);
  }
}

#define BERTPERF_INSTANTIATE(T)                                                                 \
  template void gemm<T>(bool, bool, int, int, int, T, const T*, int, const T*, int, T, T*, int); \
  template void linear_forward<T>(const ops::LinearForward&);                                   \
  template void linear_backward<T>(const ops::LinearBackward&);
BERTPERF_INSTANTIATE(float)
BERTPERF_INSTANTIATE(double)
#undef BERTPERF_INSTANTIATE

}  // namespace bertperf::cpu
