// CPU linear layer (grouped, with its activation fused) and the GEMM wrapper under every product of the backend
// (cpu_ops.h).
#include <cblas.h>

#include <algorithm>
#include <chrono>

#include "backends/cpu/cpu_math.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/gemm_bf16.h"
#include "backends/fp8.h"
#include "backends/kernel_math.h"

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

// ---- bf16 (ops.h's rounding table): the GEMM in the bf16 GEMM order, the epilogue from its fp32 sum -------------
// Forward: out = bf16(acc + bias); GELU: pre = bf16(acc + bias), out = bf16(gelu(acc + bias)), both from the fp32
// sum, as cuBLASLt's GELU_AUX_BIAS epilogue; TANH: out = bf16(tanh(bf16(acc + bias))) (a bias epilogue, then the
// activation kernel). Backward: dinp = bf16(acc (+ dinp)) per group, so a fused QKV rounds three times; with the
// GELU backward fused, bf16(acc * gelu'(pre)) (cuBLASLt's DGELU); with tanh, bf16(bf16(acc) * (1 - y^2)); dweight
// += acc in fp32; bias gradients are fp32 column sums of the bf16 rows.

namespace {

// The FP8 twin (ops.h's FP8 column): operands quantized into the twin's working memory, then the bf16 GEMMs on them
// with the product's scale (the inverses of the operands' scales) applied to the fp32 sum before the epilogue.
// Without a precision the operands are the op's own and the scale 1 (a multiplication by 1 changes no bit).
struct Operands {
  const bf16* inp;
  const bf16* weight;
  size_t weight_stride;
  const bf16* dout;
};

float inverse(float scale) { return 1.0f / scale; }

// The weight's groups quantized one after another (weight_stride I * O); returns their amax.
float quantize_weight(bf16* dst, const void* weight, size_t stride, int groups, int I, int O, float scale) {
  float amax = 0;
  for (int g = 0; g < groups; ++g)
    amax = std::max(amax, quantize_fp8(dst + static_cast<size_t>(g) * I * O, O, static_cast<const bf16*>(weight) + g * stride,
                                       O, I, O, scale, fp8_type(FP8_WEIGHT)));
  return amax;
}

void record(float* amax, int operand, float value) {
  if (amax) amax[operand] = std::max(amax[operand], value);
}

void linear_forward_on(const ops::LinearForward& p, Bf16GemmContext& gemms, const Operands& x, float scale) {
  const int N = p.N, I = p.I, O = p.O, G = p.groups;
  const size_t ldo = p.ldo ? p.ldo : static_cast<size_t>(G) * O;
  const bool out_in = p.layout == WeightLayout::OUT_IN;
  const bf16* inp = x.inp;
  for (int g = 0; g < G; ++g) {
    const bf16* weight = x.weight + g * x.weight_stride;
    const bf16* bias = p.bias ? static_cast<const bf16*>(p.bias) + g * p.bias_stride : nullptr;
    bf16* out = static_cast<bf16*>(p.out) + static_cast<size_t>(g) * O;
    bf16* pre = p.pre ? static_cast<bf16*>(p.pre) + static_cast<size_t>(g) * O : nullptr;
    const Bf16Gemm gemm{N, O, I, inp, I, false, weight, out_in ? I : O, out_in};
    gemms.run(gemm, [&](int m0, int rows, int n0, int cols, const float* acc, int ld) {
      float b[kMaxColumnBlock];
      for (int c0 = 0; c0 < cols; c0 += kMaxColumnBlock) {
        const int w = std::min(kMaxColumnBlock, cols - c0);
        for (int c = 0; c < w; ++c) b[c] = bias ? to_float(bias[n0 + c0 + c]) : 0.0f;
        for (int r = 0; r < rows; ++r) {
          const float* a = acc + static_cast<size_t>(r) * ld + c0;
          const size_t at = (m0 + r) * ldo + n0 + c0;
          bf16* o = out + at;
          switch (p.act) {
            case Activation::NONE:
              if (bias) {
#pragma omp simd
                for (int c = 0; c < w; ++c) o[c] = to_bf16(a[c] * scale + b[c]);
              } else {
#pragma omp simd
                for (int c = 0; c < w; ++c) o[c] = to_bf16(a[c] * scale);
              }
              break;
            case Activation::GELU:
#pragma omp simd
              for (int c = 0; c < w; ++c) {
                const float x = a[c] * scale + b[c];
                pre[at + c] = to_bf16(x);
                o[c] = to_bf16(kmath::gelu(x, FastTanh{}));
              }
              break;
            case Activation::TANH:
#pragma omp simd
              for (int c = 0; c < w; ++c) o[c] = to_bf16(tanh_approx(round_to_bf16(a[c] * scale + b[c])));
              break;
          }
        }
      }
    });
  }
}

// dinp from x.dout and x.weight (sum scaled by dinp_scale), dweight from x.inp and x.dout (by dweight_scale), bias
// gradients from the op's own dout.
void linear_backward_on(const ops::LinearBackward& p, Bf16GemmContext& gemms, const Operands& x, float dinp_scale,
                        float dweight_scale) {
  const int N = p.N, I = p.I, O = p.O, G = p.groups;
  const int ldo = p.ldo ? p.ldo : G * O;
  const bool out_in = p.layout == WeightLayout::OUT_IN;
  const bf16* dout = x.dout;
  const bf16* inp = x.inp;
  auto weight = [&](int g) { return x.weight + g * x.weight_stride; };
  const float scale = dinp_scale;
  if (p.dinp) {
    // dinp (N, I) = sum over groups of dout_g (N, O) . W_g^T, rounded to bf16 after each group.
    bf16* dinp = static_cast<bf16*>(p.dinp);
    const bf16* saved = static_cast<const bf16*>(p.dinp_act_saved);
    for (int g = 0; g < G; ++g) {
      const bool add = g > 0 || p.accumulate_dinp;
      const Bf16Gemm gemm{N, I, O, dout + g * O, ldo, false, weight(g), out_in ? I : O, !out_in};
      gemms.run(gemm, [&](int m0, int rows, int n0, int cols, const float* acc, int ld) {
        for (int r = 0; r < rows; ++r) {
          const float* a = acc + static_cast<size_t>(r) * ld;
          const size_t at = static_cast<size_t>(m0 + r) * I + n0;
          bf16* d = dinp + at;
          if (p.dinp_act == Activation::GELU) {
#pragma omp simd
            for (int c = 0; c < cols; ++c)
              d[c] = to_bf16(a[c] * scale * kmath::gelu_grad(to_float(saved[at + c]), FastTanh{}));
          } else if (p.dinp_act == Activation::TANH) {
#pragma omp simd
            for (int c = 0; c < cols; ++c)
              d[c] = to_bf16(round_to_bf16(a[c] * scale) * kmath::tanh_grad_from_output(to_float(saved[at + c])));
          } else if (add) {
#pragma omp simd
            for (int c = 0; c < cols; ++c) d[c] = to_bf16(a[c] * scale + to_float(d[c]));
          } else {
#pragma omp simd
            for (int c = 0; c < cols; ++c) d[c] = to_bf16(a[c] * scale);
          }
        }
      });
    }
    if (p.dinp_act != Activation::NONE && p.dinp_act_dbias)
      add_column_sums(static_cast<float*>(p.dinp_act_dbias), dinp, N, I, I);
  }
  for (int g = 0; g < G; ++g) {
    const bf16* dout_g = dout + g * O;
    if (p.dweight) {
      float* dweight = static_cast<float*>(p.dweight) + g * p.weight_stride;
      const int cols_total = out_in ? I : O;
      // OUT_IN: (O, I) += dout^T . inp; IN_OUT: (I, O) += inp^T . dout.
      const Bf16Gemm gemm = out_in ? Bf16Gemm{O, I, N, dout_g, ldo, true, inp, I, false}
                                   : Bf16Gemm{I, O, N, inp, I, true, dout_g, ldo, false};
      gemms.run(gemm, [&](int m0, int rows, int n0, int cols, const float* acc, int ld) {
        for (int r = 0; r < rows; ++r) {
          const float* a = acc + static_cast<size_t>(r) * ld;
          float* d = dweight + static_cast<size_t>(m0 + r) * cols_total + n0;
#pragma omp simd
          for (int c = 0; c < cols; ++c) d[c] += a[c] * dweight_scale;
        }
      });
    }
    if (p.dbias)
      add_column_sums(static_cast<float*>(p.dbias) + g * p.bias_stride, static_cast<const bf16*>(p.dout) + g * O, N, O,
                      ldo);
  }
}

}  // namespace

