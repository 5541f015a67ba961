// FP8: the two formats of the FP8 GEMMs, their exact conversions, and the delayed-scaling bookkeeping.
//
// The formats (OCP 8-bit floating point, as NVIDIA's Hopper and Transformer Engine use them):
//   E4M3  sign, 4 exponent bits (bias 7), 3 fraction bits; no infinity, NaN is S.1111.111; largest finite 448,
//         smallest normal 2^-6, smallest subnormal 2^-9. The forward's operands (activations and weights).
//   E5M2  sign, 5 exponent bits (bias 15), 2 fraction bits; IEEE-like: infinity S.11111.00, NaN S.11111.{01,10,11};
//         largest finite 57344, smallest normal 2^-14, smallest subnormal 2^-16. The backward's gradients.
// fp8_bits rounds an fp32 to nearest even and saturates every finite or infinite value beyond the largest finite one
// to it (CUDA's __NV_SATFINITE, what Transformer Engine's cast does); NaN becomes the canonical NaN 0x7F.
// fp8_value decodes any code exactly (E5M2's infinities and NaNs included). fp8_round is fp8_value(fp8_bits(x)) as
// float arithmetic without branches, for the loops that quantize whole tensors.
//
// Delayed scaling (Transformer Engine's DelayedScaling, NVIDIA's BERT recipe: history 1, margin 0): each quantized
// tensor has a scale s and an amax history of H entries. A tensor is quantized as q = fp8(x * s) and its product is
// scaled back by 1 / s; the op that quantizes it records max |x| into the history's current row. Before the next use
// the scales are updated from the history: a = the largest entry over all H rows,
//   s' = fp8_max / a / 2^margin   where a > 0, a is finite and s' is finite, else s' = s (an amax of 0 keeps it),
// then the rows move one place down (row h <- row h + 1, the last row <- row 0: torch.roll(history, -1, 0)) and
// row 0 is cleared for the next amaxes, so every amax counts for H updates. DelayedScaling does that over host memory (the CPU op); the CUDA kernel calls
// delayed_scale for each tensor.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "backends/dtype.h"
#include "core/json_fields.h"
#include "core/philox.h"

