// bf16 on the CPU: the storage type of the cpu-bf16 backend's activations and weight copy, its conversions, and
// the types each CPU backend gives ops.h's A, W and F (cpu_ops.h).
//
// bf16 is the upper half of an fp32. Conversion from fp32 rounds to nearest even, keeps a NaN a (quiet) NaN, and
// turns an fp32 subnormal into a zero of its sign: that is what the x86 conversion instruction (VCVTNEPS2BF16) and
// oneDNN's bf16 stores do, so values the backend rounds itself and values oneDNN rounds are the same bits. (CUDA's
// __float2bfloat16_rn keeps subnormals; the two differ only below 2^-126, which no BERT activation reaches.)
// The conversions are branch-free integer code, so loops over them vectorise.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/dtype.h"
#include "core/errors.h"

namespace bertperf::cpu {

struct bf16 {
  uint16_t bits;
};

inline bf16 to_bf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  const uint32_t zero = (u >> 16) & 0x8000u;
  uint32_t r = (u & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded;
  r = (u & 0x7F800000u) == 0 ? zero : r;
  return {static_cast<uint16_t>(r)};
}

inline float to_float(bf16 x) { return std::bit_cast<float>(static_cast<uint32_t>(x.bits) << 16); }

// x rounded to bf16 and back: the value a bf16 store keeps.
inline float round_to_bf16(float x) { return to_float(to_bf16(x)); }

// Loads and stores of a backend's storage types in its compute type: identity for float and double.
inline float load(bf16 x) { return to_float(x); }
inline float load(float x) { return x; }
inline double load(double x) { return x; }
template <typename S, typename R>
inline S store(R x) {
  if constexpr (std::is_same_v<S, bf16>) {
    return to_bf16(static_cast<float>(x));
  } else {
    return static_cast<S>(x);
  }
}

// ops.h's element types of the CPU backend whose template parameter is T: the fp32 and fp64 backends keep
// everything in T; the bf16 backend ("cpu-bf16") keeps activations (A) and the weight copy (W) in bf16 and master
// weights, gradients, moments and saved statistics (F) in fp32, and computes in fp32 (R), as the CUDA backend.
template <typename T>
struct Types {
  using A = T;
  using W = T;
  using F = T;
  using R = T;
};
template <>
struct Types<bf16> {
  using A = bf16;
  using W = bf16;
  using F = float;
  using R = float;
};

template <typename T>
inline constexpr bool is_bf16 = std::is_same_v<T, bf16>;

// Calls f(static_cast<T*>(nullptr)) with T the CPU backends' element type of `type`: the one map from DType to a C++
// type (a type without a case here is a compile error: dtype.h).
template <typename F>
void visit_dtype(DType type, F&& f) {
  switch (type) {
    case DType::F32: f(static_cast<float*>(nullptr)); return;
    case DType::F64: f(static_cast<double*>(nullptr)); return;
    case DType::BF16: f(static_cast<bf16*>(nullptr)); return;
    case DType::E4M3: case DType::E5M2:  // the FP8 twin keeps its quantized values in bf16 (every one is a bf16)
      BERT_CHECK(false, "the CPU backends keep no ", dtype_name(type), " memory");
  }
}

// n elements converted, for the backend's convert(): to bf16 from fp32 as to_bf16 (the backend's own stores,
// subnormals flushed), from fp64 in one rounding to nearest even with bf16's subnormals kept (kmath::bf16_bits, as
// the CUDA backend converts); between fp32 and fp64 as C++ converts.
void convert_elements(bf16* dst, const float* src, size_t n);
void convert_elements(bf16* dst, const double* src, size_t n);
void convert_elements(float* dst, const bf16* src, size_t n);
void convert_elements(double* dst, const bf16* src, size_t n);
void convert_elements(float* dst, const double* src, size_t n);
void convert_elements(double* dst, const float* src, size_t n);
template <typename T>
void convert_elements(T* dst, const T* src, size_t n) {
  std::memcpy(dst, src, n * sizeof(T));
}

}  // namespace bertperf::cpu
