// The CUDA backend's registration (backends/backend_entry.h). Plain C++ and whole in this header, since a build
// without the CUDA toolkit has no bertperf_cuda but still reads and checks the options of configs for GPU machines;
// there, building one is one input error line.
#pragma once

#include "backends/backend_entry.h"
#include "backends/cuda/cuda_options.h"
#include "core/errors.h"

#ifdef BERTPERF_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace bertperf {

inline BackendEntry cuda_entry() {
#ifdef BERTPERF_HAVE_CUDA
  constexpr bool built = true;
#else
  constexpr bool built = false;
#endif
  BackendEntry e{{"cuda", "bf16 on an NVIDIA GPU (cuBLASLt, cuDNN), fp32 master weights", DType::BF16, DType::BF16,
                  DType::F32, false, built},
                 [](JsonFields& f) {
                   const CudaOptions o = CudaOptions::read(f);
                   return [o](const Placement& placement) -> std::unique_ptr<Backend> {
#ifdef BERTPERF_HAVE_CUDA
                     return make_cuda_backend(o, placement.local_rank);
#else
                     (void)placement;
                     (void)o;
                     throw_input("backend \"cuda\"", "this build has no CUDA backend (build on a machine with the CUDA "
                                                   "toolkit)");
#endif
                   };
                 }};
#ifdef BERTPERF_HAVE_CUDA
  e.runnable = [] { return cuda_device_count() > 0; };
#else
  e.runnable = [] { return false; };
#endif
  e.info.test_label = "gpu";
  // Its own attention kernel in place of cuDNN's, cuDNN's forced (the device check runs that one where the
  // installed cuDNN is older than automatic mode accepts), and the FP8 recipe (Fp8Linear against fp64 and the CPU
  // twin; refused, so skipped, below compute capability 8.9).
  e.info.test_variants = {{"attention=kernel"}, {"attention=cudnn"}, {"precision=fp8"}};
  // The GELU of ops.h's table (from the fp32 sum) is cuBLASLt's epilogue's, which runs only for one group and a
  // leading dimension a multiple of 8, with "gelu" at "epilogue"; elsewhere its own kernel applies GELU (or its
  // derivative) to the bf16-rounded pre-activation (or product). Its attention kernel keeps the probabilities and dS
  // in fp32 where the table rounds them, as cuDNN's fused kernel.
  e.off_table = [](const Json& options, const CaseShape& c) -> std::string {
    JsonFields fields(options, "cuda options");
    const CudaOptions o = CudaOptions::read(fields);
    const bool linear = c.op == ops::Op::LINEAR_FORWARD || c.op == ops::Op::LINEAR_BACKWARD;
    if (linear && c.act == ops::Activation::GELU) {
      if (o.gelu == GeluImpl::KERNEL) return "\"gelu\": \"kernel\" applies GELU to the rounded product";
      if (c.groups != 1 || c.ld % 8 != 0)
        return "cuBLASLt's GELU epilogues need one group and ld % 8 == 0; the kernel rounds first";
    }
    const bool attention = c.op == ops::Op::ATTENTION_FORWARD || c.op == ops::Op::ATTENTION_BACKWARD;
    if (attention && o.attention == AttentionImpl::KERNEL)
      return "\"attention\": \"kernel\" keeps the probabilities and dS in fp32 (the table rounds them, as cuDNN's "
             "fused kernel)";
    return "";
  };
  return e;
}

}  // namespace bertperf
