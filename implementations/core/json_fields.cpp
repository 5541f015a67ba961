// Strict JSON config reading (json_fields.h).
#include "core/json_fields.h"

#include <fstream>
#include <sstream>

namespace bertperf {

Json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw_input(path, "cannot open file");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return Json::parse(text.str());
  } catch (const Json::parse_error& e) {
    // nlohmann reports "[json.exception.parse_error.101] parse error at line 3, column 5: ..."
    std::string what = e.what();
    const auto at = what.find("parse error");
    throw_input(path, "invalid JSON: " + (at == std::string::npos ? what : what.substr(at)));
  }
}

JsonFields::JsonFields(const Json& object, std::string where) : object_(object), where_(std::move(where)) {
  if (!object_.is_object()) throw_input(where_, "expected a JSON object, got " + object_.dump());
}

void JsonFields::reject_unknown() const {
  for (const auto& [key, value] : object_.items()) {
    if (!seen_.count(key)) throw_input(where_, cat("unknown field '", key, "'"));
  }
}

}  // namespace bertperf
