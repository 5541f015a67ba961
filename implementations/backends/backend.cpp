// Backend-independent parts of the backend interface (backend.h): dtype facts, typed uploads, the registry.
#include "backends/backend.h"

#include "backends/cpu/cpu_backend.h"
#include "core/errors.h"

#ifdef BERTPERF_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace bertperf {

size_t dtype_size(DType type) {
  switch (type) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
  }
  return 0;
}

const char* dtype_name(DType type) {
  switch (type) {
    case DType::F32: return "fp32";
    case DType::F64: return "fp64";
    case DType::BF16: return "bf16";
  }
  return "?";
}

void upload_floats(Backend& backend, void* dst, DType dst_type, const float* src, size_t n) {
  if (dst_type == DType::F32) {
    backend.upload(dst, src, n * sizeof(float));
    backend.synchronize();  // src may go away when we return
    return;
  }
  DeviceBuffer staging(backend, n * sizeof(float));
  backend.upload(staging.data(), src, n * sizeof(float));
  backend.convert(dst, dst_type, staging.data(), DType::F32, n);
  backend.synchronize();
}

void download_floats(Backend& backend, float* dst, const void* src, DType src_type, size_t n) {
  if (src_type == DType::F32) {
    backend.download(dst, src, n * sizeof(float));
    return;
  }
  DeviceBuffer staging(backend, n * sizeof(float));
  backend.convert(staging.data(), DType::F32, src, src_type, n);
  backend.download(dst, staging.data(), n * sizeof(float));
}

std::unique_ptr<Backend> make_backend(const BackendOptions& options) {
  if (options.name == "cpu") return make_cpu_backend(DType::F32, options.threads);
  if (options.name == "cpu-f64") return make_cpu_backend(DType::F64, options.threads);
  if (options.name == "cpu-bf16") return make_cpu_backend(DType::BF16, options.threads);
  if (options.name == "cuda") {
#ifdef BERTPERF_HAVE_CUDA
    return make_cuda_backend(options.device);
#else
    throw_input("backend", "this build has no CUDA backend (configure on a machine with the CUDA toolkit)");
#endif
  }
  throw_input("backend", cat("unknown backend '", options.name, "' (cpu, cpu-f64, cpu-bf16 or cuda)"));
}

std::vector<std::string> available_backends() {
  std::vector<std::string> names = {"cpu", "cpu-bf16"};
#ifdef BERTPERF_HAVE_CUDA
  if (cuda_device_count() > 0) names.push_back("cuda");
#endif
  return names;
}

}  // namespace bertperf
