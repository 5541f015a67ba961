// Device working memory an op needs beyond its arguments (per-row and per-chunk partial sums, sort buffers), owned
// by the CudaBackend and grown only when a larger call comes. The first step of a run sizes every buffer, so a
// step captured or replayed after it allocates nothing.
#pragma once

#include <cstddef>

#include "backends/cuda/cuda_context.h"

namespace bertperf::cuda {

class DeviceScratch {
 public:
  DeviceScratch() = default;
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  ~DeviceScratch() {
    if (data_) cudaFree(data_);
  }
  // At least `bytes` of device memory, 256-byte aligned; contents undefined. Growing waits for `stream` first (the
  // old buffer may still be in use).
  void* get(size_t bytes, cudaStream_t stream) {
    if (bytes > bytes_) {
      if (data_) {
        CUDA_CHECK(cudaStreamSynchronize(stream));
        CUDA_CHECK(cudaFree(data_));
        data_ = nullptr;
        bytes_ = 0;
      }
      CUDA_CHECK(cudaMalloc(&data_, bytes));
      bytes_ = bytes;
    }
    return data_;
  }
  template <typename T>
  T* as(size_t count, cudaStream_t stream) { return static_cast<T*>(get(count * sizeof(T), stream)); }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// The scratch buffers of the ops; each op family uses its own so that buffers of one call never alias another's
// still in use on the stream.
struct OpScratch {
  DeviceScratch reduce;      // column and row partial sums (bias, LayerNorm parameter gradients, loss statistics)
  DeviceScratch sort;        // the scatter-add's sorted indices and CUB temporary storage
  DeviceScratch optimizer;   // per-chunk partial sums and the completion counter
  DeviceScratch bias_grad;   // the activation-backward's bias-gradient staging
};

}  // namespace bertperf::cuda
