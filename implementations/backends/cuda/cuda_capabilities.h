// What the CUDA backend declares, from its options and the device's compute capability alone: the attention it runs
// and its Capabilities (device.h). Plain C++, so that a CPU test checks the table (tests/cpp/test_cuda_capabilities.cpp)
// and the conformance test, which lets exactly the declared ops differ between two runs, holds the GPU to it.
#pragma once

#include "backends/cuda/cuda_options.h"
#include "backends/device.h"

namespace bertperf::cuda {

// Whether cuDNN's fused attention backward gives the same bits on every run on compute capability `sm`: its
// deterministic dq reduction exists for ragged layouts on Hopper only (Ampere's ragged backward sums dq in a
// varying order, and Blackwell refuses determinism with dropout). Our kernel is deterministic everywhere.
inline bool cudnn_attention_deterministic(int sm) { return sm == 90; }

struct CudaDeclared {
  AttentionImpl attention;  // the "attention" option, or KERNEL where "deterministic" rules cuDNN out
  Capabilities capabilities;
};

// `sm`: 10 * major + minor (80: A100, 90: H100/H200).
inline CudaDeclared cuda_declared(const CudaOptions& options, int sm) {
  CudaDeclared d;
  d.attention = options.deterministic && !cudnn_attention_deterministic(sm) ? AttentionImpl::KERNEL : options.attention;
  Capabilities& c = d.capabilities;
  c.static_shapes = true;
  c.asynchronous = true;
  c.capture = true;
  c.host_functions = true;  // cudaLaunchHostFunc
  c.host_memory = false;
  c.collectives = Collectives::NCCL;
  // cuDNN's fused attention draws its own dropout masks, and its backward is deterministic only where
  // cudnn_attention_deterministic says; the kernel is deterministic everywhere and draws ops.h's masks. AUTO may run
  // a shape on either, so it declares what cuDNN's would need.
  if (d.attention != AttentionImpl::KERNEL) {
    c.own_dropout_masks.add(ops::Op::ATTENTION_FORWARD).add(ops::Op::ATTENTION_BACKWARD);
    if (!cudnn_attention_deterministic(sm)) c.nondeterministic.add(ops::Op::ATTENTION_BACKWARD);
  }
  return d;
}

}  // namespace bertperf::cuda
