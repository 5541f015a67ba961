// The GPU runtime, below the GPU backend (backends/cuda) and the NCCL transport (comm/nccl_transport.cpp): device
// count and selection, streams and events, the one copy each. This header names no vendor type, so code that only
// orders work (the transport) builds without the vendor's headers; vendor.h is the one header that includes the
// vendor's runtime, with the check macros and the handles' native types. Built where the CUDA toolkit is found.
#pragma once

#include "backends/device.h"

namespace bertperf::gpu {

// Devices visible here; 0 when there is no driver or no device (never throws).
int device_count();
// Makes `device` the calling thread's current device.
void set_device(int device);
int current_device();

class Event;

// A stream of its own on the current device, not ordered with the default stream.
class Stream {
 public:
  Stream();
  ~Stream();  // waits for what was issued on it (no throw)
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Work issued on the stream from now on waits for `event`.
  void wait(Event& event);
  // Records `event` after everything issued so far on the stream.
  void record(Event& event);
  // Waits on the host for everything issued so far.
  void synchronize();
  void* handle() const { return handle_; }  // the vendor's stream (vendor.h: native)

 private:
  void* handle_ = nullptr;
};

// A point in a stream (device.h's Event as a GPU backend hands it out), made on the current device without timing
// (the cheapest kind, and the only kind a graph may record). A library that orders its own stream with a backend's
// work (the NCCL transport) asks the backend's events for this type.
class Event final : public bertperf::Event {
 public:
  Event();
  ~Event() override;
  int device() const { return device_; }     // the device it was made on
  void* handle() const { return handle_; }  // the vendor's event (vendor.h: native)

 private:
  void* handle_ = nullptr;
  int device_ = 0;
};

}  // namespace bertperf::gpu
