// The roofline of one training step on a device of the table (devices.h): an op takes the longer of its compute
// time (its FLOPs over the device's peak for the op's precision) and its memory time (the bytes it reads and writes
// over the device memory's bandwidth), plus a launch overhead; a step takes the sum over its ops (one stream, no
// overlap). A bound, not a forecast: no kernel reaches the peak, and launches replayed from a captured graph cost
// about the overhead assumed here. `bertperf bench-step --roofline` feeds it the FLOPs and bytes of every op of
// one step (backends/op_cost.h).
#pragma once

#include <string>

#include "perf/devices.h"

namespace bertperf::perf {

// The gap between two kernels replayed from a CUDA graph, taken as 2 us on Hopper: an assumption of the order
// NVIDIA's CUDA graph notes give, not a measurement.
inline constexpr double kLaunchSeconds = 2e-6;

struct RooflineDevice {
  std::string name;
  double bf16_flops = 0;          // dense BF16 tensor FLOP/s
  double fp8_flops = 0;           // dense FP8 tensor FLOP/s
  double memory_bytes_per_s = 0;  // device memory bandwidth
  double launch_s = kLaunchSeconds;
};

// The class's figures; an InputError naming the class and the table when it lacks one of them.
RooflineDevice roofline_device(const DeviceClass& device, const std::string& table);

struct OpTime {
  double compute_s = 0;  // flops / peak
  double memory_s = 0;   // bytes / bandwidth
  double time_s = 0;     // max of the two, plus the launch
  bool memory_bound() const { return memory_s > compute_s; }
};

// One op of `flops` and `bytes` run at `peak_flops` (the device's bf16 or FP8 peak).
OpTime op_time(double flops, double bytes, double peak_flops, const RooflineDevice& device);

}  // namespace bertperf::perf
