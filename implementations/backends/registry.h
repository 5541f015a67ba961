// The backends this project knows, by name: what a config's "backend" block may say, what the harness may know of a
// backend without building one (its dtypes, where its memory lives), and building one. No code above backends/
// compares backend names; it asks here.
//
// A "backend" block is { "name": str, "capture": bool (optional, default true: replay the training step as one
// captured graph where the backend can), ...the backend's own options }. Each backend reads its own options
// strictly (core/json_fields.h): an unknown or ill-typed field is one line naming the config and the field. The
// command line's --backend NAME and --backend-option KEY=VALUE make the same block.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/json_fields.h"

namespace bertperf {

// Where a backend runs in a job, as the launcher placed this process (comm/context.h reads it once); no backend
// reads the environment.
struct Placement {
  int local_rank = 0;  // among the ranks of this node (the CUDA backend's default device)
};

struct BackendSpec {
  std::string name = "cpu";
  bool capture = true;
  Json options = Json::object();  // the block's other fields, checked by the backend's own options reader
  std::string where = "backend";  // where the block came from, for messages
};

// A block read and checked: InputError for an unknown backend or a bad option.
BackendSpec parse_backend_spec(const Json& block, const std::string& where);
// The block the command line's --backend NAME and --backend-option KEY=VALUE make (VALUE read as JSON where it is
// JSON, else as a string), checked the same way.
BackendSpec backend_spec(const std::string& name, const std::vector<std::string>& key_values = {},
                         const std::string& where = "command line");

// What is known of a backend without building one.
struct BackendInfo {
  std::string name;
  std::string summary;       // one line
  DType act, weight, master; // ops.h's A, W and F
  bool host_memory;          // its DEVICE memory is host memory (Capabilities::host_memory)
  bool built;                // this build has it
  bool oracle = false;       // the reference the others are checked against (not in available_backends())
};
// Every backend the project has, built here or not, in the order help texts list them.
const std::vector<BackendInfo>& backend_infos();
// InputError naming `where` and the known names when there is none called `name`.
const BackendInfo& backend_info(const std::string& name, const std::string& where);

// InputError when the backend is not built or its device is not there.
std::unique_ptr<Backend> make_backend(const BackendSpec& spec, const Placement& placement = {});
// Every backend this build can run here ("cpu" always; a device backend where its device is present), for the
// conformance test.
std::vector<std::string> available_backends();

}  // namespace bertperf
