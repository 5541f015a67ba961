// The options of the cpu-async backend's "backend" block (registry.h):
//   { "threads": int (optional, 0 = all cores: the OpenMP and OpenBLAS threads its ops run on, as "cpu"'s),
//     "delay_us": int (optional, default 0 = none: before each queued piece of work the worker waits a random time
//                 of up to this many microseconds, to widen the windows in which a missing wait shows),
//     "delay_seed": int (optional, default 0: the seed of those random times),
//     "blocking_uploads": bool (optional, default false: true makes every upload wait until it has run, as one from
//                         pageable memory does: the reference that staging over asynchronous uploads is checked
//                         against),
//     "bf16": bool (optional, default false: true queues cpu-bf16's work instead of cpu's, an asynchronous backend
//             with bf16 memory, as the CUDA backend's; the conformance test runs it),
//     "host_functions": bool (optional, default true: false declares none (Capabilities::host_functions), so the MPI
//                       transport waits on the host for the backend's events instead of queuing its collectives, and
//                       a step across ranks stays eager: the reference and the test of that path) }
#pragma once

#include <cstdint>
#include <string>

#include "core/json_fields.h"

namespace bertperf {

struct CpuAsyncOptions {
  int threads = 0;
  int64_t delay_us = 0;
  uint64_t delay_seed = 0;
  bool blocking_uploads = false;
  bool bf16 = false;
  bool host_functions = true;

  // Reads the fields it knows from `fields`; the caller rejects the rest.
  static CpuAsyncOptions read(JsonFields& fields) {
    CpuAsyncOptions o;
    const std::string& where = fields.where();
    o.threads = fields.optional<int>("threads", 0);
    if (o.threads < 0) throw_input(where, "field 'threads' must be 0 (all cores) or positive");
    o.delay_us = fields.optional<int64_t>("delay_us", 0);
    if (o.delay_us < 0 || o.delay_us > 1000000)
      throw_input(where, "field 'delay_us' must be 0 (no delays) to 1000000 microseconds");
    const int64_t seed = fields.optional<int64_t>("delay_seed", 0);
    if (seed < 0) throw_input(where, "field 'delay_seed' must be 0 or positive");
    o.delay_seed = static_cast<uint64_t>(seed);
    o.blocking_uploads = fields.optional<bool>("blocking_uploads", false);
    o.bf16 = fields.optional<bool>("bf16", false);
    o.host_functions = fields.optional<bool>("host_functions", true);
    return o;
  }
};

}  // namespace bertperf
