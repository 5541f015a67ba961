// FP8 (backends/fp8.h): the conversions over all 256 codes of both formats against a decode written here from the
// formats' definition, rounding at every midpoint, saturation, the branch-free rounding against the exact one, and
// delayed scaling against a written-out reference over several steps.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "backends/fp8.h"

namespace bertperf {
namespace {

struct Format {
  const char* name;
  const Fp8Format& f;
  int e, m, bias;  // written out from the OCP definition, not read from f
  bool ieee_specials;  // E5M2: S.11111.00 infinity, S.11111.xx NaN; E4M3: only S.1111.111, NaN
};
const Format kFormats[] = {{"e4m3", kE4M3, 4, 3, 7, false}, {"e5m2", kE5M2, 5, 2, 15, true}};

// The value of a code from the definition: (-1)^s 2^(e - bias) (1 + f / 2^m), or 2^(1 - bias) (f / 2^m) for e = 0.
double reference_value(uint8_t code, const Format& F) {
  const int s = code >> 7, e = (code >> F.m) & ((1 << F.e) - 1), f = code & ((1 << F.m) - 1);
  const double sign = s ? -1.0 : 1.0;
  if (F.ieee_specials && e == (1 << F.e) - 1)
    return f == 0 ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  if (!F.ieee_specials && (code & 0x7F) == 0x7F) return std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(f, 1 - F.bias - F.m);
  return sign * std::ldexp(1.0 + std::ldexp(f, -F.m), e - F.bias);
}

bool same(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

TEST(Fp8, EveryCodeDecodesAsTheDefinitionSays) {
  for (const Format& F : kFormats) {
    SCOPED_TRACE(F.name);
    for (int c = 0; c < 256; ++c) {
      const double want = reference_value(static_cast<uint8_t>(c), F);
      const float got = kmath::fp8_value(static_cast<uint8_t>(c), F.f);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << "code " << c;
      } else {
        EXPECT_EQ(static_cast<double>(got), want) << "code " << c;
        EXPECT_EQ(std::signbit(got), c >= 128) << "code " << c;
      }
    }
    // The constants of the format agree with the definition.
    EXPECT_EQ(reference_value(F.f.max_code, F), F.f.max);
    EXPECT_TRUE(std::isinf(reference_value(F.f.max_code + 1, F)) || std::isnan(reference_value(F.f.max_code + 1, F)));
    EXPECT_EQ(reference_value(1 << F.m, F), F.f.min_normal);
  }
  EXPECT_EQ(kE4M3.max, 448.0f);
  EXPECT_EQ(kE5M2.max, 57344.0f);
}

TEST(Fp8, EncodingADecodedCodeGivesTheCodeBack) {
  for (const Format& F : kFormats) {
    SCOPED_TRACE(F.name);
    for (int c = 0; c < 256; ++c) {
      const double v = reference_value(static_cast<uint8_t>(c), F);
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(kmath::fp8_value(kmath::fp8_bits(static_cast<float>(v), F.f), F.f)));
        continue;
      }
      if (std::isinf(v)) continue;  // saturates: below
      EXPECT_EQ(kmath::fp8_bits(static_cast<float>(v), F.f), c) << "value " << v;
      EXPECT_TRUE(same(kmath::fp8_round(static_cast<float>(v), F.f), static_cast<float>(v))) << "value " << v;
    }
  }
}

TEST(Fp8, DecodingIsMonotonicOverThePositiveCodes) {
  for (const Format& F : kFormats) {
    for (int c = 0; c < F.f.max_code; ++c) {
      EXPECT_LT(reference_value(c, F), reference_value(c + 1, F)) << F.name << " code " << c;
      EXPECT_LT(kmath::fp8_value(c, F.f), kmath::fp8_value(c + 1, F.f)) << F.name << " code " << c;
      EXPECT_GT(kmath::fp8_value(c | 0x80, F.f), kmath::fp8_value((c + 1) | 0x80, F.f)) << F.name << " code " << c;
    }
  }
}