namespace bertperf {

// The layout of one FP8 format.
struct Fp8Format {
  int exponent_bits, fraction_bits, bias;
  uint8_t max_code;  // the largest finite magnitude's code
  float max;         // its value
  float min_normal;  // 2^(1 - bias)
};

inline constexpr Fp8Format kE4M3{4, 3, 7, 0x7E, 448.0f, 0.015625f};
inline constexpr Fp8Format kE5M2{5, 2, 15, 0x7B, 57344.0f, 6.103515625e-05f};

// The format of an FP8 dtype (E4M3 or E5M2; anything else is E4M3's, for callers that checked the type).
constexpr const Fp8Format& fp8_format(DType type) { return type == DType::E5M2 ? kE5M2 : kE4M3; }

namespace kmath {

BERT_HOST_DEVICE uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
BERT_HOST_DEVICE float bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// x rounded to nearest even in format f and saturated to its largest finite value; NaN -> 0x7F.
BERT_HOST_DEVICE uint8_t fp8_bits(float x, const Fp8Format& f) {
  const uint32_t u = float_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7F;
  if (bits_float(a) >= f.max) return sign | f.max_code;
  const int drop = 23 - f.fraction_bits;
  const int exponent = static_cast<int>(a >> 23) - 127;
  const int min_exponent = 1 - f.bias;
  uint32_t code;
  if (exponent >= min_exponent) {
    // Normal: keep fraction_bits of the fraction, rounding the dropped ones to nearest even; a carry steps the
    // exponent (up to the largest finite code at most: x is below the largest finite value, which is a code).
    const uint32_t rounded = (a + (1u << (drop - 1)) - 1u + ((a >> drop) & 1u)) >> drop;
    code = rounded - (static_cast<uint32_t>(127 - f.bias) << f.fraction_bits);
  } else {
    // Subnormal (or zero): the value in units of the smallest subnormal 2^(min_exponent - fraction_bits), rounded
    // to nearest even; a result of 2^fraction_bits is the smallest normal's code. Under half a unit: a signed zero.
    if (exponent < min_exponent - f.fraction_bits - 1) return sign;
    const uint32_t significand = (a & 0x7FFFFFu) | 0x800000u;  // x = significand * 2^(exponent - 23)
    const int shift = 23 + min_exponent - f.fraction_bits - exponent;  // 21 .. 24: significand >> shift = units
    const uint32_t units = significand >> shift;
    const uint32_t rest = significand & ((1u << shift) - 1u), half = 1u << (shift - 1);
    code = units + ((rest > half || (rest == half && (units & 1u))) ? 1u : 0u);
  }
  return sign | static_cast<uint8_t>(code);
}

// The value of code c in format f (E5M2's infinities and NaNs included; E4M3's S.1111.111 is NaN).
BERT_HOST_DEVICE float fp8_value(uint8_t c, const Fp8Format& f) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t magnitude = c & 0x7Fu;
  const uint32_t exponent = magnitude >> f.fraction_bits, fraction = magnitude & ((1u << f.fraction_bits) - 1u);
  const uint32_t top = (1u << f.exponent_bits) - 1u;
  if (f.exponent_bits == 4 && magnitude == 0x7Fu) return bits_float(sign | 0x7FC00000u);
  if (f.exponent_bits == 5 && exponent == top) return bits_float(sign | (fraction ? 0x7FC00000u : 0x7F800000u));
  if (exponent == 0) {
    // fraction * 2^(1 - bias - fraction_bits), exact in fp32
    const float unit = bits_float(static_cast<uint32_t>(127 + 1 - f.bias - f.fraction_bits) << 23);
    return bits_float(sign | float_bits(static_cast<float>(fraction) * unit));
  }
  return bits_float(sign | ((exponent + 127 - f.bias) << 23) | (fraction << (23 - f.fraction_bits)));
}

// fp8_value(fp8_bits(x, f), f), branch-free: saturate, then round the fraction (normal) or add and subtract a power
// of two whose last place is the smallest subnormal (subnormal: the FPU rounds to nearest even). NaN stays NaN.
BERT_HOST_DEVICE float fp8_round(float x, const Fp8Format& f) {
  const float a = std::fabs(x) > f.max ? f.max : std::fabs(x);
  const int drop = 23 - f.fraction_bits;
  const uint32_t u = float_bits(a);
  const float normal = bits_float((u + (1u << (drop - 1)) - 1u + ((u >> drop) & 1u)) & ~((1u << drop) - 1u));
  // 2^(23 + min_exponent - fraction_bits): its last place is the smallest subnormal
  const float magic = bits_float(static_cast<uint32_t>(127 + 23 + 1 - f.bias - f.fraction_bits) << 23);
  const float subnormal = (a + magic) - magic;  // IEEE arithmetic (the build never reassociates floats)
  const float rounded = std::copysign(a < f.min_normal ? subnormal : normal, x);
  return x != x ? x : rounded;  // a NaN's payload could round into infinity's bits
}

// The delayed-scaling scale of one tensor from the largest amax of its history (see the top of this file).
BERT_HOST_DEVICE float delayed_scale(float amax, float scale, float fp8_max, float margin) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return scale;
  const float s = fp8_max / amax / std::exp2(margin);
  return std::isfinite(s) ? s : scale;
}

}  // namespace kmath

// The FP8 recipe of a backend that runs the encoder's linear layers in FP8 ("precision": "fp8" in its options):
// HYBRID formats (E4M3 forward, E5M2 gradients), delayed scaling with an amax history of `history` steps and a margin
// of `margin` binades (Transformer Engine's defaults, NVIDIA's BERT values: 1 and 0).
struct Fp8Recipe {
  int history = 1;
  float margin = 0;
};

