// Loading and validating MLPerf system descriptions (system_description.h).
#include "harness/system_description.h"

#include <charconv>
#include <filesystem>

namespace bertperf {

namespace fs = std::filesystem;

const std::vector<std::string>& system_description_fields() {
  static const std::vector<std::string> fields = {
      "submitter", "division", "status", "system_name", "number_of_nodes", "host_processors_per_node",
      "host_processor_model_name", "host_processor_core_count", "host_processor_vcpu_count",
      "host_processor_frequency", "host_processor_caches", "host_processor_interconnect",
      "host_memory_capacity", "host_storage_type", "host_storage_capacity", "host_networking",
      "host_networking_topology", "host_memory_configuration", "accelerators_per_node",
      "accelerator_model_name", "accelerator_host_interconnect", "accelerator_frequency",
      "accelerator_on-chip_memories", "accelerator_memory_configuration", "accelerator_memory_capacity",
      "accelerator_interconnect", "accelerator_interconnect_topology", "cooling", "hw_notes", "framework",
      "other_software_stack", "operating_system", "sw_notes"};
  return fields;
}

namespace {

// Optional fields from the submission rules' table that the checker does not require.
const char* const kOptionalFields[] = {"system_type", "system_type_detail", "host_network_card_count"};

int count_field(const std::string& path, const std::string& key, const std::string& text) {
  int value = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0)
    throw_input(path, cat("field '", key, "' must be a whole number written as a string, e.g. \"8\", got \"", text, "\""));
  return value;
}

}  // namespace

std::string SystemDescription::log_status() const {
  if (status == "Available on-premise" || status == "onprem") return "onprem";
  if (status == "Available cloud" || status == "cloud") return "cloud";
  if (status == "Research, Development, or Internal (RDI)" || status == "research") return "research";
  return "preview";  // "Preview" / "preview": the loader admits nothing else
}

SystemDescription load_system_description(const std::string& path) {
  SystemDescription s;
  s.path = path;
  s.raw = read_json_file(path);
  JsonFields f(s.raw, path);
  for (const auto& key : system_description_fields()) {
    if (key == "other_software_stack") {
      const Json& v = f.raw(key);
      if (!v.is_string() && !v.is_object())
        throw_input(path, "field 'other_software_stack' must be a string or an object, got " + json_excerpt(v));
      continue;
    }
    f.required<std::string>(key);
  }
  for (const char* key : kOptionalFields) f.optional<std::string>(key, "");
  f.reject_unknown();

  s.submitter = s.raw["submitter"].get<std::string>();
  s.division = s.raw["division"].get<std::string>();
  s.status = s.raw["status"].get<std::string>();
  s.system_name = s.raw["system_name"].get<std::string>();
  if (s.submitter.empty()) throw_input(path, "field 'submitter' must not be empty (it is logged as submission_org)");
  if (s.system_name.empty())
    throw_input(path, "field 'system_name' must not be empty (it is logged as submission_platform)");
  if (s.division != "closed" && s.division != "open")
    throw_input(path, "field 'division' must be \"closed\" or \"open\", got \"" + s.division + "\"");
  static const char* const statuses[] = {"Available on-premise", "Available cloud",
                                         "Research, Development, or Internal (RDI)", "Preview",
                                         "onprem", "cloud", "research", "preview"};
  bool known = false;
  for (const char* ok : statuses) known = known || s.status == ok;
  if (!known)
    throw_input(path, "field 'status' must be one of \"Available on-premise\", \"Available cloud\", "
                      "\"Research, Development, or Internal (RDI)\", \"Preview\", got \"" + s.status + "\"");
  s.number_of_nodes = count_field(path, "number_of_nodes", s.raw["number_of_nodes"].get<std::string>());
  s.host_processors_per_node =
      count_field(path, "host_processors_per_node", s.raw["host_processors_per_node"].get<std::string>());
  s.accelerators_per_node = count_field(path, "accelerators_per_node", s.raw["accelerators_per_node"].get<std::string>());
  if (s.number_of_nodes < 1) throw_input(path, "field 'number_of_nodes' must be at least 1");
  return s;
}

std::string find_system_file(const std::string& system, const std::string& start_dir) {
  std::error_code ec;
  fs::path dir = fs::absolute(start_dir.empty() ? "." : start_dir, ec);
  for (;;) {
    const fs::path candidate = dir / "systems" / (system + ".json");
    if (fs::is_regular_file(candidate, ec)) return candidate.lexically_normal().string();
    if (!dir.has_parent_path() || dir.parent_path() == dir) return "";
    dir = dir.parent_path();
  }
}

}  // namespace bertperf
