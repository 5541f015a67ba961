// Strict JSON config reading (json_fields.h).
#include "core/json_fields.h"

#include "core/files.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace bertperf {

namespace {

// Appends `v` to `out` until `out` holds more than `limit` characters.
void excerpt_into(const Json& v, size_t limit, std::string& out) {
  if (out.size() > limit) return;
  if (v.is_array() || v.is_object()) {
    out += v.is_array() ? '[' : '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end() && out.size() <= limit; ++it) {
      if (!first) out += ',';
      first = false;
      if (v.is_object()) out += Json(it.key()).dump() + ':';
      excerpt_into(it.value(), limit, out);
    }
    out += v.is_array() ? ']' : '}';
  } else {
    out += v.dump();
  }
}

}  // namespace

std::string json_excerpt(const Json& value, size_t limit) {
  std::string out;
  excerpt_into(value, limit, out);
  if (out.size() > limit) out = out.substr(0, limit) + "...";
  return out;
}

Json read_json_file(const std::string& path) {
  const std::string text = read_file(path, "a JSON file");
  // The key being parsed, so a number out of range can name its field.
  std::vector<std::string> keys;
  const Json::parser_callback_t track = [&keys](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) keys.emplace_back();
    else if ((event == Json::parse_event_t::object_end || event == Json::parse_event_t::array_end) && !keys.empty())
      keys.pop_back();
    else if (event == Json::parse_event_t::key && !keys.empty())
      keys.back() = parsed.get<std::string>();
    return true;
  };
  try {
    return Json::parse(text, track);
  } catch (const Json::parse_error& e) {
    // nlohmann reports "[json.exception.parse_error.101] parse error at line 3, column 5: ..."
    std::string what = e.what();
    const auto at = what.find("parse error");
    throw_input(path, "invalid JSON: " + (at == std::string::npos ? what : what.substr(at)));
  } catch (const Json::exception& e) {
    // out_of_range.406: "number overflow parsing '1e400'"
    std::string what = e.what();
    const auto close = what.find("] ");
    std::string field;
    for (const auto& k : keys)
      if (!k.empty()) field += (field.empty() ? "" : ".") + k;
    throw_input(path, cat(field.empty() ? "" : "field '" + field + "': ",
                          close == std::string::npos ? what : what.substr(close + 2)));
  }
}

JsonFields::JsonFields(const Json& object, std::string where) : object_(object), where_(std::move(where)) {
  if (!object_.is_object()) throw_input(where_, "expected a JSON object, got " + json_excerpt(object_));
}

void JsonFields::reject_unknown() const {
  for (const auto& [key, value] : object_.items()) {
    if (!seen_.count(key)) throw_input(where_, cat("unknown field '", key, "'"));
  }
}

}  // namespace bertperf
