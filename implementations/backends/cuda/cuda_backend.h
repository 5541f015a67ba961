// The CUDA backend (backend.h): bf16 activations and weight copy, fp32 master weights, gradients and moments,
// cuBLASLt GEMMs and this directory's kernels, all on one stream of one device. Plain C++ (no CUDA headers), so
// the backend registry can include it.
#pragma once

#include <memory>

#include "backends/backend.h"

namespace bertperf {

// `device` -1 takes the local rank's device (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK or SLURM_LOCALID, modulo the
// device count; 0 without one). InputError when there is no such device.
std::unique_ptr<Backend> make_cuda_backend(int device);
// CUDA devices visible here; 0 when there is no driver or no device (never throws).
int cuda_device_count();

}  // namespace bertperf
