// The CPU backend (backend.h) over the cpu::op<T> kernels of cpu_ops.h: fp32 is the backend proper (OpenBLAS and
// OpenMP, `threads` of them), fp64 the oracle the conformance test and the finite-difference checks compare with.
// Device memory is host memory; copies are memcpy; ops run synchronously.
#pragma once

#include <memory>

#include "backends/backend.h"

namespace bertperf {

std::unique_ptr<Backend> make_cpu_backend(DType dtype, int threads);

}  // namespace bertperf
