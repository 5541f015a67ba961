// Inline building blocks of the CPU ops: vectorisable exp and tanh, the dropout multiplier stream,
// and the column-block split used by every reduction over rows.
#pragma once

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/philox.h"

namespace bertperf::cpu {

// ---- exp and tanh --------------------------------------------------------------------------------
// glibc's expf/tanhf are scalar calls; GELU, softmax and cross-entropy evaluate hundreds of millions
// of them per step, so fp32 uses these loop-vectorisable versions instead.

// exp(x) = 2^n e^r with r in [-ln2/2, ln2/2]; degree-7 Taylor polynomial for e^r (truncation 5e-9
// relative), so the result is within a few ulp of the exact value. Below -87 the true value is
// subnormal or zero; we return 0, which is what softmax over masked scores wants.
inline float exp_approx(float x) {
  const bool underflow = x < -87.0f;
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  const float n = std::floor(std::fma(x, 1.44269504088896341f, 0.5f));
  // ln 2 split in two (Cody-Waite) so n * ln2_hi is exact.
  float r = std::fma(n, -0.693359375f, x);
  r = std::fma(n, 2.12194440e-4f, r);
  float p = 1.0f / 5040.0f;
  p = std::fma(p, r, 1.0f / 720.0f);
  p = std::fma(p, r, 1.0f / 120.0f);
  p = std::fma(p, r, 1.0f / 24.0f);
  p = std::fma(p, r, 1.0f / 6.0f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return underflow ? 0.0f : p * scale;
}

// tanh(x) = sign(x) (1 - e) / (1 + e) with e = exp(-2|x|). Near zero that quotient cancels, so
// |x| < 0.125 uses the odd Taylor series instead (truncation below 2e-10).
inline float tanh_approx(float x) {
  const float ax = std::fabs(x);
  const float e = exp_approx(-2.0f * ax);
  const float big = (1.0f - e) / (1.0f + e);
  const float x2 = ax * ax;
  float small = -17.0f / 315.0f;
  small = std::fma(small, x2, 2.0f / 15.0f);
  small = std::fma(small, x2, -1.0f / 3.0f);
  small = std::fma(small * x2, ax, ax);
  return std::copysign(ax < 0.125f ? small : big, x);
}

template <typename T>
inline T exp_t(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return exp_approx(x);
  } else {
    return std::exp(x);
  }
}

template <typename T>
inline T tanh_t(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return tanh_approx(x);
  } else {
    return std::tanh(x);
  }
}

// ---- dropout ---------------------------------------------------------------------------------------

// Inverted-dropout scale of kept elements, 1/(1-p).
template <typename T>
inline T dropout_scale(float drop_prob) {
  return T(1) / (T(1) - T(drop_prob));
}

// mult[i] = dropout_keep(key, first + i, p) ? scale : 0 for i < count.
// Same draws as core/philox.h's dropout_keep (the tests pin that), but one Philox block per four
// elements instead of one per element, in a loop the compiler can vectorise.
template <typename T>
inline void dropout_multipliers(T* mult, uint64_t first, size_t count, float drop_prob, RngKey key, T scale) {
  const uint64_t end = first + count;
  uint64_t e = first;
  for (; e < end && (e & 3) != 0; ++e) mult[e - first] = dropout_keep(key, e, drop_prob) ? scale : T(0);
  const uint64_t first_block = e >> 2;
  const size_t blocks = static_cast<size_t>((end - e) >> 2);
  T* out = mult + (e - first);
  const uint32_t seed_lo = static_cast<uint32_t>(key.seed), seed_hi = static_cast<uint32_t>(key.seed >> 32);
#pragma omp simd
  for (size_t j = 0; j < blocks; ++j) {
    const uint64_t block = first_block + j;
    const Philox4 r = philox4x32_10(
        {{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), key.site, key.step}}, seed_lo, seed_hi);
    for (int lane = 0; lane < 4; ++lane) {
      const float u = static_cast<float>(r.v[lane] >> 8) * (1.0f / 16777216.0f);  // philox_uniform
      out[4 * j + lane] = u >= drop_prob ? scale : T(0);
    }
  }
  for (e += 4 * blocks; e < end; ++e) mult[e - first] = dropout_keep(key, e, drop_prob) ? scale : T(0);
}

// Elements handled per stack chunk when a loop needs dropout multipliers.
inline constexpr size_t kDropoutChunk = 1024;

// ---- reductions over rows ------------------------------------------------------------------------

// Widest column block a reduction keeps on the stack.
inline constexpr int kMaxColumnBlock = 256;

// Calls body(c0, c1) for column blocks covering [0, C), spread over the OpenMP threads. Each
// column is reduced by one thread in row order, so sums are identical for any thread count.
template <typename Body>
inline void for_column_blocks(int C, size_t rows, Body body) {
  const int threads = omp_get_max_threads();
  int width = (C + threads - 1) / threads;
  width = std::clamp((width + 15) / 16 * 16, 16, kMaxColumnBlock);
  const int blocks = (C + width - 1) / width;
  const bool parallel = static_cast<size_t>(C) * rows > 16384 && blocks > 1;
#pragma omp parallel for schedule(static) if (parallel)
  for (int b = 0; b < blocks; ++b) body(b * width, std::min(C, (b + 1) * width));
}

// Work (elements touched) below which a loop stays on one thread: forking costs a few microseconds.
inline constexpr size_t kParallelMin = 32768;

}  // namespace bertperf::cpu
