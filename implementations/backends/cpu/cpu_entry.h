// The CPU backends' registration (backends/backend_entry.h): cpu, cpu-f64 (the oracle), cpu-bf16 and cpu-async.
#pragma once

#include <vector>

#include "backends/backend_entry.h"

namespace bertperf {

std::vector<BackendEntry> cpu_entries();

}  // namespace bertperf
