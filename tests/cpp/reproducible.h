// The step tests' determinism rule (test_gpu_step.cpp), shared with the CPU test of it over the CUDA backend's
// declarations (test_cuda_capabilities.cpp).
#pragma once

#include <string>
#include <vector>

#include "backends/device.h"

namespace bertperf::testing {

// The options under which a backend that declares `caps` is to give the same bits on every run: none where it
// declares every op deterministic; its "deterministic" option where it declares some op not.
inline std::vector<std::string> reproducible_options(const Capabilities& caps) {
  if (caps.nondeterministic.empty()) return {};
  return {"deterministic=true"};
}

}  // namespace bertperf::testing
