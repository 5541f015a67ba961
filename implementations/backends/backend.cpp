// The typed copies of backend.h, and device.h's defaults.
#include "backends/backend.h"

#include "core/errors.h"

namespace bertperf {

void Device::enqueue_host_function(HostFunction, void*) {
  throw InternalError("this backend queues no host functions (Capabilities::host_functions)");
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
    backend.synchronize();
    return;
  }
  DeviceBuffer staging(backend, n * sizeof(float));
  backend.convert(staging.data(), DType::F32, src, src_type, n);
  backend.download(dst, staging.data(), n * sizeof(float));
  backend.synchronize();
}

}  // namespace bertperf
