// Strict reading of JSON configuration objects.
//
// Every config file of bertperf (bert_config.json, hyperparameter configs, system descriptions) is
// read through JsonFields, so a missing field, a wrong type or an unknown key always gives the same
// kind of one-line error naming the file and the field, never a crash or a silent default.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <set>
#include <string>

#include "core/errors.h"

namespace bertperf {

using Json = nlohmann::json;

// Parses a whole file; a missing file, a directory, a syntax error or a number out of range is an
// InputError naming the file (and, for a number, its field).
Json read_json_file(const std::string& path);

// A value as messages quote it: its JSON text, cut to about `limit` characters ("..." marks the cut).
// Never recursive beyond what fits the limit, so a deeply nested or huge value prints a short line.
std::string json_excerpt(const Json& value, size_t limit = 60);

class JsonFields {
 public:
  // `where` names the object in messages, e.g. "configs/mini.json" or "configs/mini.json: model".
  JsonFields(const Json& object, std::string where);

  template <typename T>
  T required(const std::string& key) {
    seen_.insert(key);
    if (!object_.contains(key)) throw_input(where_, cat("missing field '", key, "'"));
    return convert<T>(key, object_.at(key));
  }

  template <typename T>
  T optional(const std::string& key, T fallback) {
    seen_.insert(key);
    if (!object_.contains(key)) return fallback;
    return convert<T>(key, object_.at(key));
  }

  bool has(const std::string& key) const { return object_.contains(key); }
  const Json& raw(const std::string& key) {
    seen_.insert(key);
    if (!object_.contains(key)) throw_input(where_, cat("missing field '", key, "'"));
    return object_.at(key);
  }
  const std::string& where() const { return where_; }

  // Call after reading every known field: any other key is a typo the user should hear about.
  void reject_unknown() const;

 private:
  template <typename T>
  T convert(const std::string& key, const Json& value) const;

  const Json& object_;
  std::string where_;
  std::set<std::string> seen_;
};

template <typename T>
T JsonFields::convert(const std::string& key, const Json& value) const {
  auto wrong = [&](const char* expected) {
    throw_input(where_, cat("field '", key, "' must be ", expected, ", got ", json_excerpt(value)));
  };
  if constexpr (std::is_same_v<T, bool>) {
    if (!value.is_boolean()) wrong("true or false");
    return value.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!value.is_number_integer()) wrong("an integer");
    const auto v = value.get<int64_t>();
    if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
        v > static_cast<int64_t>(std::numeric_limits<T>::max()))
      wrong("an integer in range");
    return static_cast<T>(v);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!value.is_number()) wrong("a number");
    return value.get<T>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!value.is_string()) wrong("a string");
    return value.get<std::string>();
  } else {
    static_assert(sizeof(T) == 0, "unsupported field type");
  }
}

}  // namespace bertperf
