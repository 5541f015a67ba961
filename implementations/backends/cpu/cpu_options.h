// The options of the CPU backends' "backend" block (registry.h):
//   { "threads": int (optional, 0 = all cores),
//     "static_shapes": bool (optional, default false: true runs every batch at its full capacity, as the backends
//                      that capture must (Capabilities::static_shapes): the shapes, and so the rounding, of cpu-async
//                      and of a GPU, for comparisons bit for bit; the filler costs time) }
#pragma once

#include <string>

#include "core/json_fields.h"

namespace bertperf {

struct CpuOptions {
  int threads = 0;  // OpenMP and OpenBLAS threads of the process (0: OMP_NUM_THREADS, or every core)
  bool static_shapes = false;

  // Reads the fields it knows from `fields`; the caller rejects the rest.
  static CpuOptions read(JsonFields& fields) {
    CpuOptions o;
    o.threads = fields.optional<int>("threads", 0);
    if (o.threads < 0) throw_input(fields.where(), "field 'threads' must be 0 (all cores) or positive");
    o.static_shapes = fields.optional<bool>("static_shapes", false);
    return o;
  }
};

}  // namespace bertperf
