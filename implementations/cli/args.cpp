// Strict option parsing for subcommands (args.h).
#include "cli/args.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace bertperf::cli {

Options::Options(const Args& args, const std::set<std::string>& valued, const std::set<std::string>& flags) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0 || a == "--") {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    const auto eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (flags.count(name) && !inline_value) {
      flags_.insert(name);
    } else if (valued.count(name)) {
      if (values_.count(name)) throw_input("command line", "option --" + name + " given twice");
      if (!inline_value) {
        if (i + 1 >= args.size()) throw_input("command line", "option --" + name + " needs a value");
        value = args[++i];
      }
      values_[name] = value;
    } else {
      throw_input("command line", "unknown option --" + name);
    }
  }
}

std::optional<std::string> Options::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Options::required(const std::string& name) const {
  auto v = get(name);
  if (!v) throw_input("command line", "missing required option --" + name);
  return *v;
}

int64_t Options::integer(const std::string& name, int64_t fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  int64_t out = 0;
  auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (ec == std::errc::result_out_of_range)
    throw_input("command line", "option --" + name + " is out of range, got '" + *v + "'");
  if (ec != std::errc() || end != v->data() + v->size())
    throw_input("command line", "option --" + name + " must be an integer, got '" + *v + "'");
  return out;
}

int64_t Options::integer(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const {
  const int64_t out = integer(name, fallback);
  if (get(name) && (out < lo || out > hi))
    throw_input("command line", cat("option --", name, " must be between ", lo, " and ", hi, ", got ", out));
  return out;
}

double Options::number(const std::string& name, double fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  try {
    size_t used = 0;
    double out = std::stod(*v, &used);
    if (used == v->size() && std::isfinite(out)) return out;
  } catch (const std::exception&) {
  }
  throw_input("command line", "option --" + name + " must be a number, got '" + *v + "'");
}

std::vector<std::string> Options::list(const std::string& name) const {
  std::vector<std::string> items;
  if (auto v = get(name))
    for (size_t at = 0; at <= v->size();) {
      const size_t comma = std::min(v->find(',', at), v->size());
      items.push_back(v->substr(at, comma - at));
      at = comma + 1;
    }
  return items;
}

}  // namespace bertperf::cli