// Between two neighbours: below the midpoint the lower, above it the upper, at it the one with an even code.
TEST(Fp8, RoundsToNearestEvenAtEveryMidpoint) {
  for (const Format& F : kFormats) {
    SCOPED_TRACE(F.name);
    for (int c = 0; c < F.f.max_code; ++c) {
      const float lo = static_cast<float>(reference_value(c, F)), hi = static_cast<float>(reference_value(c + 1, F));
      const float mid = (lo + hi) / 2;  // exact: three bits of fraction fit in fp32 many times over
      ASSERT_EQ(static_cast<double>(mid), (reference_value(c, F) + reference_value(c + 1, F)) / 2);
      const int even = c % 2 == 0 ? c : c + 1;
      for (float sign : {1.0f, -1.0f}) {
        const uint8_t s = sign < 0 ? 0x80 : 0;
        EXPECT_EQ(kmath::fp8_bits(sign * mid, F.f), even | s) << "midpoint " << sign * mid;
        EXPECT_EQ(kmath::fp8_bits(sign * std::nextafter(mid, 0.0f), F.f), c | s) << "below " << sign * mid;
        EXPECT_EQ(kmath::fp8_bits(sign * std::nextafter(mid, 1e9f), F.f), (c + 1) | s) << "above " << sign * mid;
      }
    }
    // Under the smallest subnormal: half of it is a tie that goes to zero, anything above to the subnormal.
    const float tiny = static_cast<float>(reference_value(1, F));
    EXPECT_EQ(kmath::fp8_bits(tiny / 2, F.f), 0);
    EXPECT_EQ(kmath::fp8_bits(-tiny / 2, F.f), 0x80);
    EXPECT_EQ(kmath::fp8_bits(std::nextafter(tiny / 2, 1.0f), F.f), 1);
    EXPECT_EQ(kmath::fp8_bits(tiny / 4, F.f), 0);
    EXPECT_EQ(kmath::fp8_bits(1e-40f, F.f), 0);  // an fp32 subnormal
  }
}

TEST(Fp8, SaturatesToTheLargestFiniteValueAndKeepsNaN) {
  for (const Format& F : kFormats) {
    SCOPED_TRACE(F.name);
    const uint8_t max = F.f.max_code;
    for (float x : {F.f.max * 1.01f, F.f.max * 1.2f, F.f.max * 4, 1e30f, std::numeric_limits<float>::max(),
                    std::numeric_limits<float>::infinity()}) {
      EXPECT_EQ(kmath::fp8_bits(x, F.f), max) << x;
      EXPECT_EQ(kmath::fp8_bits(-x, F.f), max | 0x80) << -x;
      EXPECT_EQ(kmath::fp8_round(x, F.f), F.f.max) << x;
      EXPECT_EQ(kmath::fp8_round(-x, F.f), -F.f.max) << -x;
    }
    EXPECT_TRUE(std::isnan(kmath::fp8_value(kmath::fp8_bits(std::numeric_limits<float>::quiet_NaN(), F.f), F.f)));
  }
  // E5M2 keeps its infinities as codes; E4M3 has none.
  EXPECT_TRUE(std::isinf(kmath::fp8_value(0x7C, kE5M2)));
  EXPECT_TRUE(std::isinf(kmath::fp8_value(0xFC, kE5M2)));
  EXPECT_TRUE(std::isnan(kmath::fp8_value(0x7D, kE5M2)));
  EXPECT_EQ(kmath::fp8_value(0x7C, kE4M3), 384.0f);  // 2^8 x 1.5: a finite value there
}

