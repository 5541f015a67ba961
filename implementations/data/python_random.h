// CPython's random.Random, bit for bit: MT19937 seeded through init_by_array with the integer seed,
// random(), getrandbits(), randint/randrange through _randbelow, and shuffle. The MLPerf data
// generator draws every decision from random.Random(12345), so reproducing its output means
// reproducing this exact stream and the exact way each Python method consumes it.
// Also Python's round() on a float (round half to even), which the generator uses for the number
// of masked positions.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace bertperf {

class PythonRandom {
 public:
  // random.Random(seed) for a non-negative integer seed (CPython seeds from |seed|'s 32-bit words).
  explicit PythonRandom(uint64_t seed);

  // One raw MT19937 output.
  uint32_t next_u32() {
    if (index_ >= kN) twist();
    uint32_t y = state_[index_++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= (y >> 18);
    return y;
  }
  // random.random(): 53 random bits from two outputs, in [0, 1).
  double random();
  // random.getrandbits(k) for 1 <= k <= 64.
  uint64_t getrandbits(int k);
  // random.Random._randbelow(n): uniform in [0, n) by rejection on bit_length(n) bits; n >= 1.
  uint64_t randbelow(uint64_t n) {
    if (n - 1 < 0xffffffffull) {  // the generator's case: one 32-bit output per try
      const int shift = std::countl_zero(static_cast<uint32_t>(n));  // 32 - bit_length(n)
      uint32_t r = next_u32() >> shift;
      while (r >= n) r = next_u32() >> shift;
      return r;
    }
    return randbelow_wide(n);
  }
  // random.randint(a, b), both ends included; a <= b.
  int64_t randint(int64_t a, int64_t b) {
    return a + static_cast<int64_t>(randbelow(static_cast<uint64_t>(b - a) + 1));
  }
  // random.randrange(start, stop) with step 1; start < stop.
  int64_t randrange(int64_t start, int64_t stop) {
    return start + static_cast<int64_t>(randbelow(static_cast<uint64_t>(stop - start)));
  }
  // random.shuffle(x): Fisher-Yates from the back; only the length decides the draws.
  template <typename T>
  void shuffle(std::vector<T>& x) {
    for (size_t i = x.size(); i-- > 1;) {
      const size_t j = static_cast<size_t>(randbelow(i + 1));
      std::swap(x[i], x[j]);
    }
  }

 private:
  void init_genrand(uint32_t s);
  void init_by_array(const uint32_t* key, size_t length);
  void twist();
  uint64_t randbelow_wide(uint64_t n);

  static constexpr int kN = 624;
  uint32_t state_[kN];
  int index_ = kN + 1;
};

// Python 3's round(x) for a float: nearest integer, ties to even.
double python_round(double x);

}  // namespace bertperf