void linear_forward(const ops::LinearForward& p, Bf16GemmContext& gemms, const Fp8Work* fp8) {
  const int N = p.N, I = p.I, O = p.O, G = p.groups;
  const size_t ldo = p.ldo ? p.ldo : static_cast<size_t>(G) * O;
  BERT_CHECK(G >= 1 && ldo >= static_cast<size_t>(G) * O, "linear: ", G, " groups of ", O, " columns in rows of ", ldo);
  BERT_CHECK(p.act != Activation::GELU || p.pre, "linear: GELU needs its pre-activation buffer");
  const float* s = p.precision.scale;
  if (!s) {
    linear_forward_on(p, gemms, {static_cast<const bf16*>(p.inp), static_cast<const bf16*>(p.weight), p.weight_stride,
                                 nullptr}, 1.0f);
    return;
  }
  BERT_CHECK(fp8, "linear: an FP8 precision on a backend without an FP8 recipe");
  record(p.precision.amax, FP8_INPUT,
         quantize_fp8(fp8->inp, I, static_cast<const bf16*>(p.inp), I, N, I, s[FP8_INPUT], fp8_type(FP8_INPUT)));
  record(p.precision.amax, FP8_WEIGHT, quantize_weight(fp8->weight, p.weight, p.weight_stride, G, I, O, s[FP8_WEIGHT]));
  linear_forward_on(p, gemms, {fp8->inp, fp8->weight, static_cast<size_t>(I) * O, nullptr},
                    inverse(s[FP8_INPUT]) * inverse(s[FP8_WEIGHT]));
}

