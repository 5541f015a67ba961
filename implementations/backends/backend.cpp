// The backend registry (registry.h) and the typed copies of backend.h.
#include "backends/registry.h"

#include "backends/cpu/cpu_async.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_bf16_options.h"
#include "backends/cpu/cpu_options.h"
#include "backends/cuda/cuda_options.h"
#include "core/errors.h"

#ifdef BERTPERF_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace bertperf {

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
    backend.synchronize();
    return;
  }
  DeviceBuffer staging(backend, n * sizeof(float));
  backend.convert(staging.data(), DType::F32, src, src_type, n);
  backend.download(dst, staging.data(), n * sizeof(float));
  backend.synchronize();
}

namespace {

// A registry entry: what is known without building the backend, how it reads its options, and how it is built.
// `read` checks the options (fields) and returns the backend's maker for them; the spec's other fields are the
// registry's.
struct Entry {
  BackendInfo info;
  std::function<std::function<std::unique_ptr<Backend>(const Placement&)>(JsonFields& fields)> read;
  std::function<bool()> runnable = [] { return true; };  // built, and its device is here
};

const std::vector<Entry>& entries() {
  static const std::vector<Entry> all = [] {
    std::vector<Entry> e;
    auto cpu = [](DType type) {
      return [type](JsonFields& f) {
        const CpuOptions o = CpuOptions::read(f);
        return [type, o](const Placement&) { return make_cpu_backend(type, o.threads, o.static_shapes); };
      };
    };
    e.push_back({{"cpu", "fp32 on the CPU (OpenBLAS, OpenMP)", DType::F32, DType::F32, DType::F32, true, true},
                 cpu(DType::F32)});
    e.push_back({{"cpu-f64", "fp64 on the CPU: the oracle the other backends are tested against", DType::F64,
                  DType::F64, DType::F64, true, true, true},
                 cpu(DType::F64)});
    e.push_back({{"cpu-bf16", "bf16 on the CPU, the CUDA backend's numerics (oneDNN on AVX512-BF16, else emulated)",
                  DType::BF16, DType::BF16, DType::F32, true, true},
                 [](JsonFields& f) {
                   const CpuBf16Options o = CpuBf16Options::read(f);
                   return [o](const Placement&) { return make_cpu_bf16_backend(o); };
                 }});
#ifdef BERTPERF_HAVE_CUDA
    constexpr bool cuda_built = true;
#else
    constexpr bool cuda_built = false;
#endif
    e.push_back({{"cuda", "bf16 on an NVIDIA GPU (cuBLASLt, cuDNN), fp32 master weights", DType::BF16, DType::BF16,
                  DType::F32, false, cuda_built},
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
                 },
                 [] {
#ifdef BERTPERF_HAVE_CUDA
                   return cuda_device_count() > 0;
#else
                   return false;
#endif
                 }});
    e.push_back({{"cpu-async", "fp32 on the CPU with a GPU's asynchrony: the cpu backend's work queued on a thread",
                  DType::F32, DType::F32, DType::F32, true, true},
                 [](JsonFields& f) {
                   const CpuAsyncOptions o = CpuAsyncOptions::read(f);
                   return [o](const Placement&) { return make_cpu_async_backend(o); };
                 }});
    return e;
  }();
  return all;
}

const Entry& entry(const std::string& name, const std::string& where) {
  for (const Entry& e : entries())
    if (e.info.name == name) return e;
  std::string known;
  for (const Entry& e : entries()) known += (known.empty() ? "" : ", ") + e.info.name;
  throw_input(where, cat("unknown backend '", name, "' (", known, ")"));
}

// The backend's maker for `spec`, its options checked.
std::function<std::unique_ptr<Backend>(const Placement&)> read_options(const BackendSpec& spec) {
  JsonFields fields(spec.options, spec.where);
  auto make = entry(spec.name, spec.where).read(fields);
  fields.reject_unknown();
  return make;
}

}  // namespace

BackendSpec parse_backend_spec(const Json& block, const std::string& where) {
  JsonFields f(block, where);
  BackendSpec spec;
  spec.name = f.required<std::string>("name");
  spec.capture = f.optional<bool>("capture", true);
  spec.where = where;
  for (auto it = block.begin(); it != block.end(); ++it)
    if (it.key() != "name" && it.key() != "capture") spec.options[it.key()] = it.value();
  read_options(spec);
  return spec;
}

BackendSpec backend_spec(const std::string& name, const std::vector<std::string>& key_values,
                         const std::string& where) {
  Json block = {{"name", name}};
  for (const std::string& kv : key_values) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      throw_input(where, cat("a backend option is KEY=VALUE, got '", kv, "'"));
    const std::string value = kv.substr(eq + 1);
    block[kv.substr(0, eq)] = Json::accept(value) ? Json::parse(value) : Json(value);
  }
  return parse_backend_spec(block, where);
}

const std::vector<BackendInfo>& backend_infos() {
  static const std::vector<BackendInfo> infos = [] {
    std::vector<BackendInfo> v;
    for (const Entry& e : entries()) v.push_back(e.info);
    return v;
  }();
  return infos;
}

const BackendInfo& backend_info(const std::string& name, const std::string& where) {
  return entry(name, where).info;
}

std::unique_ptr<Backend> make_backend(const BackendSpec& spec, const Placement& placement) {
  return read_options(spec)(placement);
}

std::vector<std::string> available_backends() {
  std::vector<std::string> names;
  for (const Entry& e : entries())
    if (e.info.built && !e.info.oracle && e.runnable()) names.push_back(e.info.name);
  return names;
}

}  // namespace bertperf
