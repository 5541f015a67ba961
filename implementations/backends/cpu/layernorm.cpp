// CPU LayerNorm over the last axis, eps 1e-12 and biased variance as the reference, and the post-LN sub-layer end
// built on it: LayerNorm(dropout(inp + bias) + residual) (cpu_ops.h). The formulas are kernel_math.h's.
#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_math.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/kernel_math.h"

namespace bertperf::cpu {

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* gamma, const T* beta, int N, int C) {
  const size_t cs = static_cast<size_t>(C);
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * C > kParallelMin)
  for (int n = 0; n < N; ++n) {
    const T* x = inp + n * cs;
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; ++c) sum += x[c];
    const T mu = sum / T(C);
    // Two passes: sum((x - mu)^2) keeps its precision when |mu| >> std, E[x^2] - mu^2 would not.
    T sq = 0;
#pragma omp simd reduction(+ : sq)
    for (int c = 0; c < C; ++c) sq += (x[c] - mu) * (x[c] - mu);
    const T rs = kmath::layernorm_rstd(sq / T(C), Sqrt{});
    T* y = out + n * cs;
#pragma omp simd
    for (int c = 0; c < C; ++c) y[c] = kmath::layernorm_out(x[c], mu, rs, gamma[c], beta[c]);
    mean[n] = mu;
    rstd[n] = rs;
  }
}

template <typename T>
void layernorm_backward(T* dinp, T* dgamma, T* dbeta, const T* dout, const T* inp, const T* gamma,
                        const T* mean, const T* rstd, int N, int C) {
  const size_t cs = static_cast<size_t>(C);
  if (dinp) {
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * C > kParallelMin)
    for (int n = 0; n < N; ++n) {
      const T* x = inp + n * cs;
      const T* dy = dout + n * cs;
      const T mu = mean[n], rs = rstd[n];
      T g_sum = 0, gx_sum = 0;
#pragma omp simd reduction(+ : g_sum, gx_sum)
      for (int c = 0; c < C; ++c) {
        const T g = dy[c] * gamma[c];
        g_sum += g;
        gx_sum += g * (x[c] - mu) * rs;
      }
      const T g_mean = g_sum / T(C), gx_mean = gx_sum / T(C);
      T* dx = dinp + n * cs;
#pragma omp simd
      for (int c = 0; c < C; ++c) dx[c] = kmath::layernorm_dx(dy[c], gamma[c], (x[c] - mu) * rs, rs, g_mean, gx_mean);
    }
  }
  if (dgamma || dbeta) {
    for_column_blocks(C, 2 * static_cast<size_t>(N), [&](int c0, int c1) {
      T acc_gamma[kMaxColumnBlock] = {}, acc_beta[kMaxColumnBlock] = {};
      const int w = c1 - c0;
      for (int n = 0; n < N; ++n) {
        const T* x = inp + n * cs + c0;
        const T* dy = dout + n * cs + c0;
        const T mu = mean[n], rs = rstd[n];
#pragma omp simd
        for (int c = 0; c < w; ++c) {
          acc_gamma[c] += dy[c] * (x[c] - mu) * rs;
          acc_beta[c] += dy[c];
        }
      }
      for (int c = 0; c < w; ++c) {
        if (dgamma) dgamma[c0 + c] += acc_gamma[c];
        if (dbeta) dbeta[c0 + c] += acc_beta[c];
      }
    });
  }
}

template <typename T>
void residual_layernorm_forward(const ops::ResidualLayerNormForward& p) {
  const T* ln_input = static_cast<const T*>(p.inp);
  if (p.bias || p.residual || p.dropout.prob > 0.0f) {
    BERT_CHECK(p.sum, "residual LayerNorm with a bias, residual or dropout must save its sum");
    bias_dropout_residual_forward<T>(static_cast<T*>(p.sum), ln_input, static_cast<const T*>(p.bias),
                                     static_cast<const T*>(p.residual), p.N, p.C, p.dropout.prob,
                                     dropout_key(p.dropout));
    ln_input = static_cast<const T*>(p.sum);
  } else if (p.sum && p.sum != p.inp) {
    std::copy(ln_input, ln_input + static_cast<size_t>(p.N) * p.C, static_cast<T*>(p.sum));
  }
  layernorm_forward<T>(static_cast<T*>(p.out), static_cast<T*>(p.mean), static_cast<T*>(p.rstd), ln_input,
                       static_cast<const T*>(p.gamma), static_cast<const T*>(p.beta), p.N, p.C);
}

