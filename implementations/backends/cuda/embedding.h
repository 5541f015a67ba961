// CUDA embeddings (three gathers, add, LayerNorm, dropout) and row gathers, with their backwards. The embeddings'
// backward keeps the LayerNorm input's gradient in fp32 (in the (2, N, C) bf16 scratch ops.h gives it).
// Scatter-adds into rows that repeat (a token id twice, a position in every sequence) are deterministic: the
// indices are sorted stably (CUB radix sort) and each destination row sums its sources in token order.
#pragma once

#include "backends/cuda/cuda_context.h"
#include "backends/cuda/scratch.h"
#include "backends/ops.h"

namespace bertperf::cuda {

void embedding_forward(CudaContext& ctx, const ops::EmbeddingForward& p);
void embedding_backward(CudaContext& ctx, OpScratch& scratch, const ops::EmbeddingBackward& p);
void gather_forward(CudaContext& ctx, const ops::GatherForward& p);
void gather_backward(CudaContext& ctx, OpScratch& scratch, const ops::GatherBackward& p);

}  // namespace bertperf::cuda
