// The CUDA backend (backend.h): bf16 activations and weight copy, fp32 master weights, gradients and moments,
// cuBLASLt GEMMs and this directory's kernels, all on one stream of one device. Plain C++ (no CUDA headers), so
// the backend registry can include it.
#pragma once

#include <cstddef>
#include <memory>

#include "backends/backend.h"

namespace bertperf {

// The CUDA backend's own options (the "backend" config block's fields for it).
struct CudaBackendOptions {
  // -1 takes the local rank's device (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK or SLURM_LOCALID, modulo the device
  // count; 0 without one).
  int device = -1;
  // The most device memory, in bytes, that the attention gives cuDNN's fused SDPA graphs of one shape as workspace
  // when it chooses the implementation itself: a shape whose graphs ask for more runs on this backend's attention
  // kernel (correct, much slower), said once on stderr. cuDNN's deterministic backward on Hopper needs about
  // sequences x heads x pad64(max_seqlen)^2 x 2 bytes: 0.8 GB for BERT-large at 32 packed rows of 512 tokens.
  size_t attention_workspace_cap = size_t{4} << 30;
};

// InputError when there is no such device.
std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options);
std::unique_ptr<Backend> make_cuda_backend(int device);  // the defaults on that device
// CUDA devices visible here; 0 when there is no driver or no device (never throws).
int cuda_device_count();

}  // namespace bertperf
