// The GPU vendor's runtime, the one header outside the GPU backend that includes it (the layer rules,
// implementations/layers.json, keep it so): the check macros and the native types of runtime.h's handles.
#pragma once

#include <cuda_runtime.h>

#include "core/errors.h"
#include "gpu/runtime.h"

// A failed call throws InternalError "<expr>: CUDA: <name>: <message>" with file:line (core/errors.h).
#define CUDA_CHECK(call)                                                                             \
  do {                                                                                               \
    cudaError_t bert_cuda_status_ = (call);                                                          \
    BERT_CHECK_GEN(call, bert_cuda_status_ == cudaSuccess,                                           \
                   ::bertperf::cat("CUDA: ", cudaGetErrorName(bert_cuda_status_), ": ",              \
                                   cudaGetErrorString(bert_cuda_status_)));                          \
  } while (0)

// After a kernel launch: a bad configuration shows here, at the launch's line.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

namespace bertperf::gpu {

inline cudaStream_t native(const Stream& stream) { return static_cast<cudaStream_t>(stream.handle()); }
inline cudaEvent_t native(const Event& event) { return static_cast<cudaEvent_t>(event.handle()); }
// A backend's event as the runtime's (InternalError when it is another backend's).
inline cudaEvent_t native(bertperf::Event& event) {
  auto* e = dynamic_cast<Event*>(&event);
  BERT_CHECK(e != nullptr, "an event of another backend handed to the GPU runtime");
  return native(*e);
}

}  // namespace bertperf::gpu
