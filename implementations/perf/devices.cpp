#include "perf/devices.h"

#include <cctype>
#include <cmath>
#include <regex>

#include "core/errors.h"
#include "core/json_fields.h"

namespace bertperf::perf {

std::string accelerator_key(const std::string& accelerator) {
  std::string key;
  for (unsigned char c : accelerator)
    if (std::isalnum(c)) key += static_cast<char>(std::toupper(c));
  return key;
}

double cpu_peak_flops(const CpuNode& node, double flops_per_cycle_per_core) {
  return node.cores() * node.clock_ghz * 1e9 * flops_per_cycle_per_core;
}

double DeviceClass::scale_of(const CpuNode& node) const {
  if (!cpu) return 1.0;
  return cpu_peak_flops(node, cpu->flops_per_cycle_per_core) / cpu_peak_flops(cpu->reference, cpu->flops_per_cycle_per_core);
}

std::optional<double> stated_power_w(const std::string& accelerator) {
  static const std::regex re(R"((^|[^0-9A-Za-z])(\d{2,4})\s?W($|[^0-9A-Za-z]))");
  std::smatch m;
  if (!std::regex_search(accelerator, m, re)) return std::nullopt;
  return std::stod(m[2]);
}

double DeviceClass::power_scale(const std::string& accelerator) const {
  const auto stated = stated_power_w(accelerator);
  return stated && power_w > 0 ? std::cbrt(*stated / power_w) : 1.0;
}

namespace {

// A positive whole number, or 0 for an empty field.
int count_field(const std::string& text, const char* key, const std::string& where) {
  static const std::regex re(R"(\s*(\d{1,6})\s*)");
  std::smatch m;
  if (text.find_first_not_of(" \t") == std::string::npos) return 0;
  if (!std::regex_match(text, m, re) || std::stoi(m[1]) < 1)
    throw_input(where, cat(key, " '", text, "' is not a positive whole number"));
  return std::stoi(m[1]);
}

// The clock of a frequency text in GHz, 0 when it names none: the one labelled "(base)", else the first
// unlabelled one, else the first ("1000 MHz (min); 4000 MHz (boost)": 1 GHz).
double clock_in(const std::string& text) {
  static const std::regex clock_re(R"((\d+(\.\d+)?)\s*([GM])HZ(\s*\(\s*([A-Z]+)\s*\))?)", std::regex::icase);
  double unlabelled = 0, any = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), clock_re); it != std::sregex_iterator(); ++it) {
    const bool mhz = std::toupper(static_cast<unsigned char>((*it)[3].str()[0])) == 'M';
    const double ghz = std::stod((*it)[1]) / (mhz ? 1000 : 1);
    std::string label = (*it)[5];
    for (auto& c : label) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (label == "base") return ghz;
    if (!(*it)[4].matched && unlabelled == 0) unlabelled = ghz;
    if (any == 0) any = ghz;
  }
  return unlabelled > 0 ? unlabelled : any;
}

}  // namespace

CpuNode parse_cpu_node(const std::string& model, const std::string& sockets, const std::string& cores,
                       const std::string& frequency, const CpuNode& fallback, const std::string& where, bool* assumed) {
  CpuNode n;
  n.sockets = count_field(sockets, "host_processors_per_node", where);
  n.cores_per_socket = count_field(cores, "host_processor_core_count", where);
  n.clock_ghz = clock_in(frequency);
  if (n.clock_ghz == 0 && frequency.find_first_not_of(" \t") != std::string::npos)
    throw_input(where, cat("host_processor_frequency '", frequency, "' names no clock (e.g. \"2.00GHz\")"));
  if (n.clock_ghz == 0) n.clock_ghz = clock_in(model);
  const bool any_missing = n.sockets == 0 || n.cores_per_socket == 0 || n.clock_ghz == 0;
  if (n.sockets == 0) n.sockets = fallback.sockets;
  if (n.cores_per_socket == 0) n.cores_per_socket = fallback.cores_per_socket;
  if (n.clock_ghz == 0) n.clock_ghz = fallback.clock_ghz;
  if (assumed) *assumed = any_missing;
  return n;
}

namespace {

CpuSpec read_cpu(const Json& value, const std::string& where) {
  if (!value.is_object()) throw_input(where, "'cpu' must be an object");
  JsonFields f(value, cat(where, ": cpu"));
  CpuSpec c;
  c.isa = f.required<std::string>("isa");
  c.flops_per_cycle_per_core = f.required<double>("flops_per_cycle_per_core");
  c.reference.sockets = f.required<int>("sockets");
  c.reference.cores_per_socket = f.required<int>("cores_per_socket");
  c.reference.clock_ghz = f.required<double>("clock_ghz");
  const Json& rate = f.raw("core_samples_per_s");
  c.core_rate_source = f.required<std::string>("core_rate_source");
  f.reject_unknown();
  if (!rate.is_null() && !rate.is_number())
    throw_input(f.where(), cat("'core_samples_per_s' must be a number or null, got ", json_excerpt(rate)));
  if (rate.is_number()) c.core_samples_per_s = rate.get<double>();
  if (c.flops_per_cycle_per_core <= 0 || c.reference.sockets < 1 || c.reference.cores_per_socket < 1 ||
      c.reference.clock_ghz <= 0 || (c.core_samples_per_s && *c.core_samples_per_s <= 0))
    throw_input(f.where(), "flops_per_cycle_per_core, sockets, cores_per_socket, clock_ghz and core_samples_per_s must be > 0");
  return c;
}

}  // namespace

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
    if (f.has("cpu")) {
      d.cpu = read_cpu(f.raw("cpu"), where);
      if (f.has("peak_flops")) throw_input(where, "a CPU class's peak comes from its 'cpu' block; give no 'peak_flops'");
      d.peak_flops = cpu_peak_flops(d.cpu->reference, d.cpu->flops_per_cycle_per_core);
    } else {
      d.peak_flops = f.required<double>("peak_flops");
    }
    if (f.has("power_w") && !((d.power_w = f.required<double>("power_w")) > 0))
      throw_input(where, "power_w must be > 0 (leave it out where not recorded)");
    if (f.has("fp8_peak_flops") && !((d.fp8_peak_flops = f.required<double>("fp8_peak_flops")) > 0))
      throw_input(where, "fp8_peak_flops must be > 0 (leave it out where not recorded)");
    if (f.has("memory_bytes_per_s") && !((d.memory_bytes_per_s = f.required<double>("memory_bytes_per_s")) > 0))
      throw_input(where, "memory_bytes_per_s must be > 0 (leave it out where not recorded)");
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

namespace {

const DeviceClass* first_match(const std::vector<DeviceClass>& classes, const std::string& name, bool cpu) {
  const std::string key = accelerator_key(name);
  for (const auto& d : classes) {
    if (d.cpu.has_value() != cpu) continue;
    for (const auto& alt : d.match) {
      bool all = true;
      for (const auto& token : alt) all = all && key.find(token) != std::string::npos;
      if (all) return &d;
    }
  }
  return nullptr;
}

}  // namespace

const DeviceClass* DeviceTable::match(const std::string& accelerator) const {
  return first_match(classes_, accelerator, false);
}

const DeviceClass* DeviceTable::match_cpu(const std::string& host_processor) const {
  return first_match(classes_, host_processor, true);
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
