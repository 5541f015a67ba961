// Inline building blocks of the CPU ops: vectorisable exp and tanh (and the callables that hand them to the
// shared element math of backends/kernel_math.h), the dropout multiplier stream, and the column-block split used
// by every reduction over rows.
#pragma once

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/bf16.h"
#include "backends/kernel_math.h"
#include "backends/ops.h"
#include "core/errors.h"
#include "core/philox.h"

namespace bertperf::cpu {

// ---- exp and tanh --------------------------------------------------------------------------------
// glibc's expf/tanhf are scalar calls; GELU, softmax and cross-entropy evaluate hundreds of millions
// of them per step, so fp32 uses these loop-vectorisable versions instead.

// a * b + c, fused where the target has FMA. Without it std::fma is a libm call per element that
// also stops vectorisation, so portable (non -march=native) builds take the two-rounding form.
inline float fmadd(float a, float b, float c) {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// exp(x) = 2^n e^r with r in [-ln2/2, ln2/2]; degree-7 Taylor polynomial for e^r (truncation 5e-9
// relative), so the result is within a few ulp of the exact value. Below -87 the true value is
// subnormal or zero; we return 0 (scale 0), which is what softmax over masked scores wants.
inline float exp_approx(float x) {
  // 1 unless x underflows. Multiplying by it (rather than selecting the result) is the form GCC
  // vectorises in every caller, including tanh and the double-accumulating cross-entropy sums.
  const float keep = x >= -87.0f ? 1.0f : 0.0f;
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  // n = round(x / ln2) by the 1.5 * 2^23 trick: std::floor does not vectorise under strict IEEE.
  constexpr float kRound = 12582912.0f;
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  // ln 2 split in two (Cody-Waite) so n * ln2_hi is exact.
  float r = fmadd(n, -0.693359375f, x);
  r = fmadd(n, 2.12194440e-4f, r);
  float p = 1.0f / 5040.0f;
  p = fmadd(p, r, 1.0f / 720.0f);
  p = fmadd(p, r, 1.0f / 120.0f);
  p = fmadd(p, r, 1.0f / 24.0f);
  p = fmadd(p, r, 1.0f / 6.0f);
  p = fmadd(p, r, 0.5f);
  p = fmadd(p, r, 1.0f);
  p = fmadd(p, r, 1.0f);
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return p * scale * keep;
}

// tanh(x) = sign(x) (1 - e) / (1 + e) with e = exp(-2|x|). Near zero that quotient cancels, so
// |x| < 0.125 uses the odd Taylor series instead (truncation below 2e-10).
inline float tanh_approx(float x) {
  const float ax = std::fabs(x);
  const float e = exp_approx(-2.0f * ax);
  const float big = (1.0f - e) / (1.0f + e);
  const float x2 = ax * ax;
  float small = -17.0f / 315.0f;
  small = fmadd(small, x2, 2.0f / 15.0f);
  small = fmadd(small, x2, -1.0f / 3.0f);
  small = fmadd(small * x2, ax, ax);
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

// The callables kernel_math.h's formulas take: function objects rather than function pointers, so the formula
// inlines and its loop vectorises.
struct FastExp {
  template <typename T>
  T operator()(T x) const { return exp_t<T>(x); }
};
struct FastTanh {
  template <typename T>
  T operator()(T x) const { return tanh_t<T>(x); }
};
struct Sqrt {
  template <typename T>
  T operator()(T x) const { return std::sqrt(x); }
};

// Largest of x[0..n), n >= 1. Written as a select from 0: GCC vectorises this form, not std::max.
template <typename T>
inline T max_of(const T* x, int n) {
  T m = x[0];
#pragma omp simd reduction(max : m)
  for (int i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// ---- dropout ---------------------------------------------------------------------------------------

// Inverted-dropout scale of kept elements, 1/(1-p). Also where every dropout op checks p.
template <typename T>
inline T dropout_scale(float drop_prob) {
  BERT_CHECK(drop_prob >= 0.0f && drop_prob < 1.0f, "dropout probability ", drop_prob, " is outside [0, 1)");
  return T(1) / (T(1) - T(drop_prob));
}

// mult[i] = dropout_keep(key, first + i, p) ? scale : 0 for i < count.
// Same draws as core/philox.h's dropout_keep (the tests pin that), but one Philox block per four
// elements instead of one per element, and Philox written out on plain scalars so the compiler
// can vectorise the loop over blocks (it does not see through the Philox4 struct).
template <typename T>
inline void dropout_multipliers(T* mult, uint64_t first, size_t count, float drop_prob, RngKey key, T scale) {
  const uint64_t end = first + count;
  // A partial block at either end (a row of attention probabilities need not start or end on a block boundary):
  // one Philox call for its elements.
  auto partial_block = [&](uint64_t e0, uint64_t e1) {
    const Philox4 bits = philox4x32_10(
        {{static_cast<uint32_t>(e0 >> 2), static_cast<uint32_t>(e0 >> 34), key.site, key.step}},
        static_cast<uint32_t>(key.seed), static_cast<uint32_t>(key.seed >> 32));
    for (uint64_t e = e0; e < e1; ++e)
      mult[e - first] = static_cast<float>(bits.v[e & 3] >> 8) * (1.0f / 16777216.0f) >= drop_prob ? scale : T(0);
  };
  uint64_t e = first;
  if ((e & 3) != 0) {
    const uint64_t head_end = std::min(end, (e | 3) + 1);
    partial_block(e, head_end);
    e = head_end;
  }
  const uint64_t first_block = e >> 2;
  const size_t blocks = static_cast<size_t>((end - e) >> 2);
  T* out = mult + (e - first);
  const uint32_t seed_lo = static_cast<uint32_t>(key.seed), seed_hi = static_cast<uint32_t>(key.seed >> 32);
#pragma omp simd
  for (size_t j = 0; j < blocks; ++j) {
    const uint64_t block = first_block + j;
    // Philox4x32-10, counter (block lo, block hi, site, step), key (seed lo, seed hi).
    uint32_t c0 = static_cast<uint32_t>(block), c1 = static_cast<uint32_t>(block >> 32), c2 = key.site,
             c3 = key.step, k0 = seed_lo, k1 = seed_hi;
    for (int round = 0; round < 10; ++round) {
      const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
      const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
      c1 = static_cast<uint32_t>(p1);
      c3 = static_cast<uint32_t>(p0);
      c0 = n0;
      c2 = n2;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    // philox_uniform: 24 bits scaled into [0, 1).
    constexpr float kTo01 = 1.0f / 16777216.0f;
    out[4 * j + 0] = static_cast<float>(c0 >> 8) * kTo01 >= drop_prob ? scale : T(0);
    out[4 * j + 1] = static_cast<float>(c1 >> 8) * kTo01 >= drop_prob ? scale : T(0);
    out[4 * j + 2] = static_cast<float>(c2 >> 8) * kTo01 >= drop_prob ? scale : T(0);
    out[4 * j + 3] = static_cast<float>(c3 >> 8) * kTo01 >= drop_prob ? scale : T(0);
  }
  e += 4 * blocks;
  if (e < end) partial_block(e, end);
}

// The Philox key of an op's dropout (ops.h): (seed, step + step_offset, site) from the counter in backend memory,
// which the CPU reads directly. No counter is needed when nothing is dropped.
inline RngKey dropout_key(const ops::Dropout& d) {
  if (d.prob == 0.0f) return RngKey{0, 0, d.site};
  BERT_CHECK(d.counter, "dropout with probability ", d.prob, " has no counter");
  return RngKey{d.counter->seed, d.counter->step + d.step_offset, d.site};
}

// Elements handled per stack chunk when a loop needs dropout multipliers.
inline constexpr size_t kDropoutChunk = 1024;

// ---- threads ----------------------------------------------------------------------------------------

// Keeps OpenBLAS on one thread for a scope (when `active`), restoring its setting after: OpenMP
// threads run the backend's BLAS calls, and nested parallelism would oversubscribe the cores.
class SingleThreadedBlas {
 public:
  explicit SingleThreadedBlas(bool active) : saved_(active ? openblas_get_num_threads() : 1) {
    if (saved_ != 1) openblas_set_num_threads(1);
  }
  ~SingleThreadedBlas() {
    if (saved_ != 1) openblas_set_num_threads(saved_);
  }
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;

 private:
  int saved_;
};

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

// sums[c] += sum over rows n of x[n * ld + c], for c < C: every bias gradient. The sum is taken in the type of
// sums (fp32 for the bf16 backend's bf16 rows, as the CUDA backend).
template <typename S, typename T>
inline void add_column_sums(S* sums, const T* x, int N, int C, size_t ld) {
  for_column_blocks(C, N, [&](int c0, int c1) {
    S acc[kMaxColumnBlock] = {};
    const int w = c1 - c0;
    for (int n = 0; n < N; ++n) {
      const T* row = x + n * ld + c0;
#pragma omp simd
      for (int c = 0; c < w; ++c) acc[c] += load(row[c]);
    }
    for (int c = 0; c < w; ++c) sums[c0 + c] += acc[c];
  });
}

// ---- LayerNorm rows of the bf16 backend ------------------------------------------------------------------------
// The bf16 backend normalises the fp32 sum before its rounding (the statistics are the unrounded row's), and its
// backward reads the rounded sum it saved, as the CUDA kernels. Rows live in fp32 on the stack, up to kMaxLnRow.

inline constexpr int kMaxLnRow = 4096;

inline void check_ln_row(int C) {
  BERT_CHECK(C > 0 && C <= kMaxLnRow, "cpu-bf16 LayerNorm rows of ", C, " channels (at most ", kMaxLnRow, ")");
}

// out = bf16(LayerNorm(x) * mult) (mult null: no dropout), statistics of the fp32 row x in *mean and *rstd.
inline void layernorm_row_bf16(bf16* out, float* mean, float* rstd, const float* x, const bf16* gamma,
                               const bf16* beta, const float* mult, int C) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int c = 0; c < C; ++c) sum += x[c];
  const float mu = sum / static_cast<float>(C);
  float sq = 0;
#pragma omp simd reduction(+ : sq)
  for (int c = 0; c < C; ++c) sq += (x[c] - mu) * (x[c] - mu);
  const float rs = kmath::layernorm_rstd(sq / static_cast<float>(C), Sqrt{});
  if (mult) {
#pragma omp simd
    for (int c = 0; c < C; ++c)
      out[c] = to_bf16(kmath::layernorm_out(x[c], mu, rs, to_float(gamma[c]), to_float(beta[c])) * mult[c]);
  } else {
#pragma omp simd
    for (int c = 0; c < C; ++c) out[c] = to_bf16(kmath::layernorm_out(x[c], mu, rs, to_float(gamma[c]), to_float(beta[c])));
  }
  *mean = mu;
  *rstd = rs;
}

// dx = the LayerNorm backward of the fp32 row dy, from the saved bf16 row x and its statistics.
inline void layernorm_dx_row_bf16(float* dx, const float* dy, const bf16* x, const bf16* gamma, float mu, float rs,
                                  int C) {
  float g_sum = 0, gx_sum = 0;
#pragma omp simd reduction(+ : g_sum, gx_sum)
  for (int c = 0; c < C; ++c) {
    const float g = dy[c] * to_float(gamma[c]);
    g_sum += g;
    gx_sum += g * (to_float(x[c]) - mu) * rs;
  }
  const float g_mean = g_sum / static_cast<float>(C), gx_mean = gx_sum / static_cast<float>(C);
#pragma omp simd
  for (int c = 0; c < C; ++c)
    dx[c] = kmath::layernorm_dx(dy[c], to_float(gamma[c]), (to_float(x[c]) - mu) * rs, rs, g_mean, gx_mean);
}

// body(offset, count) over the rows [0, N) of a (N, cols) block with row stride ld, as one flat range when the
// rows are contiguous; elementwise kernels run on a block of a wider matrix this way.
template <typename Body>
inline void for_row_ranges(int N, int cols, size_t ld, Body body) {
  if (ld == static_cast<size_t>(cols)) {
    body(size_t{0}, static_cast<size_t>(N) * cols);
    return;
  }
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * cols > kParallelMin)
  for (int n = 0; n < N; ++n) body(n * ld, static_cast<size_t>(cols));
}

}  // namespace bertperf::cpu
