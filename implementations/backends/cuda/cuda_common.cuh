// Device-side building blocks shared by the CUDA kernels: bf16/fp32 loads and stores, 16-byte packs, warp and
// block reductions, the fast tanh/exp callables for kernel_math.h, and the dropout key read from backend memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backends/kernel_math.h"
#include "backends/ops.h"
#include "core/philox.h"

namespace bertperf::cuda {

using bf16 = __nv_bfloat16;

// ---- element conversion ----------------------------------------------------------------------------------
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(double x) { return static_cast<float>(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ double from_float<double>(float x) { return x; }

// 8 bf16 in one 16-byte load or store.
struct alignas(16) Bf16x8 {
  bf16 v[8];
};

__device__ __forceinline__ void load8(float (&out)[8], const bf16* p) {
  const Bf16x8 pack = *reinterpret_cast<const Bf16x8*>(p);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = __bfloat162float(pack.v[i]);
}
__device__ __forceinline__ void store8(bf16* p, const float (&in)[8]) {
  Bf16x8 pack;
#pragma unroll
  for (int i = 0; i < 8; ++i) pack.v[i] = __float2bfloat16_rn(in[i]);
  *reinterpret_cast<Bf16x8*>(p) = pack;
}

// Whether every pointer is 16-byte aligned (8 bf16 per vector access).
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// ---- reductions ------------------------------------------------------------------------------------------
template <typename T>
__device__ __forceinline__ T warp_sum(T x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xFFFFFFFFu, x, offset);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xFFFFFFFFu, x, offset));
  return x;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the total. `shared` holds 32
// values. A fixed tree: the result does not depend on timing.
template <typename T>
__device__ __forceinline__ T block_sum(T x, T* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  x = warp_sum(x);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = lane < warps ? shared[lane] : T(0);
  return warp_sum(x);
}

// ---- the shared math's transcendental callables ----------------------------------------------------------
struct DeviceTanh {
  __device__ __forceinline__ float operator()(float x) const { return tanhf(x); }
};
struct DeviceExp {
  __device__ __forceinline__ float operator()(float x) const { return __expf(x); }
};
struct DeviceSqrt {
  __device__ __forceinline__ float operator()(float x) const { return sqrtf(x); }
};

// ---- dropout ---------------------------------------------------------------------------------------------
// An op's Dropout resolved on the device: the Philox key from the counter in backend memory (ops.h).
struct DeviceDropout {
  float prob;
  float scale;  // 1 / (1 - prob)
  const ops::DropoutCounter* counter;
  uint32_t step_offset, site;

  __device__ __forceinline__ RngKey key() const {
    return counter ? RngKey{counter->seed, counter->step + step_offset, site} : RngKey{0, 0, site};
  }
};

// The host side: checks p and forms the scale as the CPU does (1 / (1 - p) in fp32).
DeviceDropout device_dropout(const ops::Dropout& d);

// Multipliers of elements e0 .. e0+7 (scale or 0); e0 a multiple of 4, so two Philox blocks serve all eight.
__device__ __forceinline__ void dropout_mult8(float (&mult)[8], RngKey key, uint64_t e0, float prob, float scale) {
#pragma unroll
  for (int b = 0; b < 2; ++b) {
    const uint64_t block = (e0 >> 2) + b;
    const Philox4 bits = philox4x32_10({{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), key.site,
                                         key.step}},
                                       static_cast<uint32_t>(key.seed), static_cast<uint32_t>(key.seed >> 32));
#pragma unroll
    for (int i = 0; i < 4; ++i)
      mult[4 * b + i] = static_cast<float>(bits.v[i] >> 8) * (1.0f / 16777216.0f) >= prob ? scale : 0.0f;
  }
}

// One element's multiplier: kmath::dropout_multiplier's draw (core/philox.h's philox_bits), with the word of the
// Philox block chosen by selects rather than by a runtime array index, which would put the block in local memory.
__device__ __forceinline__ float dropout_mult1(RngKey key, uint64_t e, float prob, float scale) {
  const uint64_t block = e >> 2;
  const Philox4 b = philox4x32_10({{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), key.site,
                                    key.step}},
                                  static_cast<uint32_t>(key.seed), static_cast<uint32_t>(key.seed >> 32));
  const uint32_t k = static_cast<uint32_t>(e & 3);
  const uint32_t bits = k == 0 ? b.v[0] : k == 1 ? b.v[1] : k == 2 ? b.v[2] : b.v[3];
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f) >= prob ? scale : 0.0f;
}

// ---- launch shapes ---------------------------------------------------------------------------------------
inline unsigned ceil_div(size_t a, size_t b) { return static_cast<unsigned>((a + b - 1) / b); }
// Blocks of a grid-stride loop over n elements: enough to fill the GPU, no more.
inline unsigned grid_for(size_t n, int threads, int max_blocks = 65536) {
  const size_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > static_cast<size_t>(max_blocks) ? max_blocks : blocks);
}

}  // namespace bertperf::cuda
