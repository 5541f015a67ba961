// CUDA-graph capture of a run of ops (graph_capture.h).
#include "backends/cuda/graph_capture.h"

namespace bertperf::cuda {

namespace {

class CudaGraphOps final : public CapturedOps {
 public:
  CudaGraphOps(cudaStream_t stream, cudaGraph_t graph) : stream_(stream), graph_(graph) {
    CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
  }
  ~CudaGraphOps() override {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }
  void replay() override { CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaStream_t stream_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace

std::unique_ptr<CapturedOps> capture_graph(CudaContext& ctx, const std::function<void()>& issue) {
  BERT_CHECK(!ctx.capture.capturing, "a graph capture inside a graph capture");
  CUDA_CHECK(cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeThreadLocal));
  // From here on, graphs may point at the working buffers: they never grow inside a capture and are never freed
  // while the backend lives once one exists (backends/scratch_buffer.h).
  ctx.capture.capturing = true;
  ctx.capture.captured = true;
  cudaGraph_t graph = nullptr;
  try {
    issue();
  } catch (...) {
    ctx.capture.capturing = false;
    cudaStreamEndCapture(ctx.stream, &graph);  // leaves the stream usable; the partial graph is dropped
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  ctx.capture.capturing = false;
  CUDA_CHECK(cudaStreamEndCapture(ctx.stream, &graph));
  try {
    return std::make_unique<CudaGraphOps>(ctx.stream, graph);
  } catch (...) {
    cudaGraphDestroy(graph);
    throw;
  }
}

}  // namespace bertperf::cuda
