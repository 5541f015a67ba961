// What a backend folder registers (each exports one function returning its entries: cpu/cpu_entry.h,
// cuda/cuda_entry.h): what is known of a backend without building one, how it reads its options and how it is built,
// and what the conformance test must know of it. The registry (registry/registry.h) lists the entries; nothing else
// names a backend.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/json_fields.h"

namespace bertperf {

// Where a backend runs in a job, as the launcher placed this process (comm/context.h reads it once); no backend
// reads the environment.
struct Placement {
  int local_rank = 0;  // among the ranks of this node (a GPU backend's default device)
};

// What is known of a backend without building one.
struct BackendInfo {
  std::string name;
  std::string summary;       // one line
  DType act, weight, master; // ops.h's A, W and F
  bool host_memory;          // its DEVICE memory is host memory (Capabilities::host_memory)
  bool built;                // this build has it
  bool oracle = false;       // the reference the others are checked against (not in available_backends())
  // The ctest label of its tests: "cpu", or "gpu" where they need a GPU (the conformance test files them under it).
  std::string test_label = "cpu";
  // Option sets the conformance test checks it with besides its defaults, each KEY=VALUE pairs.
  std::vector<std::vector<std::string>> test_variants = {};
};

// A conformance case (tests/cpp/test_backend_ops.cpp) as a backend's exceptions see it: the op, and the facts of its
// shape that decide how a library may run it.
struct CaseShape {
  ops::Op op;
  ops::Activation act = ops::Activation::NONE;  // a linear's activation (forward) or its input's (backward's dinp_act)
  int groups = 1;
  int ld = 0;  // the leading dimension an activation is applied at (the forward's ldo, the backward's I)
};

struct BackendEntry {
  BackendInfo info;
  // Checks the options (the block's fields but "name" and "capture") and returns the backend's maker for them.
  std::function<std::function<std::unique_ptr<Backend>(const Placement&)>(JsonFields& fields)> read;
  std::function<bool()> runnable = [] { return true; };  // built, and its device is here
  // Why the backend with these options rounds off ops.h's rounding table in a case ("" where it keeps to it, so the
  // conformance test holds it closer to its host twin than to the oracle); none: it always keeps to it.
  std::function<std::string(const Json& options, const CaseShape& shape)> off_table = {};
};

}  // namespace bertperf
