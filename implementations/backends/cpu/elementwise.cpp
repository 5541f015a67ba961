// CPU elementwise ops: tanh-GELU, tanh, and dropout + residual add (cpu_ops.h).
#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_math.h"
#include "backends/cpu/cpu_ops.h"

namespace bertperf::cpu {

namespace {

// GELU constants of the reference: sqrt(2/pi) and the cubic coefficient.
constexpr double kGeluScale = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;

}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, size_t n) {
  const T s = T(kGeluScale), a = T(kGeluCubic);
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (size_t i = 0; i < n; ++i) {
    const T x = inp[i];
    out[i] = T(0.5) * x * (T(1) + tanh_t<T>(s * (x + a * x * x * x)));
  }
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) {
  const T s = T(kGeluScale), a = T(kGeluCubic);
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (size_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T t = tanh_t<T>(s * (x + a * x * x * x));
    const T du = s * (T(1) + T(3) * a * x * x);
    dinp[i] += dout[i] * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du);
  }
}

template <typename T>
void tanh_forward(T* out, const T* inp, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (size_t i = 0; i < n; ++i) out[i] = tanh_t<T>(inp[i]);
}

template <typename T>
void tanh_backward(T* dinp, const T* out, const T* dout, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (size_t i = 0; i < n; ++i) dinp[i] += dout[i] * (T(1) - out[i] * out[i]);
}

template <typename T>
void dropout_residual_forward(T* out, const T* inp, const T* residual, size_t n, float drop_prob, RngKey key) {
  const T scale = dropout_scale<T>(drop_prob);
  if (drop_prob == 0.0f) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
    for (size_t i = 0; i < n; ++i) out[i] = inp[i] + (residual ? residual[i] : T(0));
    return;
  }
  const size_t chunks = (n + kDropoutChunk - 1) / kDropoutChunk;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (size_t ch = 0; ch < chunks; ++ch) {
    const size_t i0 = ch * kDropoutChunk, count = std::min(kDropoutChunk, n - i0);
    T mult[kDropoutChunk];
    dropout_multipliers(mult, i0, count, drop_prob, key, scale);
    if (residual) {
#pragma omp simd
      for (size_t i = 0; i < count; ++i) out[i0 + i] = inp[i0 + i] * mult[i] + residual[i0 + i];
    } else {
#pragma omp simd
      for (size_t i = 0; i < count; ++i) out[i0 + i] = inp[i0 + i] * mult[i];
    }
  }
}

template <typename T>
void dropout_residual_backward(T* dinp, T* dresidual, const T* dout, size_t n, float drop_prob, RngKey key) {
  const T scale = dropout_scale<T>(drop_prob);
  if (dresidual) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
    for (size_t i = 0; i < n; ++i) dresidual[i] += dout[i];
  }
  if (!dinp) return;
  if (drop_prob == 0.0f) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
    for (size_t i = 0; i < n; ++i) dinp[i] += dout[i];
    return;
  }
  const size_t chunks = (n + kDropoutChunk - 1) / kDropoutChunk;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (size_t ch = 0; ch < chunks; ++ch) {
    const size_t i0 = ch * kDropoutChunk, count = std::min(kDropoutChunk, n - i0);
    T mult[kDropoutChunk];
    dropout_multipliers(mult, i0, count, drop_prob, key, scale);
#pragma omp simd
    for (size_t i = 0; i < count; ++i) dinp[i0 + i] += dout[i0 + i] * mult[i];
  }
}

#define BERTPERF_INSTANTIATE(T)                                                                 \
  template void gelu_forward<T>(T*, const T*, size_t);                                         \
  template void gelu_backward<T>(T*, const T*, const T*, size_t);                              \
  template void tanh_forward<T>(T*, const T*, size_t);                                         \
  template void tanh_backward<T>(T*, const T*, const T*, size_t);                              \
  template void dropout_residual_forward<T>(T*, const T*, const T*, size_t, float, RngKey);    \
  template void dropout_residual_backward<T>(T*, T*, const T*, size_t, float, RngKey);
BERTPERF_INSTANTIATE(float)
BERTPERF_INSTANTIATE(double)
#undef BERTPERF_INSTANTIATE

}  // namespace bertperf::cpu
