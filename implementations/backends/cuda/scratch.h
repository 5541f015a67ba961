// Device working memory an op needs beyond its arguments (per-row and per-chunk partial sums, sort buffers, library
// workspaces), owned by the CudaBackend and grown only when a larger call comes, by backends/scratch_buffer.h's rule: the
// first step of a run sizes every buffer, a buffer never grows inside a capture, and one outgrown after a capture is
// kept for the graphs that point at it.
#pragma once

#include <cstddef>

#include "backends/cuda/cuda_context.h"
#include "backends/scratch_buffer.h"

namespace bertperf::cuda {

// Device memory from cudaMalloc (256-byte aligned) on the context's device; released after the context's stream
// has finished the work issued before.
struct DeviceAllocator {
  const CudaContext* ctx;
  void* allocate(size_t bytes) const {
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, bytes);
    if (status != cudaSuccess) {
      cudaGetLastError();
      throw_input("cuda backend", cat("cannot allocate ", bytes, " bytes of device memory for an op's working buffer (",
                                      cudaGetErrorString(status), ")"));
    }
    return p;
  }
  void release(void* p) const noexcept {
    cudaStreamSynchronize(ctx->stream);
    cudaFree(p);
  }
};

using DeviceScratch = ScratchBuffer<DeviceAllocator>;

// The scratch buffers of the ops; each op family uses its own so that buffers of one call never alias another's
// still in use on the stream.
struct OpScratch {
  explicit OpScratch(const CudaContext& ctx)
      : reduce({&ctx}, ctx.capture, "CUDA backend's reduce"), sort({&ctx}, ctx.capture, "CUDA backend's sort"),
        optimizer({&ctx}, ctx.capture, "CUDA backend's optimizer"),
        bias_grad({&ctx}, ctx.capture, "CUDA backend's bias-gradient"),
        fp8({&ctx}, ctx.capture, "CUDA backend's FP8 operand") {}
  DeviceScratch reduce;      // column and row partial sums (bias, LayerNorm parameter gradients, loss statistics)
  DeviceScratch sort;        // the scatter-add's sorted indices and CUB temporary storage
  DeviceScratch optimizer;   // per-chunk partial sums and the completion counter
  DeviceScratch bias_grad;   // the activation-backward's bias-gradient staging
  DeviceScratch fp8;         // an FP8 linear op's quantized copies of its operands (linear.h Fp8Operands)
};

}  // namespace bertperf::cuda
