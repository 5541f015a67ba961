// Placeholder until attention.cu lands: every entry point throws.
#include "backends/cuda/attention.h"

namespace bertperf::cuda {

void attention_forward(CudaContext&, const ops::AttentionForward&) {
  throw InternalError("CUDA attention_forward: not built yet");
}
void attention_backward(CudaContext&, const ops::AttentionBackward&) {
  throw InternalError("CUDA attention_backward: not built yet");
}
size_t attention_saved_bytes(int, int, int, int) { throw InternalError("CUDA attention_saved_bytes: not built yet"); }
size_t attention_workspace_bytes(int, int, int, int) {
  throw InternalError("CUDA attention_workspace_bytes: not built yet");
}

}  // namespace bertperf::cuda
