// Counter-based random numbers: Philox4x32-10 (Salmon et al., SC'11).
//
// Every random draw in training (dropout masks) is a pure function of
// (seed, step, site, element), so the CPU and CUDA backends draw identical masks, a backward pass
// can regenerate its forward's mask instead of storing it, and a run is reproducible from its seed.
// Header-only and host/device-callable for that reason.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define BERT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define BERT_HOST_DEVICE inline
#endif

namespace bertperf {

struct Philox4 {
  uint32_t v[4];
};

BERT_HOST_DEVICE void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t product = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(product >> 32);
  lo = static_cast<uint32_t>(product);
}

// The raw generator: 10 rounds over a 128-bit counter with a 64-bit key.
BERT_HOST_DEVICE Philox4 philox4x32_10(Philox4 counter, uint32_t key0, uint32_t key1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += 0x9E3779B9u;
      key1 += 0xBB67AE85u;
    }
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(0xD2511F53u, counter.v[0], hi0, lo0);
    philox_mulhilo(0xCD9E8D57u, counter.v[2], hi1, lo1);
    counter = {{hi1 ^ counter.v[1] ^ key0, lo1, hi0 ^ counter.v[3] ^ key1, lo0}};
  }
  return counter;
}

// Where a stream of draws lives: one per (run seed, training step, dropout site).
struct RngKey {
  uint64_t seed;
  uint32_t step;
  uint32_t site;
};

// 32 random bits for one element. Elements 4k..4k+3 share one Philox block, so a kernel that
// handles four consecutive elements pays for one block.
BERT_HOST_DEVICE uint32_t philox_bits(RngKey key, uint64_t element) {
  const uint64_t block = element >> 2;
  const Philox4 out = philox4x32_10(
      {{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), key.site, key.step}},
      static_cast<uint32_t>(key.seed), static_cast<uint32_t>(key.seed >> 32));
  return out.v[element & 3];
}

// Uniform in [0, 1) with 24 bits: exactly representable in fp32 on every backend.
BERT_HOST_DEVICE float philox_uniform(RngKey key, uint64_t element) {
  return static_cast<float>(philox_bits(key, element) >> 8) * (1.0f / 16777216.0f);
}

// Dropout keeps an element when its uniform draw is at or above the drop probability.
BERT_HOST_DEVICE bool dropout_keep(RngKey key, uint64_t element, float drop_prob) {
  return philox_uniform(key, element) >= drop_prob;
}

}  // namespace bertperf
