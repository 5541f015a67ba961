// Variable-length multi-head self-attention on the GPU (ops::AttentionForward / AttentionBackward), called by
// CudaBackend through its AttentionRunner. Sizes follow Backend::attention_saved_bytes / attention_workspace_bytes.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "backends/cuda/cuda_capabilities.h"  // cudnn_attention_deterministic
#include "backends/cuda/cuda_context.h"
#include "backends/cuda/cuda_options.h"
#include "backends/ops.h"

namespace bertperf::cuda {

// What an attention op's implementation and cuDNN's graphs depend on.
struct AttentionShape {
  int N, sequences, max_seqlen, heads, head_dim;
  float drop_prob;
  auto key() const { return std::tie(N, sequences, max_seqlen, heads, head_dim, drop_prob); }
  bool operator<(const AttentionShape& o) const { return key() < o.key(); }
};

class CudnnAttention;  // attention_impl.h

// The attention of one backend, owned by its CudaBackend: for each shape, the implementation it runs on (cuDNN's
// fused SDPA or this backend's kernel, chosen at the shape's first call by attention_choice.h's rule, and for the
// backward of a shape without dropout at its first backward; a shape that could have run on cuDNN and does not is
// said once on stderr), and cuDNN's graphs with the workspace they share.
class AttentionRunner {
 public:
  // `mode`: the backend's "attention" option (AUTO decides per shape). `cudnn_workspace_cap`: the most workspace, in
  // bytes, that AUTO gives cuDNN's graphs of a shape before it runs the shape on the kernel instead.
  AttentionRunner(const CudaContext& ctx, AttentionImpl mode, size_t cudnn_workspace_cap);
  ~AttentionRunner();
  AttentionRunner(const AttentionRunner&) = delete;
  AttentionRunner& operator=(const AttentionRunner&) = delete;

  void forward(CudaContext& ctx, const ops::AttentionForward& p);
  void backward(CudaContext& ctx, const ops::AttentionBackward& p);
  // Where the shapes so far ran: "cudnn", "kernel", "cudnn and kernel", or "" before the first.
  std::string path() const;

 private:
  bool use_cudnn(CudaContext& ctx, const AttentionShape& s);
  bool backward_on_cudnn(CudaContext& ctx, const AttentionShape& s);
  AttentionImpl mode_;
  size_t cudnn_workspace_cap_;
  std::map<AttentionShape, bool> on_cudnn_, backward_on_cudnn_;
  std::unique_ptr<CudnnAttention> cudnn_;
};

// Bytes of AttentionForward::saved for up to `tokens` tokens in `sequences` sequences of at most max_seqlen.
size_t attention_saved_bytes(int tokens, int sequences, int max_seqlen, int heads);
// Bytes of AttentionBackward::workspace, shared by all layers: the kernel's per-row sums. cuDNN's graphs use the
// runner's own workspace, sized by the graphs themselves.
size_t attention_workspace_bytes(int tokens, int sequences, int max_seqlen, int heads);
// "1.32.0": the cudnn-frontend headers this backend was built with.
std::string cudnn_frontend_version();

}  // namespace bertperf::cuda
