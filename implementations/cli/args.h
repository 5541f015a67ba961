// Command-line option parsing shared by every subcommand: "--name value" and "--flag" forms,
// strict (an unknown or repeated option, or a missing value, is an InputError naming it).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/errors.h"

namespace bertperf::cli {

class Options {
 public:
  // `valued` options take a value; `flags` do not. Positional arguments are collected in order.
  Options(const Args& args, const std::set<std::string>& valued, const std::set<std::string>& flags);

  bool flag(const std::string& name) const { return flags_.count(name) > 0; }
  std::optional<std::string> get(const std::string& name) const;
  std::string required(const std::string& name) const;
  // Whole decimal integers only ("4294967297" is never read as 1); with bounds, a value outside [lo, hi] is an
  // InputError naming the option and the bounds.
  int64_t integer(const std::string& name, int64_t fallback) const;
  int64_t integer(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const;
  // A finite number.
  double number(const std::string& name, double fallback) const;
  // The comma-separated items of a value ("a,b" -> {"a", "b"}), empty ones kept for their reader to name; none
  // where the option is not given.
  std::vector<std::string> list(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> flags_;
  std::vector<std::string> positional_;
};

}  // namespace bertperf::cli
