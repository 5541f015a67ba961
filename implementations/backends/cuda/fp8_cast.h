// FP8 casts (backends/fp8.h's recipe, ops.h's FP8 column): a bf16 matrix quantized with its per-tensor scale into FP8
// codes (round to nearest even, saturating: kmath::fp8_bits, the CPU twin's rule), written plain, transposed or both,
// with its amax taken in the same pass. Written here because no library does this fused job: cuBLASLt, CUB and
// cuDNN offer no scale + saturating FP8 round + transpose + amax in one pass over the tensor.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cuda/cuda_context.h"
#include "backends/dtype.h"

namespace bertperf::cuda {

struct Fp8Cast {
  const void* src = nullptr;  // (rows, cols) bf16, row-major at ld_src
  size_t ld_src = 0;
  int rows = 0, cols = 0;
  const float* scale = nullptr;  // device: code = fp8(x * scale)
  DType format = DType::E4M3;    // E4M3 or E5M2
  uint8_t* out = nullptr;        // (rows, cols) row-major, ld cols; null for none
  uint8_t* out_t = nullptr;      // (cols, rows) row-major, ld rows (the transpose); null for none
  float* amax = nullptr;         // device: max(*amax, max |x|), NaN aside; null for none
  float* inv_scale = nullptr;    // device: 1 / *scale, for the GEMM's scale pointer; null for none
};

void fp8_cast(CudaContext& ctx, const Fp8Cast& c);

}  // namespace bertperf::cuda
