// What every CUDA op is handed: the stream it runs on, the library handles and whether a graph capture is under way,
// all owned by the CudaBackend (cuda_backend.h); plus the checks of cuBLAS(Lt) and cuDNN calls beside the GPU
// runtime's CUDA_CHECK (gpu/vendor.h).
#pragma once

#include <cstddef>
#include <string>

#include <cublasLt.h>
#include <cudnn.h>

#include "backends/scratch_buffer.h"
#include "core/errors.h"
#include "gpu/vendor.h"

namespace bertperf::cuda {

struct CudaContext {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  cudnnHandle_t cudnn = nullptr;
  CaptureState capture;        // set by capture_graph (graph_capture.h); read by every working buffer (scratch.h)
  int device = 0;
  int sm = 0;                  // compute capability as 10 * major + minor: 80 (A100), 90 (H100/H200)
};

}  // namespace bertperf::cuda

// A failed call throws InternalError "<expr>: <library>: <message>" with file:line (core/errors.h), as CUDA_CHECK.
#define CUBLAS_CHECK(call)                                                                           \
  do {                                                                                               \
    cublasStatus_t bert_cublas_status_ = (call);                                                     \
    BERT_CHECK_GEN(call, bert_cublas_status_ == CUBLAS_STATUS_SUCCESS,                               \
                   ::bertperf::cat("cuBLAS: ", cublasLtGetStatusName(bert_cublas_status_), ": ",     \
                                   cublasLtGetStatusString(bert_cublas_status_)));                   \
  } while (0)

#define CUDNN_CHECK(call)                                                                            \
  do {                                                                                               \
    cudnnStatus_t bert_cudnn_status_ = (call);                                                       \
    BERT_CHECK_GEN(call, bert_cudnn_status_ == CUDNN_STATUS_SUCCESS,                                 \
                   ::bertperf::cat("cuDNN: ", cudnnGetErrorString(bert_cudnn_status_)));             \
  } while (0)
