// The element types of backend memory, written once: the DType list, each type's size and name.
//
// Every switch over DType in the project has a case per type and no default, and the build makes a missing case an
// error (-Werror=switch, CMakeLists.txt): adding a type makes the compiler name every place that must handle it
// (sizes and names here, conversions in each backend, the transports' element types). tests/compile/lists.cpp shows
// the compiler refusing such a miss.
#pragma once

#include <cstddef>
#include <cstdint>

namespace bertperf {

// E4M3 and E5M2 are the FP8 formats of the FP8 GEMMs (backends/fp8.h: their layout and exact conversions).
enum class DType : uint8_t { F32, F64, BF16, E4M3, E5M2 };

constexpr size_t dtype_size(DType type) {
  switch (type) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
    case DType::E4M3: case DType::E5M2: return 1;
  }
  return 0;  // not reached: every type has its case
}

constexpr const char* dtype_name(DType type) {
  switch (type) {
    case DType::F32: return "fp32";
    case DType::F64: return "fp64";
    case DType::BF16: return "bf16";
    case DType::E4M3: return "e4m3";
    case DType::E5M2: return "e5m2";
  }
  return "";
}

}  // namespace bertperf
