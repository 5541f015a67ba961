// The CPU backend (backend.h) over the cpu::op<T> kernels of cpu_ops.h: fp32 is the backend proper (OpenBLAS and
// OpenMP, `threads` of them), fp64 the oracle the conformance test and the finite-difference checks compare with,
// and bf16 ("cpu-bf16") the CUDA backend's numerics on the CPU (bf16 activations and weight copy, fp32 master
// weights; its GEMMs through oneDNN where the CPU has AVX512-BF16, emulated bit for bit elsewhere: gemm_bf16.h).
// Device memory is host memory; copies are memcpy; ops run synchronously.
//
// `threads` > 0 sets the OpenMP and OpenBLAS thread counts of the process (one pool for the whole program, so a
// second CPU backend with a different count changes the first's); 0 keeps the current setting (OMP_NUM_THREADS,
// or every core). make_cpu_backend(BF16, threads) is cpu-bf16 with its default options (cpu_bf16_options.h).
#pragma once

#include <memory>

#include "backends/backend.h"
#include "backends/cpu/cpu_bf16_options.h"

namespace bertperf {

std::unique_ptr<Backend> make_cpu_backend(DType dtype, int threads);
// InputError where the options cannot be had here ("gemm": "onednn" without oneDNN or AVX512-BF16; an "isa" other
// than the one oneDNN already runs at in this process).
std::unique_ptr<Backend> make_cpu_bf16_backend(const CpuBf16Options& options);

}  // namespace bertperf
