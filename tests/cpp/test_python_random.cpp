// PythonRandom against CPython: the vectors of docs section 3.4 and the outputs stored by
// scripts/make_python_random_golden.py (tests/golden/python_random/vectors.json).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "data/python_random.h"

using bertperf::PythonRandom;
using bertperf::python_round;

namespace {

const nlohmann::json& golden() {
  static const nlohmann::json doc = [] {
    std::ifstream in(std::string(BERTPERF_SOURCE_DIR) + "/tests/golden/python_random/vectors.json");
    EXPECT_TRUE(in.good()) << "golden vectors missing";
    return nlohmann::json::parse(in);
  }();
  return doc;
}

double hex_float(const nlohmann::json& j) { return std::strtod(j.get<std::string>().c_str(), nullptr); }

std::vector<int> shuffled(PythonRandom& r, int n) {
  std::vector<int> x(n);
  std::iota(x.begin(), x.end(), 0);
  r.shuffle(x);
  return x;
}

}  // namespace

TEST(PythonRandom, ReferenceDocVectors) {
  PythonRandom a(12345);
  EXPECT_EQ(a.next_u32(), 1789368711u);
  EXPECT_EQ(a.next_u32(), 3146859322u);
  EXPECT_EQ(a.next_u32(), 43676229u);
  PythonRandom b(12345);
  EXPECT_EQ(b.random(), 0.41661987254534116);
  EXPECT_EQ(b.random(), 0.010169169457068361);
  PythonRandom c(12345);
  EXPECT_EQ(c.randint(2, 509), 215);
  EXPECT_EQ(c.randint(0, 30521), 24008);
  PythonRandom d(12345);
  EXPECT_EQ(shuffled(d, 10), (std::vector<int>{8, 7, 3, 5, 1, 2, 9, 4, 0, 6}));
}

TEST(PythonRandom, MatchesCPythonPerMethod) {
  for (const auto& s : golden()["seeds"]) {
    const uint64_t seed = s["seed"].get<uint64_t>();
    SCOPED_TRACE(seed);
    PythonRandom r(seed);
    for (const auto& v : s["u32"]) ASSERT_EQ(r.next_u32(), v.get<uint32_t>());
    r = PythonRandom(seed);
    for (const auto& v : s["random"]) ASSERT_EQ(r.random(), hex_float(v));
    r = PythonRandom(seed);
    for (const auto& v : s["getrandbits"]) ASSERT_EQ(r.getrandbits(v[0].get<int>()), v[1].get<uint64_t>()) << v[0];
    r = PythonRandom(seed);
    for (const auto& v : s["randint"])
      ASSERT_EQ(r.randint(v[0].get<int64_t>(), v[1].get<int64_t>()), v[2].get<int64_t>()) << v;
    r = PythonRandom(seed);
    for (const auto& v : s["shuffle"]) {
      const auto expect = v.get<std::vector<int>>();
      ASSERT_EQ(shuffled(r, static_cast<int>(expect.size())), expect);
    }
  }
}

TEST(PythonRandom, MatchesCPythonInterleaved) {
  for (const auto& s : golden()["seeds"]) {
    PythonRandom r(s["seed"].get<uint64_t>());
    for (const auto& op : s["mixed"]) {
      const std::string kind = op[0];
      if (kind == "random") {
        ASSERT_EQ(r.random(), hex_float(op[1]));
      } else if (kind == "randint") {
        ASSERT_EQ(r.randint(op[1].get<int64_t>(), op[2].get<int64_t>()), op[3].get<int64_t>());
      } else {
        const auto expect = op[1].get<std::vector<int>>();
        ASSERT_EQ(shuffled(r, static_cast<int>(expect.size())), expect);
      }
    }
  }
}

TEST(PythonRandom, RoundHalfEven) {
  EXPECT_EQ(python_round(0.5), 0.0);
  EXPECT_EQ(python_round(1.5), 2.0);
  EXPECT_EQ(python_round(2.5), 2.0);
  EXPECT_EQ(python_round(-2.5), -2.0);
  // The generator's cases from the reference notes: len(tokens) * 0.15 for 30, 70, 510.
  EXPECT_EQ(python_round(30 * 0.15), 4.0);
  EXPECT_EQ(python_round(70 * 0.15), 10.0);
  EXPECT_EQ(python_round(510 * 0.15), 76.0);
  for (const auto& v : golden()["round"]) ASSERT_EQ(python_round(hex_float(v[0])), hex_float(v[1])) << v[0];
}
