// CPU elementwise ops: tanh-GELU and tanh with their backwards, bias + dropout + residual, and ActivationBackward
// (cpu_ops.h). The formulas are kernel_math.h's.
#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_math.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/kernel_math.h"

namespace bertperf::cpu {

template <typename T>
void gelu_forward(T* out, const T* inp, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (size_t i = 0; i < n; ++i) out[i] = kmath::gelu(inp[i], FastTanh{});
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (size_t i = 0; i < n; ++i) dinp[i] = dout[i] * kmath::gelu_grad(inp[i], FastTanh{});
}

template <typename T>
void tanh_forward(T* out, const T* inp, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (size_t i = 0; i < n; ++i) out[i] = tanh_t<T>(inp[i]);
}

template <typename T>
void tanh_backward(T* dinp, const T* out, const T* dout, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (size_t i = 0; i < n; ++i) dinp[i] = dout[i] * kmath::tanh_grad_from_output(out[i]);
}

template <typename T>
void activation_backward(const ops::ActivationBackward& p) {
  T* dinp = static_cast<T*>(p.dinp);
  const T* dout = static_cast<const T*>(p.dout);
  const T* saved = static_cast<const T*>(p.saved);
  switch (p.act) {
    case Activation::GELU: gelu_backward<T>(dinp, saved, dout, p.n); return;
    case Activation::TANH: tanh_backward<T>(dinp, saved, dout, p.n); return;
    case Activation::NONE: break;
  }
  BERT_CHECK(false, "activation backward needs an activation");
}

// bf16: dinp = bf16(dout * act'(saved)), in fp32 from the bf16 operands.
template <>
void activation_backward<bf16>(const ops::ActivationBackward& p) {
  BERT_CHECK(p.act != Activation::NONE, "activation backward needs an activation");
  bf16* dinp = static_cast<bf16*>(p.dinp);
  const bf16* dout = static_cast<const bf16*>(p.dout);
  const bf16* saved = static_cast<const bf16*>(p.saved);
  const size_t n = p.n;
  if (p.act == Activation::GELU) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
    for (size_t i = 0; i < n; ++i) dinp[i] = to_bf16(to_float(dout[i]) * kmath::gelu_grad(to_float(saved[i]), FastTanh{}));
  } else {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
    for (size_t i = 0; i < n; ++i) dinp[i] = to_bf16(to_float(dout[i]) * kmath::tanh_grad_from_output(to_float(saved[i])));
  }
}

namespace {

// y[c] = (x[c] + b[c]) * mult[c] + res[c] for c < count, where a null b, mult or res drops its term.
template <typename T>
inline void bias_dropout_residual_span(T* y, const T* x, const T* b, const T* mult, const T* res, size_t count) {
  // One vectorised loop per combination; the branches stay outside.
  if (mult) {
    if (b && res) {
#pragma omp simd
      for (size_t c = 0; c < count; ++c) y[c] = (x[c] + b[c]) * mult[c] + res[c];
    } else if (b) {
#pragma omp simd
      for (size_t c = 0; c < count; ++c) y[c] = (x[c] + b[c]) * mult[c];
    } else if (res) {
#pragma omp simd
      for (size_t c = 0; c < count; ++c) y[c] = x[c] * mult[c] + res[c];
    } else {
#pragma omp simd
      for (size_t c = 0; c < count; ++c) y[c] = x[c] * mult[c];
    }
  } else {
    if (b && res) {
#pragma omp simd
      for (size_t c = 0; c < count; ++c) y[c] = (x[c] + b[c]) + res[c];
    } else if (b) {
#pragma omp simd
      for (size_t c = 0; c < count; ++c) y[c] = x[c] + b[c];
    } else if (res) {
#pragma omp simd
      for (size_t c = 0; c < count; ++c) y[c] = x[c] + res[c];
    } else {
#pragma omp simd
      for (size_t c = 0; c < count; ++c) y[c] = x[c];
    }
  }
}

}  // namespace

template <typename T>
void bias_dropout_residual_forward(T* out, const T* inp, const T* bias, const T* residual, int N, int C,
                                   float drop_prob, RngKey key) {
  const T scale = dropout_scale<T>(drop_prob);
  const size_t cs = static_cast<size_t>(C), n = N * cs;
  // By rows, so the bias lines up; dropout multipliers a row (or a kDropoutChunk of it) at a time.
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int r = 0; r < N; ++r) {
    const size_t row = r * cs;
    for (size_t c0 = 0; c0 < cs; c0 += kDropoutChunk) {
      const size_t count = std::min(kDropoutChunk, cs - c0);
      T mult[kDropoutChunk];
      if (drop_prob > 0.0f) dropout_multipliers(mult, row + c0, count, drop_prob, key, scale);
      bias_dropout_residual_span(out + row + c0, inp + row + c0, bias ? bias + c0 : nullptr,
                                 drop_prob > 0.0f ? mult : nullptr, residual ? residual + row + c0 : nullptr, count);
    }
  }
}

template <typename T>
void dropout_backward(T* dinp, const T* dout, size_t n, float drop_prob, RngKey key) {
  const T scale = dropout_scale<T>(drop_prob);
  if (drop_prob == 0.0f) {
    if (dinp != dout) std::copy(dout, dout + n, dinp);
    return;
  }
  const size_t chunks = (n + kDropoutChunk - 1) / kDropoutChunk;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (size_t ch = 0; ch < chunks; ++ch) {
    const size_t i0 = ch * kDropoutChunk, count = std::min(kDropoutChunk, n - i0);
    T mult[kDropoutChunk];
    dropout_multipliers(mult, i0, count, drop_prob, key, scale);
#pragma omp simd
    for (size_t i = 0; i < count; ++i) dinp[i0 + i] = dout[i0 + i] * mult[i];
  }
}

#define BERTPERF_INSTANTIATE(T)                                                                              \
  template void gelu_forward<T>(T*, const T*, size_t);                                                      \
  template void gelu_backward<T>(T*, const T*, const T*, size_t);                                           \
  template void tanh_forward<T>(T*, const T*, size_t);                                                      \
  template void tanh_backward<T>(T*, const T*, const T*, size_t);                                           \
  template void activation_backward<T>(const ops::ActivationBackward&);                                     \
  template void bias_dropout_residual_forward<T>(T*, const T*, const T*, const T*, int, int, float, RngKey); \
  template void dropout_backward<T>(T*, const T*, size_t, float, RngKey);
BERTPERF_INSTANTIATE(float)
BERTPERF_INSTANTIATE(double)
#undef BERTPERF_INSTANTIATE

}  // namespace bertperf::cpu
