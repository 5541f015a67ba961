// The backends this project knows, by name: what a config's "backend" block may say, what the harness may know of a
// backend without building one (its dtypes, where its memory lives), and building one. Each backend folder registers
// its own (backends/backend_entry.h); this is the one list of them, above the backends. No code above it compares
// backend names; it asks here.
//
// A "backend" block is { "name": str, "capture": bool (optional, default true: replay the training step as one
// captured graph where the backend can), "record_slots": int (optional, 1 to 4096, default 16: the ring of step
// records the host reads, harness/train_step.h), ...the backend's own options }. Each backend reads its own options
// strictly (core/json_fields.h): an unknown or ill-typed field is one line naming the config and the field. The
// command line's --backend NAME and --backend-option KEY=VALUE make the same block.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/backend_entry.h"
#include "core/json_fields.h"

namespace bertperf {

struct BackendSpec {
  std::string name = "cpu";
  bool capture = true;
  int record_slots = 16;
  Json options = Json::object();  // the block's other fields, checked by the backend's own options reader
  std::string where = "backend";  // where the block came from, for messages
};

// A block read and checked: InputError for an unknown backend or a bad option.
BackendSpec parse_backend_spec(const Json& block, const std::string& where);
// The block the command line's --backend NAME and --backend-option KEY=VALUE make (VALUE read as JSON where it is
// JSON, else as a string), checked the same way.
BackendSpec backend_spec(const std::string& name, const std::vector<std::string>& key_values = {},
                         const std::string& where = "command line");
// The block a spec was read from (name, capture, record_slots and the backend's options), for a caller that changes
// it before it is read again; and KEY=VALUE options set over a block as backend_spec reads them.
Json backend_block(const BackendSpec& spec);
void set_backend_options(Json& block, const std::vector<std::string>& key_values, const std::string& where);

// Every backend the project has, built here or not, in the order help texts list them.
const std::vector<BackendInfo>& backend_infos();
// InputError naming `where` and the known names when there is none called `name`.
const BackendInfo& backend_info(const std::string& name, const std::string& where);

// InputError when the backend is not built or its device is not there.
std::unique_ptr<Backend> make_backend(const BackendSpec& spec, const Placement& placement = {});
// Every backend this build can run here ("cpu" always; a device backend where its device is present), for the
// conformance test.
std::vector<std::string> available_backends();
// Why the backend of `spec`, with its options, rounds off ops.h's rounding table in a conformance case of `shape`
// (BackendEntry::off_table), or "".
std::string off_table(const BackendSpec& spec, const CaseShape& shape);

// Adds a backend from outside implementations/ (a test's), after the project's own; before the first lookup.
void register_backend(BackendEntry entry);

}  // namespace bertperf
