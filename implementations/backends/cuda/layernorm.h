// CUDA LayerNorm (eps 1e-12, biased variance) and the post-LN sub-layer end LayerNorm(dropout(inp + bias) +
// residual), forward and backward; one warp per row. The row kernels are shared with the embeddings.
#pragma once

#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/cuda_context.h"
#include "backends/cuda/scratch.h"
#include "backends/ops.h"

namespace bertperf::cuda {

void residual_layernorm_forward(CudaContext& ctx, const ops::ResidualLayerNormForward& p);
void residual_layernorm_backward(CudaContext& ctx, OpScratch& scratch, const ops::ResidualLayerNormBackward& p);

// The embeddings' forward in one kernel: the three gathers and their sum (saved), LayerNorm, then dropout.
void embedding_layernorm_forward(CudaContext& ctx, const ops::EmbeddingForward& p);
// dx = LayerNorm backward of dy * dropout mask (the embeddings' mask, or none), kept in fp32; dgamma and dbeta
// accumulated from the same masked dy.
void layernorm_dropout_backward(CudaContext& ctx, DeviceScratch& scratch, float* dx, float* dgamma, float* dbeta,
                                const bf16* dy, const bf16* x, const float* mean, const float* rstd,
                                const bf16* gamma, int N, int C, const ops::Dropout& dropout);

}  // namespace bertperf::cuda
