// The encoder half of the MLLOG format test: tests/python/test_mllog_format.py runs this program
// and compares every line with what Python's json.dumps (the official library's encoder) writes for
// the same values. Values come from a file named by BERTPERF_MLLOG_VECTORS, so they can be exact
// float bit patterns and arbitrary UTF-8; with the variable unset the input test is skipped and
// only the fixed examples run.
//
// Input, one value per line:  float <16 hex digits of the IEEE-754 bits> | int <decimal> |
//                             str <hex of the UTF-8 bytes> | json <JSON text>
// Each value v becomes one POINT_IN_TIME line with key "value" (examples: their name), value v,
// time_ms 1600000000000, file "encode.cpp", lineno <line number>, metadata
// {"copy": v, "nested": {"list": [v]}}, written to the file named by BERTPERF_MLLOG_OUT.
#include <gtest/gtest.h>

#include <bit>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/errors.h"
#include "mllog/mllog.h"

using namespace bertperf;

namespace {

using mllog::Value;

Value parse_input_value(const std::string& line, int lineno) {
  const auto space = line.find(' ');
  const std::string kind = line.substr(0, space);
  const std::string text = space == std::string::npos ? "" : line.substr(space + 1);
  const std::string where = cat("stdin line ", lineno);
  if (kind == "float") {
    uint64_t bits = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), bits, 16);
    if (ec != std::errc() || end != text.data() + text.size()) throw_input(where, "bad float bits '" + text + "'");
    return Value(std::bit_cast<double>(bits));
  }
  if (kind == "int") {
    if (!text.empty() && text[0] == '-') {
      int64_t v = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec != std::errc() || end != text.data() + text.size()) throw_input(where, "bad integer '" + text + "'");
      return Value(v);
    }
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size()) throw_input(where, "bad integer '" + text + "'");
    return Value(v);
  }
  if (kind == "str") {
    if (text.size() % 2) throw_input(where, "odd number of hex digits");
    std::string bytes;
    for (size_t i = 0; i < text.size(); i += 2) {
      unsigned v = 0;
      const auto [end, ec] = std::from_chars(text.data() + i, text.data() + i + 2, v, 16);
      if (ec != std::errc() || end != text.data() + i + 2) throw_input(where, "bad hex '" + text + "'");
      bytes += static_cast<char>(v);
    }
    return Value(bytes);
  }
  if (kind == "json") {
    try {
      return Value::parse(text);
    } catch (const std::exception& e) {
      throw_input(where, std::string("bad JSON: ") + e.what());
    }
  }
  throw_input(where, "unknown kind '" + kind + "' (float, int, str or json)");
}

// Values spelled the C++ way; the test spells the same values the Python way.
std::vector<std::pair<std::string, Value>> examples() {
  Value nested = Value::object();
  nested["a"] = 1;
  nested["b"] = Value::array({1.5, "x", nullptr, true, false});
  nested["c"] = Value::object();
  nested["d"] = Value::array();
  return {
      {"one_micro", 1e-6},
      {"ten_micro", 1e-5},
      {"tenth_milli", 0.0001},
      {"int_float", 6700.0},
      {"one", 1.0},
      {"e16", 1e16},
      {"below_e16", 9999999999999998.0},
      {"third", 1.0 / 3.0},
      {"lr", 0.0020992},
      {"neg_zero", -0.0},
      {"tiny", 5e-324},
      {"huge", std::numeric_limits<double>::max()},
      {"nan", std::numeric_limits<double>::quiet_NaN()},
      {"inf", std::numeric_limits<double>::infinity()},
      {"neg_inf", -std::numeric_limits<double>::infinity()},
      {"int_2_53_plus_1", int64_t(9007199254740993)},
      {"int_min", std::numeric_limits<int64_t>::min()},
      {"uint_max", std::numeric_limits<uint64_t>::max()},
      {"true", true},
      {"null", nullptr},
      {"unicode", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},  // café € U+1F600
      {"escapes", "q\" b\\ n\n r\r t\t b\b f\f nul\x01 del\x7f /"},
      {"nested", nested},
  };
}

void write_line(std::ostream& out, const std::string& key, const Value& v, int lineno) {
  mllog::Event e;
  e.time_ms = 1600000000000;
  e.key = key;
  e.value = v;
  e.file = "encode.cpp";
  e.lineno = lineno;
  e.metadata = Value::object();
  e.metadata["copy"] = v;
  e.metadata["nested"] = Value::object();
  e.metadata["nested"]["list"] = Value::array({v});
  out << mllog::format_line(e) << "\n";
}

std::string output_path(const char* name) {
  const char* dir = std::getenv("BERTPERF_MLLOG_OUT");
  return dir ? std::string(dir) + "/" + name : "";
}

}  // namespace

TEST(MllogEncode, Examples) {
  const std::string path = output_path("examples.txt");
  std::ofstream file;
  if (!path.empty()) file.open(path);
  std::ostringstream text;
  int n = 0;
  for (const auto& [name, v] : examples()) write_line(text, name, v, ++n);
  EXPECT_EQ(n, int(examples().size()));
  if (file.is_open()) file << text.str();
}

TEST(MllogEncode, InputVectors) {
  const char* input = std::getenv("BERTPERF_MLLOG_VECTORS");
  if (!input) GTEST_SKIP() << "BERTPERF_MLLOG_VECTORS not set (the Python test sets it)";
  std::ifstream in(input);
  ASSERT_TRUE(in) << input;
  std::ofstream out(output_path("vectors.txt"));
  ASSERT_TRUE(out);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty()) write_line(out, "value", parse_input_value(line, lineno), lineno);
  }
}
