// Inside the CUDA attention (attention.h): the layout of the saved buffer, the index tensors the fused library
// needs, and the two implementations behind AttentionRunner.
//
//  - cuDNN's fused SDPA (attention_cudnn.cpp), through the header-only cudnn-frontend: the sequences are cuDNN's
//    ragged ("THD") layout, q, k and v read in place from the packed (N, 3H) qkv through ragged offsets and a row
//    stride of 3H, masked per sequence by its length (padding mask). cuDNN draws its own dropout masks from a
//    (seed, offset) pair, so its masks are not ops.h's Philox masks (the conformance test compares it with dropout
//    off, checks the rate and scale of its masks, and compares its forward and backward with dropout with an fp64
//    reference on the masks read back from a forward over one-hot values: AttentionBackwardWithDropout). Used for head_dim 64 (any multiple of 8 up to 128) wherever
//    the installed cuDNN builds the graph (ragged layouts need Hopper, or cuDNN 9.18.1 and later on Ampere), takes
//    zero-length sequences (9.25 and later), and its graphs' workspace fits the backend's cap (attention_choice.h).
//    The forward is pinned to the frontend's COMPOSITE node family, the one that takes dropout, so a shape without
//    dropout (the conformance test, the eval) runs the family training runs; UNIFIED is a retry for a shape without
//    dropout that COMPOSITE refuses (attention_choice.h: build_first_family).
//  - Our kernel (attention.cu): exact softmax in two passes over the keys, one warp per query (forward, dq) or key
//    (dk, dv) row, ops.h's Philox masks. It covers what cuDNN refuses (other head sizes, older cuDNN on Ampere);
//    it is written for being right, not fast.
// Both save the per-row log-sum-exp of the scaled scores, padded to (sequences, heads, max_seqlen), in `saved`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "backends/cuda/attention.h"
#include "backends/cuda/attention_choice.h"
#include "backends/cuda/cuda_context.h"
#include "backends/cuda/scratch.h"
#include "backends/ops.h"

namespace bertperf::cuda {

// The saved buffer: per-row statistics, then the index tensors the forward writes for itself and its backward.
struct AttentionSaved {
  size_t stats;        // f32 (sequences, heads, max_seqlen): log-sum-exp of row i of (sequence, head)
  size_t seq_len;      // i32 (sequences)
  size_t ragged_qkv;   // i32 (sequences + 1): cu_seqlens * 3H, element offsets of each sequence in qkv
  size_t ragged_ctx;   // i32 (sequences + 1): cu_seqlens * H, in ctx
  size_t rng;          // i64 (2): cuDNN's dropout seed and offset for this call
  size_t bytes;
  AttentionSaved(int sequences, int max_seqlen, int heads);
};

// Writes seq_len, the ragged offsets and cuDNN's (seed, offset) for this call into `saved` (attention.cu).
void attention_prepare(CudaContext& ctx, const ops::AttentionForward& p, const AttentionSaved& layout);
// Rows [cu_seqlens[sequences], N) of x (N, cols) bf16 set to 0: the filler tokens (attention.cu).
void attention_zero_filler(CudaContext& ctx, void* x, const int32_t* cu_seqlens, int sequences, int N, int cols);

// cuDNN's fused SDPA state of one backend (attention_cudnn.cpp): the forward and backward graphs of each shape, built
// on the backend's cuDNN handle (never inside a capture) and kept until the backend goes, and the one device
// workspace they share. A shape's forward is built at its first call, with its backward where it has dropout (the
// two must agree on the masks); a shape without dropout builds its backward at its first backward, so a shape only
// evaluated builds and reserves none.
class CudnnAttention {
 public:
  explicit CudnnAttention(const CudaContext& ctx);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Builds the shape's forward graph, and its backward where it has dropout (once; later calls return the first
  // answer), and asks them for their workspace.
  CudnnBuild build(CudaContext& ctx, const AttentionShape& s);
  // Builds the backward graph of a shape whose forward is built (once; for a shape with dropout, build's answer).
  CudnnBuild build_backward(CudaContext& ctx, const AttentionShape& s);
  // Grows the shared workspace to at least `bytes` (InputError when the device memory is not there).
  void reserve(size_t bytes);
  // Run a built shape (after reserve): a shape that is not built, or an error while running, throws.
  void forward(CudaContext& ctx, const ops::AttentionForward& p, const AttentionSaved& layout);
  void backward(CudaContext& ctx, const ops::AttentionBackward& p, const AttentionSaved& layout);

 private:
  struct Graphs;
  const Graphs& built(const AttentionShape& s, bool backward) const;
  std::map<AttentionShape, std::unique_ptr<Graphs>> graphs_;
  DeviceScratch workspace_;
};

// Our kernels (attention.cu).
void kernel_attention_forward(CudaContext& ctx, const ops::AttentionForward& p, const AttentionSaved& layout);
void kernel_attention_backward(CudaContext& ctx, const ops::AttentionBackward& p, const AttentionSaved& layout);

}  // namespace bertperf::cuda
