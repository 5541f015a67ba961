// cpu-bf16's GEMM (backends/cpu/gemm_bf16.h): its two paths, oneDNN on AVX512-BF16 and our emulation, give the same
// bits on the same inputs, and both equal the summation order the header defines, written here as the plainest
// loop (the oracle). Shapes: the BERT linear layers' (mini and base: forward, dinp and dweight, whose K is the token
// count and runs over many chunks), odd K, K a multiple of the chunk, padded row tiles, transposed operands, and
// values spanning many binades (so a different order shows). The oneDNN half is skipped, and says so, where the CPU
// or the build has no AVX512-BF16 path.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/bf16.h"
#include "backends/cpu/gemm_bf16.h"

namespace bertperf::cpu {
namespace {

struct Shape {
  int M, N, K;
  bool ta, tb;
};

std::string describe(const Shape& s) {
  return std::to_string(s.M) + "x" + std::to_string(s.N) + "x" + std::to_string(s.K) + (s.ta ? " A^T" : "") +
         (s.tb ? " B^T" : "");
}

struct Operands {
  std::vector<bf16> a, b;
  Bf16Gemm g;
};

Operands random_operands(const Shape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Operands o;
  o.a.resize(static_cast<size_t>(s.M) * s.K);
  o.b.resize(static_cast<size_t>(s.K) * s.N);
  // Magnitudes over 2^-12 .. 2^12, and a few exact cancellations, so that summation order changes the bits.
  for (bf16& x : o.a) x = to_bf16(normal(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 25) - 12));
  for (bf16& x : o.b) x = to_bf16(normal(rng));
  for (size_t i = 0; i + 1 < o.a.size(); i += 97) o.a[i + 1] = bf16{static_cast<uint16_t>(o.a[i].bits ^ 0x8000u)};
  o.g = {s.M, s.N, s.K, o.a.data(), s.ta ? s.M : s.K, s.ta, o.b.data(), s.tb ? s.K : s.N, s.tb};
  return o;
}

// One context for the whole test program, as a backend has one (its default options: oneDNN at AVX512-BF16 where
// it sums as the emulation does), with at least two thread slots so the thread-count test can share tiles.
Bf16GemmContext& context() {
  static Bf16GemmContext* gemms = [] {
    const int threads = omp_get_max_threads();
    omp_set_num_threads(std::max(2, threads));
    auto* made = new Bf16GemmContext(CpuBf16Options{});
    omp_set_num_threads(threads);
    return made;
  }();
  return *gemms;
}

std::vector<float> run(const Bf16Gemm& g, GemmPath path) {
  std::vector<float> c(static_cast<size_t>(g.M) * g.N, std::nanf(""));
  context().run(
      g,
      [&](int m0, int rows, int n0, int cols, const float* acc, int ld) {
        for (int m = 0; m < rows; ++m)
          for (int n = 0; n < cols; ++n) c[static_cast<size_t>(m0 + m) * g.N + n0 + n] = acc[static_cast<size_t>(m) * ld + n];
      },
      path);
  return c;
}

// The order gemm_bf16.h defines, element by element: chunks of 512 along K, the last padded with zeros to a multiple
// of 64, pairs k + 1 then k within a chunk (one FMA each, subnormals flushed, as VDPBF16PS), chunk sums added in
// order.
float flush(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }

std::vector<float> oracle(const Bf16Gemm& g) {
  auto a = [&](int m, int k) { return flush(to_float(g.trans_a ? g.A[size_t(k) * g.lda + m] : g.A[size_t(m) * g.lda + k])); };
  auto b = [&](int k, int n) { return flush(to_float(g.trans_b ? g.B[size_t(n) * g.ldb + k] : g.B[size_t(k) * g.ldb + n])); };
  std::vector<float> c(static_cast<size_t>(g.M) * g.N);
  for (int m = 0; m < g.M; ++m)
    for (int n = 0; n < g.N; ++n) {
      float total = 0;
      for (int k0 = 0; k0 < g.K; k0 += kGemmKChunk) {
        const int k1 = std::min(g.K, k0 + kGemmKChunk);
        float acc = 0;
        const int padded = k0 + std::min(kGemmKChunk, (k1 - k0 + kGemmKPad - 1) / kGemmKPad * kGemmKPad);
        for (int k = k0; k < padded; k += 2) {
          const float odd = k + 1 < k1 ? a(m, k + 1) * b(k + 1, n) : 0.0f;  // exact: 8-bit mantissas
          acc = flush(std::fma(k < k1 ? a(m, k) : 0.0f, k < k1 ? b(k, n) : 0.0f, flush(acc + odd)));
        }
        total = k0 == 0 ? acc : total + acc;
      }
      c[static_cast<size_t>(m) * g.N + n] = total;
    }
  return c;
}

size_t differing(const std::vector<float>& x, const std::vector<float>& y) {
  size_t d = 0;
  for (size_t i = 0; i < x.size(); ++i) d += std::memcmp(&x[i], &y[i], sizeof(float)) != 0;
  return d;
}

// Small enough for the scalar oracle, and covering every case of the tiling and chunking.
const std::vector<Shape> kOracleShapes = {
    {37, 70, 1100, false, false},  // three chunks, the last of 76 padded to 128; one padded row tile
    {64, 96, 515, true, false},    // transposed A (a dweight), an odd tail of 3 padded to 64
    {20, 130, 77, false, true},    // transposed B (OUT_IN forward), odd K below one chunk
    {600, 40, 512, false, false},  // two row tiles (512 + a padded 88), K exactly one chunk
    {5, 3000, 64, false, false},   // two column tiles
};

// The BERT layers' products (mini: hidden 128, FFN 512; base: hidden 768, FFN 3072; a token count that is not a
// multiple of anything), oneDNN against the emulation only (the oracle would take minutes).
const std::vector<Shape> kBertShapes = {
    {1000, 384, 128, false, false},  // mini QKV forward
    {1000, 128, 512, false, true},   // mini FFN down dinp (W^T)
    {128, 512, 1000, true, false},   // mini FFN up dweight (inp^T . dout), K = tokens, two chunks
    {300, 768, 3072, false, false},  // base FFN down forward, six chunks
    {768, 768, 1500, true, false},   // base dweight over three chunks
    {77, 1000, 128, false, true},    // the tied decoder (OUT_IN) on a narrow vocabulary slice
};

TEST(GemmBf16, EmulationSumsInTheDefinedOrder) {
  uint64_t seed = 1;
  for (const Shape& s : kOracleShapes) {
    SCOPED_TRACE(describe(s));
    const Operands o = random_operands(s, seed++);
    const std::vector<float> want = oracle(o.g), got = run(o.g, GemmPath::EMULATED);
    EXPECT_EQ(differing(got, want), 0u);
  }
}

TEST(GemmBf16, TheOrderIsNotPlainSequentialSummation) {
  // The oracle must be able to fail: the same products summed k = 0, 1, 2, ... differ somewhere.
  const Shape s{37, 70, 1100, false, false};
  const Operands o = random_operands(s, 99);
  const std::vector<float> got = run(o.g, GemmPath::EMULATED);
  size_t differ = 0;
  for (int m = 0; m < s.M; ++m)
    for (int n = 0; n < s.N; ++n) {
      float acc = 0;
      for (int k = 0; k < s.K; ++k) acc = std::fma(to_float(o.a[size_t(m) * s.K + k]), to_float(o.b[size_t(k) * s.N + n]), acc);
      differ += std::memcmp(&acc, &got[size_t(m) * s.N + n], sizeof(float)) != 0;
    }
  EXPECT_GT(differ, 100u);
}

TEST(GemmBf16, OnednnEqualsTheEmulationBitForBit) {
  if (!context().onednn_available())
    GTEST_SKIP() << "no oneDNN AVX512-BF16 path here: " << context().describe();
  uint64_t seed = 10;
  for (const auto* shapes : {&kOracleShapes, &kBertShapes})
    for (const Shape& s : *shapes) {
      SCOPED_TRACE(describe(s));
      const Operands o = random_operands(s, seed++);
      const std::vector<float> fast = run(o.g, GemmPath::ONEDNN), emulated = run(o.g, GemmPath::EMULATED);
      EXPECT_EQ(differing(fast, emulated), 0u);
    }
}

TEST(GemmBf16, ManyTokenCountsNeedFewPrimitives) {
  // A weight gradient's K is the batch's token count: 64 counts make a few tile shapes (the last chunk padded to a
  // multiple of 64), not one each, so a CPU run makes its primitives (JIT compilations) in its first steps only.
  if (!context().onednn_available())
    GTEST_SKIP() << "no oneDNN AVX512-BF16 path here: " << context().describe();
  const Operands o = random_operands({128, 512, 1063, true, false}, 7);
  const size_t before = context().primitives();
  for (int K = 1000; K < 1064; ++K) {
    Bf16Gemm g = o.g;
    g.K = K;
    context().run(g, [](int, int, int, int, const float*, int) {}, GemmPath::ONEDNN);
  }
  EXPECT_LE(context().primitives() - before, 6u);
}

TEST(GemmBf16, ResultsDoNotDependOnTheThreadCount) {
  const Shape s{1000, 384, 1100, false, false};
  const Operands o = random_operands(s, 42);
  const int threads = omp_get_max_threads();
  for (GemmPath path : {GemmPath::EMULATED, GemmPath::ONEDNN}) {
    if (path == GemmPath::ONEDNN && !context().onednn_available()) continue;
    omp_set_num_threads(1);
    const std::vector<float> one = run(o.g, path);
    omp_set_num_threads(std::max(2, threads));
    const std::vector<float> many = run(o.g, path);
    omp_set_num_threads(threads);
    EXPECT_EQ(differing(one, many), 0u) << (path == GemmPath::ONEDNN ? "oneDNN" : "emulated");
  }
}

TEST(GemmBf16, RoundsLikeTheHardwareConversion) {
  // Round to nearest even, NaN stays NaN, fp32 subnormals become signed zeros (VCVTNEPS2BF16's behaviour, which
  // oneDNN's bf16 stores have).
  EXPECT_EQ(to_bf16(1.0f).bits, 0x3F80);
  EXPECT_EQ(to_bf16(1.0f + 1.0f / 256).bits, 0x3F80);         // a tie to even (down)
  EXPECT_EQ(to_bf16(1.0f + 3.0f / 256).bits, 0x3F82);         // a tie to even (up)
  EXPECT_EQ(to_bf16(-1.0f - 1.0f / 256 - 1e-7f).bits, 0xBF81);  // above the tie
  EXPECT_EQ(to_bf16(std::ldexp(1.0f, -130)).bits, 0x0000);
  EXPECT_EQ(to_bf16(-std::ldexp(1.0f, -130)).bits, 0x8000);
  EXPECT_EQ(to_bf16(3.4028235e38f).bits, 0x7F80);             // rounds up to infinity
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::nanf("")))));
  EXPECT_EQ(to_float(to_bf16(-0.0f)), 0.0f);
  EXPECT_TRUE(std::signbit(to_float(to_bf16(-0.0f))));
}

}  // namespace
}  // namespace bertperf::cpu
