// What every CUDA op is handed: the stream it runs on, the library handles and whether a graph capture is under way,
// all owned by the CudaBackend (cuda_backend.h); plus the one check family for CUDA, cuBLAS(Lt) and cuDNN calls.
#pragma once

#include <cstddef>
#include <string>

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "backends/scratch_buffer.h"
#include "core/errors.h"

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

// A failed call throws InternalError "<expr>: <library>: <message>" with file:line (core/errors.h).
#define CUDA_CHECK(call)                                                                             \
  do {                                                                                               \
    cudaError_t bert_cuda_status_ = (call);                                                          \
    BERT_CHECK_GEN(call, bert_cuda_status_ == cudaSuccess,                                           \
                   ::bertperf::cat("CUDA: ", cudaGetErrorName(bert_cuda_status_), ": ",              \
                                   cudaGetErrorString(bert_cuda_status_)));                          \
  } while (0)

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

// After a kernel launch: a bad configuration shows here, at the launch's line.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
