// The backend registry (registry.h): the entries each backend folder registers, in the order help texts list them.
#include "registry/registry.h"

#include "backends/cpu/cpu_entry.h"
#include "backends/cuda/cuda_entry.h"
#include "core/errors.h"

namespace bertperf {

namespace {

std::vector<BackendEntry>& entries() {
  static std::vector<BackendEntry> all = [] {
    std::vector<BackendEntry> e = cpu_entries();
    e.push_back(cuda_entry());
    return e;
  }();
  return all;
}

const BackendEntry& entry(const std::string& name, const std::string& where) {
  for (const BackendEntry& e : entries())
    if (e.info.name == name) return e;
  std::string known;
  for (const BackendEntry& e : entries()) known += (known.empty() ? "" : ", ") + e.info.name;
  throw_input(where, cat("unknown backend '", name, "' (", known, ")"));
}

// The backend's maker for `spec`, its options checked.
std::function<std::unique_ptr<Backend>(const Placement&)> read_options(const BackendSpec& spec) {
  JsonFields fields(spec.options, spec.where);
  auto make = entry(spec.name, spec.where).read(fields);
  fields.reject_unknown();
  return make;
}

}  // namespace

void register_backend(BackendEntry entry) {
  for (const BackendEntry& e : entries())
    BERT_CHECK(e.info.name != entry.info.name, "a second backend called '", entry.info.name, "'");
  entries().push_back(std::move(entry));
}

BackendSpec parse_backend_spec(const Json& block, const std::string& where) {
  JsonFields f(block, where);
  BackendSpec spec;
  spec.name = f.required<std::string>("name");
  spec.capture = f.optional<bool>("capture", true);
  spec.record_slots = f.optional<int>("record_slots", 16);
  if (spec.record_slots < 1 || spec.record_slots > 4096)
    throw_input(where, cat("field 'record_slots' must be 1 to 4096, got ", spec.record_slots));
  spec.where = where;
  for (auto it = block.begin(); it != block.end(); ++it)
    if (it.key() != "name" && it.key() != "capture" && it.key() != "record_slots") spec.options[it.key()] = it.value();
  read_options(spec);
  return spec;
}

Json backend_block(const BackendSpec& spec) {
  Json block = spec.options;
  block["name"] = spec.name;
  block["capture"] = spec.capture;
  block["record_slots"] = spec.record_slots;
  return block;
}

void set_backend_options(Json& block, const std::vector<std::string>& key_values, const std::string& where) {
  for (const std::string& kv : key_values) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      throw_input(where, cat("a backend option is KEY=VALUE, got '", kv, "'"));
    const std::string value = kv.substr(eq + 1);
    block[kv.substr(0, eq)] = Json::accept(value) ? Json::parse(value) : Json(value);
  }
}

BackendSpec backend_spec(const std::string& name, const std::vector<std::string>& key_values,
                         const std::string& where) {
  Json block = {{"name", name}};
  set_backend_options(block, key_values, where);
  return parse_backend_spec(block, where);
}

const std::vector<BackendInfo>& backend_infos() {
  static std::vector<BackendInfo> infos;
  if (infos.size() != entries().size()) {  // once, and again after a registration
    infos.clear();
    for (const BackendEntry& e : entries()) infos.push_back(e.info);
  }
  return infos;
}

const BackendInfo& backend_info(const std::string& name, const std::string& where) {
  return entry(name, where).info;
}

std::unique_ptr<Backend> make_backend(const BackendSpec& spec, const Placement& placement) {
  return read_options(spec)(placement);
}

std::vector<std::string> available_backends() {
  std::vector<std::string> names;
  for (const BackendEntry& e : entries())
    if (e.info.built && !e.info.oracle && e.runnable()) names.push_back(e.info.name);
  return names;
}

std::string off_table(const BackendSpec& spec, const CaseShape& shape) {
  const BackendEntry& e = entry(spec.name, spec.where);
  return e.off_table ? e.off_table(spec.options, shape) : "";
}

}  // namespace bertperf
