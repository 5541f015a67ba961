// CPU LayerNorm over the last axis, eps 1e-12 and biased variance as the reference (cpu_ops.h).
#include <cmath>

#include "backends/cpu/cpu_math.h"
#include "backends/cpu/cpu_ops.h"

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
    const T rs = T(1) / std::sqrt(sq / T(C) + T(ops::kLayerNormEps));
    T* y = out + n * cs;
#pragma omp simd
    for (int c = 0; c < C; ++c) y[c] = (x[c] - mu) * rs * gamma[c] + beta[c];
    mean[n] = mu;
    rstd[n] = rs;
  }
}

template <typename T>
void layernorm_backward(T* dinp, T* dgamma, T* dbeta, const T* dout, const T* inp, const T* gamma,
                        const T* mean, const T* rstd, int N, int C) {
  const size_t cs = static_cast<size_t>(C);
  if (dinp) {
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * gamma.
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
      for (int c = 0; c < C; ++c) {
        const T xhat = (x[c] - mu) * rs;
        dx[c] += rs * (dy[c] * gamma[c] - g_mean - xhat * gx_mean);
      }
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

#define BERTPERF_INSTANTIATE(T)                                                                          \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int, int);               \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int, \
                                      int);
BERTPERF_INSTANTIATE(float)
BERTPERF_INSTANTIATE(double)
#undef BERTPERF_INSTANTIATE

}  // namespace bertperf::cpu
