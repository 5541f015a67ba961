// Elementwise and column-reduction kernels of the CUDA backend: the activation forwards and backwards (the shared
// kmath formulas), dtype conversion, and the deterministic column sums every bias gradient is made of.
#pragma once

#include <cstddef>

#include "backends/backend.h"
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/cuda_context.h"
#include "backends/cuda/scratch.h"
#include "backends/ops.h"

namespace bertperf::cuda {

void activation_backward(CudaContext& ctx, const ops::ActivationBackward& p);

// out = act(inp) on the first `cols` columns of N rows of stride ld (out may be inp).
void activation_forward_rows(CudaContext& ctx, bf16* out, const bf16* inp, int N, int cols, size_t ld,
                             ops::Activation act);
// dinp = dout * act'(saved) on N rows of `cols` (stride ld for all three).
void activation_backward_rows(CudaContext& ctx, bf16* dinp, const bf16* dout, const bf16* saved, int N, int cols,
                              size_t ld, ops::Activation act);

// out[n * ld + c] = row[c] for the N rows of `cols` (a bias written into the output a GEMM then adds to).
void broadcast_row(CudaContext& ctx, bf16* out, const bf16* row, int N, int cols, size_t ld);

// sums[c] += sum over rows n of x[n * ld + c], c < C, in fp32, summed in a fixed order (deterministic).
void add_column_sums(CudaContext& ctx, DeviceScratch& scratch, float* sums, const bf16* x, int N, int C, size_t ld);

// dst[i] = src[i] converted (round to nearest even), n elements.
void convert(CudaContext& ctx, void* dst, DType dst_type, const void* src, DType src_type, size_t n);

}  // namespace bertperf::cuda
