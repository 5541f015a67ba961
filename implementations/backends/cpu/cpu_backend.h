// The CPU backend (backend.h) over the cpu::op<T> kernels of cpu_ops.h: fp32 is the backend proper (OpenBLAS and
// OpenMP, `threads` of them), fp64 the oracle the conformance test and the finite-difference checks compare with,
// and bf16 ("cpu-bf16") the CUDA backend's numerics on the CPU (bf16 activations and weight copy, fp32 master
// weights; its GEMMs through oneDNN where the CPU has AVX512-BF16, emulated bit for bit elsewhere: gemm_bf16.h).
// Device memory is host memory; copies are memcpy; ops run synchronously. cpu-async (cpu_async.h) queues the fp32
// backend's work on a thread of its own.
//
// `threads` > 0 sets the OpenMP and OpenBLAS thread counts of the process (one pool for the whole program, so a
// second CPU backend with a different count changes the first's); 0 keeps the current setting (OMP_NUM_THREADS,
// or every core). `static_shapes` declares Capabilities::static_shapes: batches run at their full capacity, which
// changes the rounding of the products over tokens and predictions (BLAS rounds a row by the kernel its tile falls
// in), not the results' meaning. make_cpu_backend(BF16, ...) is cpu-bf16 with its default GEMM options
// (cpu_bf16_options.h).
#pragma once

#include <memory>
#include <span>

#include "backends/backend.h"
#include "backends/cpu/cpu_bf16_options.h"

namespace bertperf {

// A CPU backend whose ops that need working memory beyond their arguments (per-row and per-chunk partial sums,
// cpu::scratch_doubles(p) of them) also take it from the caller. The plain op methods use the backend's own buffer;
// cpu-async hands in memory it resolved when the op was issued, as a GPU graph keeps the addresses it was recorded
// with.
class CpuOpsBackend : public Backend {
 public:
  using Backend::cross_entropy_forward;
  using Backend::gradient_clip;
  using Backend::lamb_moments;
  virtual void cross_entropy_forward(const ops::CrossEntropyForward& p, std::span<double> scratch) = 0;
  virtual void gradient_clip(const ops::GradientClip& p, std::span<double> scratch) = 0;
  virtual void lamb_moments(const ops::LambMoments& p, std::span<double> scratch) = 0;
  // The OpenMP threads its ops run on (what `threads` resolved to).
  virtual int threads() const = 0;
};

std::unique_ptr<CpuOpsBackend> make_cpu_backend(DType dtype, int threads, bool static_shapes = false);
// InputError where the options cannot be had here ("gemm": "onednn" without oneDNN or AVX512-BF16; an "isa" other
// than the one oneDNN already runs at in this process).
std::unique_ptr<CpuOpsBackend> make_cpu_bf16_backend(const CpuBf16Options& options);

}  // namespace bertperf
