// Capturing a run of ops on the backend's stream as a CUDA graph (Backend::capture): CudaBackend::capture returns
// capture_graph(context, issue).
#pragma once

#include <functional>
#include <memory>

#include "backends/backend.h"
#include "backends/cuda/cuda_context.h"

namespace bertperf::cuda {

// Records what `issue` launches on ctx.stream (thread-local capture mode, so another thread's CUDA calls are not
// caught in it) and instantiates it. If `issue` throws, the capture is ended and discarded and the error rethrown.
std::unique_ptr<CapturedOps> capture_graph(CudaContext& ctx, const std::function<void()>& issue);

}  // namespace bertperf::cuda
