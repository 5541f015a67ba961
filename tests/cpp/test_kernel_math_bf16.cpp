// Rounding to bf16 in one step (kmath::bf16_bits, backends/kernel_math.h; the CUDA backend's f64 -> bf16 conversion
// runs it), against an exact reference: a binary search over the bf16 grid for the two neighbours of x and a
// comparison of the distances, which are exact in double. The hard cases are the doubles just off the midpoint of
// two bf16 neighbours that rounding to float first would put onto the midpoint: there, rounding twice takes the even
// neighbour, and rounding once the nearer one.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "backends/kernel_math.h"

namespace bertperf {
namespace {

using kmath::bf16_bits;

double bf16_value(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

// The nearest bf16 to x by search and exact distances; ties to the even pattern; beyond the largest finite value the
// next grid point is 2^128, whose pattern is infinity's.
uint16_t reference_bf16(double x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return sign | 0x7FC0;
  const double a = std::fabs(x);
  if (std::isinf(a)) return sign | 0x7F80;
  uint32_t lo = 0, hi = 0x7F80;  // the largest pattern with value <= a lies in [lo, hi)
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    (bf16_value(static_cast<uint16_t>(mid)) <= a ? lo : hi) = mid;
  }
  const double below = bf16_value(static_cast<uint16_t>(lo));
  const double above = lo == 0x7F7F ? std::ldexp(1.0, 128) : bf16_value(static_cast<uint16_t>(lo + 1));
  const double d_below = a - below, d_above = above - a;  // exact: a and its neighbours are within a factor 2
  const uint32_t nearest = d_below < d_above ? lo : d_above < d_below ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
  return static_cast<uint16_t>(sign | nearest);
}

// Rounding twice, through float, as the conversion did before.
uint16_t via_float(double x) {
  const float f = static_cast<float>(x);
  if (std::isnan(f)) return std::signbit(f) ? 0xFFC0 : 0x7FC0;
  uint32_t bits = std::bit_cast<uint32_t>(f);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// Midpoints of adjacent positive bf16 values over the whole range (normal, subnormal, the top binade).
std::vector<std::pair<uint16_t, double>> midpoints() {
  std::vector<std::pair<uint16_t, double>> m;
  for (uint32_t b = 1; b < 0x7F7F; b += (b < 0x0100 || b > 0x7E00 ? 1 : 37)) {
    const uint16_t lower = static_cast<uint16_t>(b), upper = static_cast<uint16_t>(b + 1);
    m.push_back({lower, (bf16_value(lower) + bf16_value(upper)) / 2});
  }
  return m;
}

TEST(Bf16Rounding, JustOffTheMidpointGoesToTheNearerNeighbourNotTheEvenOne) {
  int twice_wrong = 0, cases = 0;
  for (const auto& [b, mid] : midpoints()) {
    const uint16_t lower = b, upper = static_cast<uint16_t>(b + 1);
    // Off the midpoint by far less than half a float's last place, so that float rounds onto the midpoint.
    const double off = std::ldexp(mid, -30);
    ASSERT_EQ(static_cast<float>(mid + off), static_cast<float>(mid)) << mid;
    EXPECT_EQ(bf16_bits(mid + off), upper) << "just above the midpoint of " << bf16_value(lower) << " and "
                                           << bf16_value(upper);
    EXPECT_EQ(bf16_bits(mid - off), lower) << "just below the midpoint of " << bf16_value(lower) << " and "
                                           << bf16_value(upper);
    EXPECT_EQ(bf16_bits(mid), lower % 2 == 0 ? lower : upper) << "a tie goes to the even pattern";
    EXPECT_EQ(bf16_bits(-(mid + off)), 0x8000 | upper);
    // One double step off the midpoint as well.
    EXPECT_EQ(bf16_bits(std::nextafter(mid, 1e300)), upper);
    EXPECT_EQ(bf16_bits(std::nextafter(mid, 0.0)), lower);
    for (double x : {mid + off, mid - off}) {
      ASSERT_EQ(reference_bf16(x), bf16_bits(x)) << x;
      twice_wrong += via_float(x) != reference_bf16(x);
      ++cases;
    }
  }
  // The reference tells the two roundings apart: rounding through float is wrong on half of these.
  EXPECT_EQ(twice_wrong, cases / 2);
}

TEST(Bf16Rounding, MatchesTheExactReferenceOnRandomDoubles) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> exponent(-140, 129);
  std::uniform_int_distribution<uint64_t> fraction(0, (uint64_t{1} << 52) - 1);
  for (int i = 0; i < 200000; ++i) {
    const uint64_t sign = static_cast<uint64_t>(i % 2) << 63;
    const uint64_t bits = sign | (static_cast<uint64_t>(exponent(rng) + 1023) << 52) | fraction(rng);
    const double x = std::bit_cast<double>(bits);
    ASSERT_EQ(bf16_bits(x), reference_bf16(x)) << x;
  }
}

TEST(Bf16Rounding, FloatsRoundAsRoundToNearestEvenOfTheFloat) {
  std::mt19937 rng(8);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    ASSERT_EQ(bf16_bits(f), via_float(f)) << f;
  }
}

TEST(Bf16Rounding, EdgesOfTheRange) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(bf16_bits(0.0), 0x0000);
  EXPECT_EQ(bf16_bits(-0.0), 0x8000);
  EXPECT_EQ(bf16_bits(inf), 0x7F80);
  EXPECT_EQ(bf16_bits(-inf), 0xFF80);
  EXPECT_EQ(bf16_bits(std::numeric_limits<double>::quiet_NaN()), 0x7FC0);
  EXPECT_EQ(bf16_bits(1e300), 0x7F80);
  EXPECT_EQ(bf16_bits(1.0), 0x3F80);
  // The largest bf16, (2 - 2^-7) 2^127, and the midpoint above it, 2^128 - 2^119, where rounding reaches infinity.
  const double largest = std::ldexp(255.0, 120), overflow = std::ldexp(1.0, 128) - std::ldexp(1.0, 119);
  EXPECT_EQ(bf16_bits(largest), 0x7F7F);
  EXPECT_EQ(bf16_bits(std::nextafter(overflow, 0.0)), 0x7F7F);
  EXPECT_EQ(bf16_bits(overflow), 0x7F80);
  EXPECT_EQ(bf16_bits(-overflow), 0xFF80);
  // Subnormals: the smallest is 2^-133; half of it is a tie that goes to zero, anything above it rounds up.
  EXPECT_EQ(bf16_bits(std::ldexp(1.0, -133)), 0x0001);
  EXPECT_EQ(bf16_bits(std::ldexp(1.0, -134)), 0x0000);
  EXPECT_EQ(bf16_bits(std::nextafter(std::ldexp(1.0, -134), 1.0)), 0x0001);
  EXPECT_EQ(bf16_bits(std::ldexp(3.0, -134)), 0x0002);  // 1.5 x the smallest: a tie, to the even 2
  EXPECT_EQ(bf16_bits(std::ldexp(1.0, -126) - std::ldexp(1.0, -140)), 0x0080);  // rounds up into the normals
  EXPECT_EQ(bf16_bits(std::numeric_limits<double>::denorm_min()), 0x0000);
  EXPECT_EQ(bf16_bits(-std::numeric_limits<double>::denorm_min()), 0x8000);
}

}  // namespace
}  // namespace bertperf
