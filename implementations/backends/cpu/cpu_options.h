// The options of the CPU backends' "backend" block (registry.h): { "threads": int (optional, 0 = all cores) }.
#pragma once

#include <string>

#include "core/json_fields.h"

namespace bertperf {

struct CpuOptions {
  int threads = 0;  // OpenMP and OpenBLAS threads of the process (0: OMP_NUM_THREADS, or every core)

  // Reads the fields it knows from `fields`; the caller rejects the rest.
  static CpuOptions read(JsonFields& fields) {
    CpuOptions o;
    o.threads = fields.optional<int>("threads", 0);
    if (o.threads < 0) throw_input(fields.where(), "field 'threads' must be 0 (all cores) or positive");
    return o;
  }
};

}  // namespace bertperf