template <typename T>
void residual_layernorm_backward(const ops::ResidualLayerNormBackward& p) {
  BERT_CHECK(p.dresidual || (!p.dbias && p.dropout.prob == 0.0f),
             "residual LayerNorm backward with a bias or dropout needs dresidual");
  const size_t n = static_cast<size_t>(p.N) * p.C;
  // The LayerNorm input's gradient is the residual's; without a residual branch (a plain LayerNorm) it is dinp's.
  T* dsum = static_cast<T*>(p.dresidual ? p.dresidual : p.dinp);
  layernorm_backward<T>(dsum, static_cast<T*>(p.dgamma), static_cast<T*>(p.dbeta), static_cast<const T*>(p.dout),
                        static_cast<const T*>(p.sum), static_cast<const T*>(p.gamma), static_cast<const T*>(p.mean),
                        static_cast<const T*>(p.rstd), p.N, p.C);
  T* dinp = static_cast<T*>(p.dinp);
  if (p.dresidual) dropout_backward<T>(dinp, dsum, n, p.dropout.prob, dropout_key(p.dropout));
  if (p.dbias) add_column_sums(static_cast<T*>(p.dbias), dinp, p.N, p.C, p.C);
}

// ---- bf16 (ops.h's rounding table) ---------------------------------------------------------------------------
// Forward: x = (inp + bias) * mask + residual in fp32 from the bf16 operands; sum = bf16(x); the statistics are x's;
// out = bf16(LayerNorm(x)). Backward: dx in fp32 from the bf16 dout and the saved bf16 sum; dresidual = bf16(dx);
// dinp = bf16(dresidual * mask) (the dropout backward of the rounded residual gradient, as a separate op would),
// or bf16(dx) for a plain LayerNorm; dgamma, dbeta and dbias fp32 sums of the bf16 rows.

template <>
void residual_layernorm_forward<bf16>(const ops::ResidualLayerNormForward& p) {
  const int N = p.N, C = p.C;
  check_ln_row(C);
  const bool fused = p.bias || p.residual || p.dropout.prob > 0.0f;
  BERT_CHECK(!fused || p.sum, "residual LayerNorm with a bias, residual or dropout must save its sum");
  const float drop = p.dropout.prob;
  const float scale = dropout_scale<float>(drop);
  const RngKey key = dropout_key(p.dropout);
  const bf16* inp = static_cast<const bf16*>(p.inp);
  const bf16* bias = static_cast<const bf16*>(p.bias);
  const bf16* residual = static_cast<const bf16*>(p.residual);
  bf16* sum = static_cast<bf16*>(p.sum);
  const size_t cs = static_cast<size_t>(C);
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * C > kParallelMin)
  for (int n = 0; n < N; ++n) {
    float x[kMaxLnRow], mult[kMaxLnRow];
    const bf16* in = inp + n * cs;
#pragma omp simd
    for (int c = 0; c < C; ++c) x[c] = to_float(in[c]);
    if (bias) {
#pragma omp simd
      for (int c = 0; c < C; ++c) x[c] += to_float(bias[c]);
    }
    if (drop > 0.0f) {
      dropout_multipliers(mult, n * cs, cs, drop, key, scale);
#pragma omp simd
      for (int c = 0; c < C; ++c) x[c] *= mult[c];
    }
    if (residual) {
      const bf16* res = residual + n * cs;
#pragma omp simd
      for (int c = 0; c < C; ++c) x[c] += to_float(res[c]);
    }
    if (sum && (fused || p.sum != p.inp)) {
      bf16* s = sum + n * cs;
#pragma omp simd
      for (int c = 0; c < C; ++c) s[c] = to_bf16(x[c]);
    }
    layernorm_row_bf16(static_cast<bf16*>(p.out) + n * cs, static_cast<float*>(p.mean) + n,
                       static_cast<float*>(p.rstd) + n, x, static_cast<const bf16*>(p.gamma),
                       static_cast<const bf16*>(p.beta), nullptr, C);
  }
}