void linear_backward(const ops::LinearBackward& p, Bf16GemmContext& gemms, const Fp8Work* fp8) {
  const int N = p.N, I = p.I, O = p.O, G = p.groups;
  const int ldo = p.ldo ? p.ldo : G * O;
  BERT_CHECK(G >= 1 && ldo >= G * O, "linear backward: ", G, " groups of ", O, " columns in rows of ", ldo);
  BERT_CHECK(p.dinp_act == Activation::NONE || (!p.accumulate_dinp && p.dinp_act_saved),
             "linear backward: a fused activation backward overwrites dinp and needs its saved tensor");
  BERT_CHECK(p.dinp_act == Activation::NONE || G == 1, "linear backward: a fused activation backward needs one group");
  const float* s = p.precision.scale;
  if (!s) {
    linear_backward_on(p, gemms, {static_cast<const bf16*>(p.inp), static_cast<const bf16*>(p.weight), p.weight_stride,
                                  static_cast<const bf16*>(p.dout)}, 1.0f, 1.0f);
    return;
  }
  BERT_CHECK(fp8, "linear backward: an FP8 precision on a backend without an FP8 recipe");
  record(p.precision.amax, FP8_GRAD,
         quantize_fp8(fp8->dout, ldo, static_cast<const bf16*>(p.dout), ldo, N, G * O, s[FP8_GRAD], fp8_type(FP8_GRAD)));
  // The forward's operands again, with the forward's scales (no amax: the forward recorded them).
  if (p.dweight)
    quantize_fp8(fp8->inp, I, static_cast<const bf16*>(p.inp), I, N, I, s[FP8_INPUT], fp8_type(FP8_INPUT));
  if (p.dinp) quantize_weight(fp8->weight, p.weight, p.weight_stride, G, I, O, s[FP8_WEIGHT]);
  const float g = inverse(s[FP8_GRAD]);
  linear_backward_on(p, gemms, {fp8->inp, fp8->weight, static_cast<size_t>(I) * O, fp8->dout},
                     g * inverse(s[FP8_WEIGHT]), inverse(s[FP8_INPUT]) * g);
}

#define BERTPERF_INSTANTIATE(T)                                                                 \
  template void gemm<T>(bool, bool, int, int, int, T, const T*, int, const T*, int, T, T*, int); \
  template void linear_forward<T>(const ops::LinearForward&);                                   \
  template void linear_backward<T>(const ops::LinearBackward&);
BERTPERF_INSTANTIATE(float)
BERTPERF_INSTANTIATE(double)
#undef BERTPERF_INSTANTIATE

}  // namespace bertperf::cpu