// The exact conversion against a brute-force nearest value over the 256 codes (ties to the even code), on random
// values across every binade of both formats and beyond.
TEST(Fp8, EncodesTheNearestCode) {
  std::mt19937_64 rng(26);
  for (const Format& F : kFormats) {
    SCOPED_TRACE(F.name);
    std::uniform_real_distribution<double> exponent(-F.bias - F.m - 3, std::log2(F.f.max) + 2);
    for (int i = 0; i < 20000; ++i) {
      const float x = static_cast<float>((rng() & 1 ? -1 : 1) * std::exp2(exponent(rng)));
      int best = -1;
      double best_distance = 0;
      for (int c = 0; c < 256; ++c) {
        const double v = reference_value(c, F);
        if (!std::isfinite(v) || std::signbit(v) != std::signbit(x)) continue;
        const double d = std::fabs(v - x);
        if (best < 0 || d < best_distance || (d == best_distance && c % 2 == 0)) best = c, best_distance = d;
      }
      if (std::fabs(x) >= F.f.max) best = F.f.max_code | (x < 0 ? 0x80 : 0);
      ASSERT_EQ(kmath::fp8_bits(x, F.f), best) << "x " << x;
    }
  }
}

// The branch-free rounding the quantizing loops use is the exact conversion there and back, on every bf16 value (the
// activations' type) and on random fp32 values times random scales.
TEST(Fp8, BranchFreeRoundingEqualsTheExactConversion) {
  for (const Format& F : kFormats) {
    SCOPED_TRACE(F.name);
    for (uint32_t b = 0; b < 65536; ++b) {
      const float x = std::bit_cast<float>(b << 16);
      if (std::isnan(x)) {
        ASSERT_TRUE(std::isnan(kmath::fp8_round(x, F.f))) << "NaN " << b;
        continue;
      }
      const float want = kmath::fp8_value(kmath::fp8_bits(x, F.f), F.f);
      ASSERT_TRUE(same(kmath::fp8_round(x, F.f), want)) << "x " << x << ": " << kmath::fp8_round(x, F.f) << ", not " << want;
    }
    std::mt19937_64 rng(8);
    std::normal_distribution<float> value(0, 1);
    std::uniform_real_distribution<float> log_scale(-20, 20);
    for (int i = 0; i < 200000; ++i) {
      const float x = value(rng) * std::exp2(log_scale(rng));
      ASSERT_TRUE(same(kmath::fp8_round(x, F.f), kmath::fp8_value(kmath::fp8_bits(x, F.f), F.f))) << "x " << x;
    }
  }
}

// ---- delayed scaling ---------------------------------------------------------------------------------------------