// The precision fields of a backend block, read by every backend that offers FP8 (the same names everywhere):
//   "precision": "bf16" | "fp8" (optional, default "bf16"), "fp8_history": int >= 1 (default 1),
//   "fp8_margin": number >= 0 (default 0); the fp8_ fields only with "precision": "fp8".
// Returns whether FP8 was asked for, and its recipe in *recipe.
inline bool read_fp8_recipe(JsonFields& fields, Fp8Recipe* recipe) {
  const std::string precision = fields.optional<std::string>("precision", "bf16");
  if (precision != "bf16" && precision != "fp8")
    throw_input(fields.where(), "field 'precision' must be \"bf16\" or \"fp8\", got \"" + precision + "\"");
  const bool fp8 = precision == "fp8";
  Fp8Recipe r;
  r.history = fields.optional<int>("fp8_history", 1);
  r.margin = static_cast<float>(fields.optional<double>("fp8_margin", 0.0));
  if (r.history < 1) throw_input(fields.where(), "field 'fp8_history' must be at least 1");
  if (!(r.margin >= 0) || !std::isfinite(r.margin))
    throw_input(fields.where(), "field 'fp8_margin' must be a finite number >= 0");
  if (!fp8 && (r.history != 1 || r.margin != 0))
    throw_input(fields.where(), "fields 'fp8_history' and 'fp8_margin' need \"precision\": \"fp8\"");
  *recipe = r;
  return fp8;
}

// The operands of an FP8 GEMM, in the order their scales and amaxes are kept (ops.h: GemmPrecision): the input and
// the weight in E4M3, the output's gradient in E5M2 (the HYBRID recipe).
enum Fp8Operand : int { FP8_INPUT = 0, FP8_WEIGHT = 1, FP8_GRAD = 2 };
inline constexpr int kFp8Operands = 3;
constexpr DType fp8_type(int operand) { return operand == FP8_GRAD ? DType::E5M2 : DType::E4M3; }

namespace kmath {

// Delayed scaling of tensor t of `count` (operand t % kFp8Operands of its GEMM): scale (count) f32, history (H, count)
// f32 whose row 0 holds the amaxes recorded since the last update (see the top of this file).
BERT_HOST_DEVICE void delayed_scaling_update(float* scale, float* history, size_t count, size_t t, int H,
                                             float margin) {
  float amax = 0;  // the largest entry; a NaN anywhere makes it NaN (torch.max), which keeps the scale
  for (int h = 0; h < H; ++h) {
    const float x = history[h * count + t];
    if (x > amax || x != x) amax = x;
    if (amax != amax) break;
  }
  const float fp8_max = t % kFp8Operands == FP8_GRAD ? kE5M2.max : kE4M3.max;  // fp8_type's formats
  scale[t] = delayed_scale(amax, scale[t], fp8_max, margin);
  const float first = history[t];  // torch.roll(history, -1, 0), then row 0 cleared
  for (int h = 0; h + 1 < H; ++h) history[h * count + t] = history[(h + 1) * count + t];
  history[(H - 1) * count + t] = first;
  history[t] = 0;
}

}  // namespace kmath

// Delayed scaling over host memory (the CPU backends' scale update op; the CUDA kernel runs
// kmath::delayed_scaling_update per tensor).
class DelayedScaling {
 public:
  explicit DelayedScaling(const Fp8Recipe& recipe) : recipe_(recipe) {}
  void update(float* scale, float* history, int count) const {
    for (size_t t = 0; t < static_cast<size_t>(count); ++t)
      kmath::delayed_scaling_update(scale, history, count, t, recipe_.history, recipe_.margin);
  }
  const Fp8Recipe& recipe() const { return recipe_; }

 private:
  Fp8Recipe recipe_;
};

}  // namespace bertperf
