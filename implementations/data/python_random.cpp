// CPython's random.Random (python_random.h). MT19937 as in Matsumoto and Nishimura's reference code,
// which CPython's _randommodule.c follows; the method layer follows Lib/random.py.
#include "data/python_random.h"

#include <bit>
#include <cmath>

#include "core/errors.h"

namespace bertperf {

namespace {
constexpr int kM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfu;
constexpr uint32_t kUpperMask = 0x80000000u;
constexpr uint32_t kLowerMask = 0x7fffffffu;
}  // namespace

PythonRandom::PythonRandom(uint64_t seed) {
  // CPython splits |seed| into 32-bit words, least significant first; a zero seed is one zero word.
  uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  init_by_array(key, key[1] != 0 ? 2 : 1);
}

void PythonRandom::init_genrand(uint32_t s) {
  state_[0] = s;
  for (int i = 1; i < kN; ++i)
    state_[i] = 1812433253u * (state_[i - 1] ^ (state_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  index_ = kN;
}

void PythonRandom::init_by_array(const uint32_t* key, size_t length) {
  init_genrand(19650218u);
  size_t i = 1, j = 0;
  for (size_t k = (kN > length ? kN : length); k; --k) {
    state_[i] = (state_[i] ^ ((state_[i - 1] ^ (state_[i - 1] >> 30)) * 1664525u)) + key[j] +
                static_cast<uint32_t>(j);
    ++i;
    ++j;
    if (i >= static_cast<size_t>(kN)) {
      state_[0] = state_[kN - 1];
      i = 1;
    }
    if (j >= length) j = 0;
  }
  for (size_t k = kN - 1; k; --k) {
    state_[i] = (state_[i] ^ ((state_[i - 1] ^ (state_[i - 1] >> 30)) * 1566083941u)) -
                static_cast<uint32_t>(i);
    ++i;
    if (i >= static_cast<size_t>(kN)) {
      state_[0] = state_[kN - 1];
      i = 1;
    }
  }
  state_[0] = 0x80000000u;  // guarantees a non-zero initial state
  index_ = kN;
}

void PythonRandom::twist() {
  int k = 0;
  for (; k < kN - kM; ++k) {
    const uint32_t y = (state_[k] & kUpperMask) | (state_[k + 1] & kLowerMask);
    state_[k] = state_[k + kM] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
  }
  for (; k < kN - 1; ++k) {
    const uint32_t y = (state_[k] & kUpperMask) | (state_[k + 1] & kLowerMask);
    state_[k] = state_[k + (kM - kN)] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
  }
  const uint32_t y = (state_[kN - 1] & kUpperMask) | (state_[0] & kLowerMask);
  state_[kN - 1] = state_[kM - 1] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
  index_ = 0;
}

double PythonRandom::random() {
  const uint32_t a = next_u32() >> 5, b = next_u32() >> 6;
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

uint64_t PythonRandom::getrandbits(int k) {
  BERT_CHECK(k >= 1 && k <= 64, "getrandbits(", k, ") is supported for 1..64 bits only");
  if (k <= 32) return next_u32() >> (32 - k);
  // Wider draws fill 32-bit words from the least significant end; the last word keeps its top bits.
  const uint64_t low = next_u32();
  const uint64_t high = next_u32() >> (64 - k);
  return low | (high << 32);
}

uint64_t PythonRandom::randbelow_wide(uint64_t n) {
  const int k = std::bit_width(n);
  uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

double python_round(double x) {
  // Exactly CPython's float.__round__ without ndigits: round half away, then fix exact halves.
  double r = std::round(x);
  if (std::fabs(x - r) == 0.5) r = 2.0 * std::round(x / 2.0);
  return r;
}

}  // namespace bertperf
