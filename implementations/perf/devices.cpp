#include "perf/devices.h"

#include <cctype>

#include "core/errors.h"
#include "core/json_fields.h"

namespace bertperf::perf {

std::string accelerator_key(const std::string& accelerator) {
  std::string key;
  for (unsigned char c : accelerator)
    if (std::isalnum(c)) key += static_cast<char>(std::toupper(c));
  return key;
}

DeviceTable DeviceTable::load(const std::string& path) {
  const Json doc = read_json_file(path);
  JsonFields top(doc, path);
  top.raw("notes");
  const Json& list = top.raw("devices");
  top.reject_unknown();
  if (!list.is_array() || list.empty()) throw_input(path, "field 'devices' must be a non-empty array");
  DeviceTable table;
  table.path_ = path;
  for (size_t i = 0; i < list.size(); ++i) {
    JsonFields f(list[i], cat(path, ": devices[", i, "]"));
    DeviceClass d;
    d.name = f.required<std::string>("name");
    const std::string where = cat(path, ": ", d.name);
    const Json& match = f.raw("match");
    d.peak_flops = f.required<double>("peak_flops");
    d.intra_link = f.required<std::string>("intra_link");
    d.network_guess_text = f.required<std::string>("network_guess");
    d.source = f.required<std::string>("source");
    f.reject_unknown();
    if (!match.is_array() || match.empty()) throw_input(where, "'match' must be a non-empty array of token lists");
    for (const Json& alt : match) {
      if (!alt.is_array() || alt.empty()) throw_input(where, "each 'match' entry must be a non-empty list of tokens");
      std::vector<std::string> tokens;
      for (const Json& t : alt) {
        if (!t.is_string() || t.get<std::string>().empty() || accelerator_key(t.get<std::string>()) != t.get<std::string>())
          throw_input(where, cat("match tokens are upper-case letters and digits, got ", json_excerpt(t)));
        tokens.push_back(t.get<std::string>());
      }
      d.match.push_back(tokens);
    }
    if (d.peak_flops < 0) throw_input(where, "peak_flops must be >= 0 (0: not recorded)");
    find_link(d.intra_link);
    const auto guess = parse_network(d.network_guess_text);
    if (!guess || guess->ports != 1)
      throw_input(where, cat("network_guess must name one port with a rate, got '", d.network_guess_text, "'"));
    d.network_guess = *guess;
    for (const auto& seen : table.classes_)
      if (seen.name == d.name) throw_input(where, "device listed twice");
    table.classes_.push_back(d);
  }
  return table;
}

const DeviceClass* DeviceTable::match(const std::string& accelerator) const {
  const std::string key = accelerator_key(accelerator);
  for (const auto& d : classes_)
    for (const auto& alt : d.match) {
      bool all = true;
      for (const auto& token : alt) all = all && key.find(token) != std::string::npos;
      if (all) return &d;
    }
  return nullptr;
}

const DeviceClass& DeviceTable::by_name(const std::string& name) const {
  std::string known;
  for (const auto& d : classes_) {
    if (name == d.name) return d;
    known += known.empty() ? d.name : ", " + d.name;
  }
  throw_input("device", cat("unknown device '", name, "' (known: ", known, ")"));
}

}  // namespace bertperf::perf
