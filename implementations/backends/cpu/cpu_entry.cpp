// The CPU backends' registration (cpu_entry.h).
#include "backends/cpu/cpu_entry.h"

#include "backends/cpu/cpu_async.h"
#include "backends/cpu/cpu_async_options.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_bf16_options.h"
#include "backends/cpu/cpu_options.h"

namespace bertperf {

std::vector<BackendEntry> cpu_entries() {
  auto cpu = [](DType type) {
    return [type](JsonFields& f) {
      const CpuOptions o = CpuOptions::read(f);
      return [type, o](const Placement&) -> std::unique_ptr<Backend> {
        return make_cpu_backend(type, o.threads, o.static_shapes);
      };
    };
  };
  std::vector<BackendEntry> e;
  e.push_back({{"cpu", "fp32 on the CPU (OpenBLAS, OpenMP)", DType::F32, DType::F32, DType::F32, true, true},
               cpu(DType::F32)});
  e.push_back({{"cpu-f64", "fp64 on the CPU: the oracle the other backends are tested against", DType::F64, DType::F64,
                DType::F64, true, true, true},
               cpu(DType::F64)});
  e.push_back({{"cpu-bf16", "bf16 on the CPU, the CUDA backend's numerics (oneDNN on AVX512-BF16, else emulated)",
                DType::BF16, DType::BF16, DType::F32, true, true},
               [](JsonFields& f) {
                 const CpuBf16Options o = CpuBf16Options::read(f);
                 return [o](const Placement&) -> std::unique_ptr<Backend> { return make_cpu_bf16_backend(o); };
               }});
  e.back().info.test_variants = {{"precision=fp8"}};  // the FP8 twin (Fp8Linear; every other op as cpu-bf16)
  e.push_back({{"cpu-async", "the cpu backend's work (with \"bf16\": cpu-bf16's) queued on a thread, with a GPU's asynchrony",
                DType::F32, DType::F32, DType::F32, true, true},
               [](JsonFields& f) {
                 const CpuAsyncOptions o = CpuAsyncOptions::read(f);
                 return [o](const Placement&) -> std::unique_ptr<Backend> { return make_cpu_async_backend(o); };
               }});
  // Once more over cpu-bf16: an asynchronous backend with bf16 memory, as the CUDA backend, on the CPU; its random
  // delays make a read of a download that does not wait for it show.
  e.back().info.test_variants = {{"bf16=true", "delay_us=50"}};
  return e;
}

}  // namespace bertperf
