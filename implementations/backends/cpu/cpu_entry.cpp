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
  e.push_back({{"cpu-async", "fp32 on the CPU with a GPU's asynchrony: the cpu backend's work queued on a thread",
                DType::F32, DType::F32, DType::F32, true, true},
               [](JsonFields& f) {
                 const CpuAsyncOptions o = CpuAsyncOptions::read(f);
                 return [o](const Placement&) -> std::unique_ptr<Backend> { return make_cpu_async_backend(o); };
               }});
  return e;
}

}  // namespace bertperf
