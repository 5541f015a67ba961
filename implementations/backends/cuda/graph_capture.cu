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
  CUDA_CHECK(cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    issue();
  } catch (...) {
    cudaStreamEndCapture(ctx.stream, &graph);  // leaves the stream usable; the partial graph is dropped
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(ctx.stream, &graph));
  try {
    return std::make_unique<CudaGraphOps>(ctx.stream, graph);
  } catch (...) {
    cudaGraphDestroy(graph);
    throw;
  }
}

}  // namespace bertperf::cuda
