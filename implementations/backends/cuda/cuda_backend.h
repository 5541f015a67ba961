// The CUDA backend (backend.h): bf16 activations and weight copy, fp32 master weights, gradients and moments,
// cuBLASLt GEMMs and this directory's kernels, all on one stream of one device. Plain C++ (no CUDA headers), so
// the backend registry can include it.
#pragma once

#include <cstddef>
#include <memory>

#include "backends/backend.h"
#include "backends/cuda/cuda_options.h"

namespace bertperf {

// options.device -1 takes device local_rank modulo the device count. InputError when there is no such device.
std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options, int local_rank);
// CUDA devices visible here; 0 when there is no driver or no device (never throws).
int cuda_device_count();

}  // namespace bertperf
