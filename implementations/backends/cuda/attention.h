// Variable-length multi-head self-attention on the GPU (ops::AttentionForward / AttentionBackward), called by
// CudaBackend. Sizes follow Backend::attention_saved_bytes / attention_workspace_bytes.
#pragma once

#include <cstddef>

#include "backends/cuda/cuda_context.h"
#include "backends/ops.h"

namespace bertperf::cuda {

void attention_forward(CudaContext& ctx, const ops::AttentionForward& p);
void attention_backward(CudaContext& ctx, const ops::AttentionBackward& p);
// Bytes of AttentionForward::saved for up to `tokens` tokens in `sequences` sequences of at most max_seqlen.
size_t attention_saved_bytes(int tokens, int sequences, int max_seqlen, int heads);
// Bytes of AttentionBackward::workspace, shared by all layers.
size_t attention_workspace_bytes(int tokens, int sequences, int max_seqlen, int heads);
// Whether cuDNN's fused attention backward gives the same bits on every run on compute capability `sm`: its
// deterministic dq reduction exists for ragged layouts on Hopper only (Ampere's ragged backward sums dq in a
// varying order, and Blackwell refuses determinism with dropout). Our kernel is deterministic everywhere.
inline bool cudnn_attention_deterministic(int sm) { return sm == 90; }

}  // namespace bertperf::cuda