// Three tensors of one GEMM (input E4M3, weight E4M3, gradient E5M2): each step the GEMM records its amaxes into row
// 0, then the update. The scales are written out by hand from Transformer Engine's rule (fp8_max / amax / 2^margin,
// an amax of 0, infinity or NaN keeps the scale) with an amax history of H = 2 (the larger of the last two).
TEST(DelayedScaling, FollowsAWrittenOutReferenceOverSteps) {
  Fp8Recipe recipe;
  recipe.history = 2;
  const DelayedScaling scaling(recipe);
  std::vector<float> scale = {1, 1, 1}, history(2 * 3, 0.0f);
  auto step = [&](float input, float weight, float grad) {
    history[0] = input, history[1] = weight, history[2] = grad;
    scaling.update(scale.data(), history.data(), 3);
    EXPECT_EQ(history[0], 0.0f);  // row 0 cleared for the next amaxes
    EXPECT_EQ(history[1], 0.0f);
    EXPECT_EQ(history[2], 0.0f);
  };
  // 1: a weight amax of 0 keeps its scale (1); the gradient's tiny amax gives a large scale.
  step(2, 0, 0.5f);
  EXPECT_EQ(scale[0], 224.0f);      // 448 / 2
  EXPECT_EQ(scale[1], 1.0f);        // amax 0: kept
  EXPECT_EQ(scale[2], 114688.0f);   // 57344 / 0.5
  // 2: the history still holds step 1's amaxes: the larger of the two counts.
  step(1, 4, 8);
  EXPECT_EQ(scale[0], 224.0f);      // max(1, 2) = 2
  EXPECT_EQ(scale[1], 112.0f);      // 448 / 4
  EXPECT_EQ(scale[2], 7168.0f);     // 57344 / 8
  // 3: step 1's amaxes have left the history; a saturating input (its amax 1792, far past what the scale of 224
  // kept in range: 1792 * 224 > 448) gives the scale that maps it onto E4M3's largest value exactly.
  step(1792, 0, 2);
  EXPECT_EQ(scale[0], 0.25f);       // 448 / 1792
  EXPECT_EQ(scale[1], 112.0f);      // max(0, 4) = 4
  EXPECT_EQ(scale[2], 7168.0f);     // max(2, 8) = 8
  EXPECT_EQ(kmath::fp8_round(1792 * scale[0], kE4M3), 448.0f);
  EXPECT_EQ(kmath::fp8_round(1792 * 224.0f, kE4M3), 448.0f);  // what step 2's scale made of it: saturated
  // 4: an infinite and a NaN amax keep the scale; the saturating amax is still in the history.
  step(std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), 0);
  EXPECT_EQ(scale[0], 0.25f);
  EXPECT_EQ(scale[1], 112.0f);
  EXPECT_EQ(scale[2], 28672.0f);    // max(0, 2) = 2
  // 5: both rows zero for the gradient: kept; the others' non-finite amaxes still in the history keep theirs.
  step(0, 0, 0);
  EXPECT_EQ(scale[0], 0.25f);
  EXPECT_EQ(scale[1], 112.0f);
  EXPECT_EQ(scale[2], 28672.0f);
  // 6: the history is clean again.
  step(7, 7, 7);
  EXPECT_EQ(scale[0], 64.0f);
  EXPECT_EQ(scale[1], 64.0f);
  EXPECT_EQ(scale[2], 8192.0f);
}

TEST(DelayedScaling, HistoryOfOneAndAMargin) {
  Fp8Recipe recipe;  // NVIDIA's BERT values: history 1, margin 0
  EXPECT_EQ(recipe.history, 1);
  EXPECT_EQ(recipe.margin, 0.0f);
  recipe.margin = 2;
  const DelayedScaling scaling(recipe);
  std::vector<float> scale = {1, 1, 1}, history = {4, 0, 1};
  scaling.update(scale.data(), history.data(), 3);
  EXPECT_EQ(scale[0], 28.0f);     // 448 / 4 / 4
  EXPECT_EQ(scale[1], 1.0f);      // 0: kept
  EXPECT_EQ(scale[2], 14336.0f);  // 57344 / 1 / 4
  history = {0, 8, 0};            // with H = 1 only this step's amaxes count
  scaling.update(scale.data(), history.data(), 3);
  EXPECT_EQ(scale[0], 28.0f);
  EXPECT_EQ(scale[1], 14.0f);
  EXPECT_EQ(scale[2], 14336.0f);
  EXPECT_EQ(history, std::vector<float>(3, 0.0f));
}

TEST(DelayedScaling, ReadsItsRecipeStrictly) {
  auto read = [](const char* text, Fp8Recipe* r) {
    const Json block = Json::parse(text);
    JsonFields fields(block, "backend");
    const bool fp8 = read_fp8_recipe(fields, r);
    fields.reject_unknown();
    return fp8;
  };
  Fp8Recipe r;
  EXPECT_FALSE(read("{}", &r));
  EXPECT_TRUE(read(R"({"precision": "fp8", "fp8_history": 16, "fp8_margin": 1})", &r));
  EXPECT_EQ(r.history, 16);
  EXPECT_EQ(r.margin, 1.0f);
  EXPECT_THROW(read(R"({"precision": "fp16"})", &r), InputError);
  EXPECT_THROW(read(R"({"precision": "fp8", "fp8_history": 0})", &r), InputError);
  EXPECT_THROW(read(R"({"precision": "fp8", "fp8_margin": -1})", &r), InputError);
  EXPECT_THROW(read(R"({"fp8_history": 4})", &r), InputError);
}

}  // namespace
}  // namespace bertperf
