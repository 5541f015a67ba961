// The GPU runtime's devices, streams and events (runtime.h).
#include "gpu/runtime.h"

#include "gpu/vendor.h"

namespace bertperf::gpu {

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear it: no driver or no device is not an error here
    return 0;
  }
  return count;
}

void set_device(int device) { CUDA_CHECK(cudaSetDevice(device)); }

int current_device() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

Stream::Stream() {
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  handle_ = stream;
}

Stream::~Stream() {
  cudaStreamSynchronize(native(*this));
  cudaStreamDestroy(native(*this));
}

void Stream::wait(Event& event) { CUDA_CHECK(cudaStreamWaitEvent(native(*this), native(event), 0)); }
void Stream::record(Event& event) { CUDA_CHECK(cudaEventRecord(native(event), native(*this))); }
void Stream::synchronize() { CUDA_CHECK(cudaStreamSynchronize(native(*this))); }

Event::Event() : device_(current_device()) {
  cudaEvent_t event = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  handle_ = event;
}

Event::~Event() { cudaEventDestroy(native(*this)); }

}  // namespace bertperf::gpu
