// The per-element and per-row math every backend shares, as inline functions callable from host and device code
// (BERT_HOST_DEVICE, core/philox.h): the reference's tanh-GELU and its derivative, the LayerNorm element formulas,
// the cross-entropy row, the LAMB element update and the step's schedule, dropout (Philox itself is core/philox.h),
// and rounding to bf16. The CPU kernels (backends/cpu), the CUDA kernels (backends/cuda) and the optimizer's host
// schedule call these, so the formulas exist once;
// the CPU tests exercise them against finite differences, direct formulas and exact references.
//
// Functions that need tanh or exp take them as a callable, so each backend supplies its fast version (the CPU's
// vectorisable approximations, the GPU's intrinsics) and the formula around it stays shared.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/philox.h"

namespace bertperf::kmath {

// sqrt(2/pi) and the cubic coefficient of the reference's GELU.
inline constexpr double kGeluScale = 0.7978845608028654;
inline constexpr double kGeluCubic = 0.044715;

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
template <typename T, typename Tanh>
BERT_HOST_DEVICE T gelu(T x, Tanh tanh_fn) {
  const T s = T(kGeluScale), a = T(kGeluCubic);
  return T(0.5) * x * (T(1) + tanh_fn(s * (x + a * x * x * x)));
}

// d gelu / dx
template <typename T, typename Tanh>
BERT_HOST_DEVICE T gelu_grad(T x, Tanh tanh_fn) {
  const T s = T(kGeluScale), a = T(kGeluCubic);
  const T t = tanh_fn(s * (x + a * x * x * x));
  const T du = s * (T(1) + T(3) * a * x * x);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du;
}

// d tanh / dx from the output y = tanh(x).
template <typename T>
BERT_HOST_DEVICE T tanh_grad_from_output(T y) {
  return T(1) - y * y;
}

// ---- LayerNorm (eps 1e-12, biased variance) ---------------------------------------------------------------
// rstd from the row's mean square deviation sum((x - mean)^2) / C.
template <typename T, typename Sqrt>
BERT_HOST_DEVICE T layernorm_rstd(T variance, Sqrt sqrt_fn) {
  return T(1) / sqrt_fn(variance + T(1e-12f));
}

// y = (x - mean) * rstd * gamma + beta
template <typename T>
BERT_HOST_DEVICE T layernorm_out(T x, T mean, T rstd, T gamma, T beta) {
  return (x - mean) * rstd * gamma + beta;
}

// dx = rstd * (dy * gamma - mean(dy * gamma) - xhat * mean(dy * gamma * xhat)), with g_mean and gx_mean those two
// row means.
template <typename T>
BERT_HOST_DEVICE T layernorm_dx(T dy, T gamma, T xhat, T rstd, T g_mean, T gx_mean) {
  return rstd * (dy * gamma - g_mean - xhat * gx_mean);
}

// ---- dropout -----------------------------------------------------------------------------------------------
// The multiplier of element `element`: 1/(1-p) when kept, 0 when dropped.
template <typename T>
BERT_HOST_DEVICE T dropout_multiplier(RngKey key, uint64_t element, float drop_prob, T keep_scale) {
  return dropout_keep(key, element, drop_prob) ? keep_scale : T(0);
}

// The attention-probability dropout element of (sequence s, head h, query i, key j), positions within the
// sequence (ops.h, AttentionForward).
BERT_HOST_DEVICE uint64_t attention_dropout_element(int64_t s, int h, int i, int j, int heads, int max_seqlen) {
  return ((static_cast<uint64_t>(s) * heads + h) * max_seqlen + i) * static_cast<uint64_t>(max_seqlen) + j;
}

// ---- softmax cross-entropy row -----------------------------------------------------------------------------
// loss = logsumexp(x) - x[label]
template <typename T>
BERT_HOST_DEVICE T cross_entropy_loss(T lse, T x_label) {
  return lse - x_label;
}

// d loss / d x_j = scale * (softmax_j - [j == label]), softmax_j = exp(x_j - lse).
template <typename T, typename Exp>
BERT_HOST_DEVICE T cross_entropy_grad(T x, T lse, bool is_label, T scale, Exp exp_fn) {
  return scale * (exp_fn(x - lse) - (is_label ? T(1) : T(0)));
}

// ---- LAMB element update -----------------------------------------------------------------------------------
struct LambElementParams {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float inv_bias_correction1, inv_bias_correction2;
  float epsilon;
  float decay;  // weight_decay, or 0 for an excluded tensor
};

// The moments after gradient g.
template <typename T>
BERT_HOST_DEVICE void lamb_moments(T& m, T& v, T g, const LambElementParams& p) {
  m = T(p.beta1) * m + T(p.one_minus_beta1) * g;
  v = T(p.beta2) * v + T(p.one_minus_beta2) * g * g;
}

// The update direction u = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + decay * w.
template <typename T, typename Sqrt>
BERT_HOST_DEVICE T lamb_direction(T m, T v, T w, const LambElementParams& p, Sqrt sqrt_fn) {
  return (m * T(p.inv_bias_correction1)) / (sqrt_fn(v * T(p.inv_bias_correction2)) + T(p.epsilon)) +
         T(p.decay) * w;
}

// The trust ratio of a tensor from |w| and |u| (f64 norms): 1 for an excluded tensor or a zero norm.
BERT_HOST_DEVICE float lamb_trust_ratio(double w_norm, double u_norm, bool excluded) {
  return (excluded || !(w_norm > 0) || !(u_norm > 0)) ? 1.0f : static_cast<float>(w_norm / u_norm);
}

// ---- the step's schedule ---------------------------------------------------------------------------------------
// The run's constants from which a step's learning rate and LAMB bias corrections follow, given the number of updates
// already made (the reference's global_step before its increment). The host (optim/lr_schedule, Lamb::fill_scalars)
// computes them with these functions, and so will an op that computes them on the device from a step counter, so
// host and device values are one function's. pow is the C library's on the host and CUDA's on the device (within
// 2 ulp of it in double, so the float values the ops read agree in all but rare last-bit cases).
struct StepSchedule {
  double learning_rate;  // the base rate
  double beta1, beta2;   // LAMB's, for the bias corrections
  double poly_power;
  int64_t train_steps, warmup_steps, start_warmup_step;  // train_steps > 0
};

struct StepScheduleValues {
  double learning_rate;         // of the update made after `updates_done` updates
  double inv_bias_correction1;  // 1 / (1 - beta1^t), t = updates_done + 1
  double inv_bias_correction2;  // 1 / (1 - beta2^t)
};

// The reference's schedule, quirks included (optim/lr_schedule.h says which): linear warmup over
// step - start_warmup_step < warmup_steps, then polynomial decay taken at `step`, held at 0 from train_steps.
BERT_HOST_DEVICE double scheduled_learning_rate(const StepSchedule& s, int64_t step) {
  const double T = static_cast<double>(s.train_steps);
  const double decayed =
      s.learning_rate * pow(1.0 - static_cast<double>(step < s.train_steps ? step : s.train_steps) / T, s.poly_power);
  if (s.warmup_steps == 0) return decayed;
  const int64_t since_start = step - s.start_warmup_step;
  if (since_start < s.warmup_steps)
    return s.learning_rate * static_cast<double>(since_start) / static_cast<double>(s.warmup_steps);
  return decayed;
}

// The bias corrections are formed in double as reciprocals, so a large t loses nothing before a cast to float.
BERT_HOST_DEVICE StepScheduleValues step_schedule_at(const StepSchedule& s, int64_t updates_done) {
  const double t = static_cast<double>(updates_done + 1);
  return {scheduled_learning_rate(s, updates_done), 1.0 / (1.0 - pow(s.beta1, t)), 1.0 / (1.0 - pow(s.beta2, t))};
}

// ---- rounding to bf16 ---------------------------------------------------------------------------------------
// The bf16 nearest to x (ties to even), as its 16 bits, in one rounding: going through float would round twice, and
// a double just past the midpoint of two bf16 neighbours that float rounds onto the midpoint would then go to the
// even neighbour rather than the nearer one. Overflow gives infinity (as round to nearest does: from the midpoint
// above the largest bf16 up), NaN the quiet NaN of x's sign, and bf16's subnormals are kept.
BERT_HOST_DEVICE uint16_t bf16_bits(double x) {
#ifdef __CUDA_ARCH__
  const uint64_t bits = static_cast<uint64_t>(__double_as_longlong(x));
#else
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
#endif
  const uint16_t sign = static_cast<uint16_t>((bits >> 48) & 0x8000u);
  const uint64_t magnitude = bits & 0x7FFFFFFFFFFFFFFFull;
  if (magnitude > 0x7FF0000000000000ull) return sign | 0x7FC0u;  // NaN
  const int exponent = static_cast<int>(magnitude >> 52) - 1023;  // x = significand * 2^(exponent - 52)
  if (exponent > 127) return sign | 0x7F80u;                      // at least 2^128 (or infinite): infinity
  if (exponent < -134) return sign;                               // under half the smallest subnormal, 2^-133
  const uint64_t significand = (magnitude & 0x000FFFFFFFFFFFFFull) | (1ull << 52);
  // bf16's last place: 2^(exponent - 7) for a normal result, 2^-133 below 2^-126. Drop the bits under it.
  const int drop = exponent >= -126 ? 45 : -81 - exponent;  // 45 .. 53
  uint64_t kept = significand >> drop;
  const uint64_t rest = significand & ((1ull << drop) - 1), half = 1ull << (drop - 1);
  if (rest > half || (rest == half && (kept & 1u))) ++kept;
  // Normal: the biased exponent above 7 bits of fraction (a carry out of the fraction steps the exponent, up to
  // infinity's 0x7F80); subnormal: the fraction alone (a carry makes the smallest normal, 0x0080).
  const uint64_t result = exponent >= -126 ? (static_cast<uint64_t>(exponent + 127) << 7) + kept - 128 : kept;
  return sign | static_cast<uint16_t>(result);
}

}  // namespace bertperf::kmath
