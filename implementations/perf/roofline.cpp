#include "perf/roofline.h"

#include <algorithm>

#include "core/errors.h"

namespace bertperf::perf {

RooflineDevice roofline_device(const DeviceClass& device, const std::string& table) {
  if (device.cpu || device.peak_flops <= 0 || device.fp8_peak_flops <= 0 || device.memory_bytes_per_s <= 0)
    throw_input(table, cat("device '", device.name, "' has no peak_flops, fp8_peak_flops and memory_bytes_per_s for a "
                           "roofline (an accelerator whose data sheet gives them)"));
  return {device.name, device.peak_flops, device.fp8_peak_flops, device.memory_bytes_per_s, kLaunchSeconds};
}

OpTime op_time(double flops, double bytes, double peak_flops, const RooflineDevice& device) {
  OpTime t;
  t.compute_s = flops / peak_flops;
  t.memory_s = bytes / device.memory_bytes_per_s;
  t.time_s = std::max(t.compute_s, t.memory_s) + device.launch_s;
  return t;
}

}  // namespace bertperf::perf