template <>
void residual_layernorm_backward<bf16>(const ops::ResidualLayerNormBackward& p) {
  BERT_CHECK(p.dresidual || (!p.dbias && p.dropout.prob == 0.0f),
             "residual LayerNorm backward with a bias or dropout needs dresidual");
  const int N = p.N, C = p.C;
  check_ln_row(C);
  const float drop = p.dropout.prob;
  const float scale = dropout_scale<float>(drop);
  const RngKey key = dropout_key(p.dropout);
  const bf16* dout = static_cast<const bf16*>(p.dout);
  const bf16* x = static_cast<const bf16*>(p.sum);
  const bf16* gamma = static_cast<const bf16*>(p.gamma);
  const float* mean = static_cast<const float*>(p.mean);
  const float* rstd = static_cast<const float*>(p.rstd);
  bf16* dinp = static_cast<bf16*>(p.dinp);
  bf16* dres = static_cast<bf16*>(p.dresidual);
  const size_t cs = static_cast<size_t>(C);
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * C > kParallelMin)
  for (int n = 0; n < N; ++n) {
    float dy[kMaxLnRow], dx[kMaxLnRow], mult[kMaxLnRow];
    const bf16* d = dout + n * cs;
#pragma omp simd
    for (int c = 0; c < C; ++c) dy[c] = to_float(d[c]);
    layernorm_dx_row_bf16(dx, dy, x + n * cs, gamma, mean[n], rstd[n], C);
    bf16* di = dinp + n * cs;
    if (!dres) {
#pragma omp simd
      for (int c = 0; c < C; ++c) di[c] = to_bf16(dx[c]);
      continue;
    }
    bf16* dr = dres + n * cs;
#pragma omp simd
    for (int c = 0; c < C; ++c) dr[c] = to_bf16(dx[c]);
    if (drop > 0.0f) {
      dropout_multipliers(mult, n * cs, cs, drop, key, scale);
#pragma omp simd
      for (int c = 0; c < C; ++c) di[c] = to_bf16(to_float(dr[c]) * mult[c]);
    } else if (di != dr) {
      std::copy(dr, dr + C, di);
    }
  }
  float* dgamma = static_cast<float*>(p.dgamma);
  float* dbeta = static_cast<float*>(p.dbeta);
  if (dgamma || dbeta) {
    for_column_blocks(C, 2 * static_cast<size_t>(N), [&](int c0, int c1) {
      float acc_gamma[kMaxColumnBlock] = {}, acc_beta[kMaxColumnBlock] = {};
      const int w = c1 - c0;
      for (int n = 0; n < N; ++n) {
        const bf16* xr = x + n * cs + c0;
        const bf16* dy = dout + n * cs + c0;
        const float mu = mean[n], rs = rstd[n];
#pragma omp simd
        for (int c = 0; c < w; ++c) {
          const float g = to_float(dy[c]);
          acc_gamma[c] += g * (to_float(xr[c]) - mu) * rs;
          acc_beta[c] += g;
        }
      }
      for (int c = 0; c < w; ++c) {
        if (dgamma) dgamma[c0 + c] += acc_gamma[c];
        if (dbeta) dbeta[c0 + c] += acc_beta[c];
      }
    });
  }
  if (p.dbias) add_column_sums(static_cast<float*>(p.dbias), dinp, N, C, C);
}

#define BERTPERF_INSTANTIATE(T)                                                                          \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int, int);               \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int, \
                                      int);                                                              \
  template void residual_layernorm_forward<T>(const ops::ResidualLayerNormForward&);                    \
  template void residual_layernorm_backward<T>(const ops::ResidualLayerNormBackward&);
BERTPERF_INSTANTIATE(float)
BERTPERF_INSTANTIATE(double)
#undef BERTPERF_INSTANTIATE

}  // namespace bertperf::cpu
