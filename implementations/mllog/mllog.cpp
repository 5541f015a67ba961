// :::MLLOG line formatting and the rank-0 logger (mllog.h).
#include "mllog/mllog.h"

#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/errors.h"

namespace bertperf::mllog {

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  // to_chars without a precision gives the shortest digits that round-trip, the same digits
  // Python's repr picks; only the layout differs, so re-lay them out Python's way.
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  BERT_CHECK(ec == std::errc(), "to_chars failed for a double");
  const std::string sci(buf, end);
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exponent = std::stoi(sci.substr(e + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits += c;

  std::string out = negative ? "-" : "";
  const int decimal_point = exponent + 1;  // digits before the decimal point
  const int ndigits = static_cast<int>(digits.size());
  if (decimal_point > -4 && decimal_point <= 16) {
    if (decimal_point <= 0) {
      out.append("0.").append(size_t(-decimal_point), '0').append(digits);
    } else if (decimal_point >= ndigits) {
      out.append(digits).append(size_t(decimal_point - ndigits), '0').append(".0");
    } else {
      out.append(digits, 0, decimal_point).append(".").append(digits, decimal_point);
    }
  } else {
    out += digits[0];
    if (ndigits > 1) out.append(".").append(digits, 1);
    const int magnitude = std::abs(exponent);
    out += exponent < 0 ? "e-" : "e+";
    if (magnitude < 10) out += '0';
    out += std::to_string(magnitude);
  }
  return out;
}

namespace {

void append_u_escape(std::string& out, uint32_t unit) {
  static const char* hex = "0123456789abcdef";
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += hex[(unit >> shift) & 0xF];
}

// Decodes one UTF-8 sequence at s[i]; invalid input yields U+FFFD and consumes one byte, so a
// stray byte can never make the line unparseable.
uint32_t decode_utf8(const std::string& s, size_t& i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = byte(i);
  int extra = 0;
  uint32_t cp = 0;
  if (lead < 0x80) {
    ++i;
    return lead;
  } else if ((lead & 0xE0) == 0xC0) {
    extra = 1, cp = lead & 0x1F;
  } else if ((lead & 0xF0) == 0xE0) {
    extra = 2, cp = lead & 0x0F;
  } else if ((lead & 0xF8) == 0xF0) {
    extra = 3, cp = lead & 0x07;
  } else {
    ++i;
    return 0xFFFD;
  }
  if (i + extra >= s.size()) {  // truncated sequence
    ++i;
    return 0xFFFD;
  }
  for (int k = 1; k <= extra; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) {
      ++i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  static const uint32_t min_for_length[] = {0, 0x80, 0x800, 0x10000};
  if (cp < min_for_length[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++i;
    return 0xFFFD;
  }
  i += extra + 1;
  return cp;
}

void append_string(std::string& out, const std::string& s) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const uint32_t cp = decode_utf8(s, i);
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (cp >= 0x20 && cp <= 0x7E) {
      out += static_cast<char>(cp);
    } else if (cp < 0x10000) {
      append_u_escape(out, cp);
    } else {
      const uint32_t v = cp - 0x10000;
      append_u_escape(out, 0xD800 | (v >> 10));
      append_u_escape(out, 0xDC00 | (v & 0x3FF));
    }
  }
  out += '"';
}

void append_json(std::string& out, const Value& v) {
  switch (v.type()) {
    case Value::value_t::null: out += "null"; return;
    case Value::value_t::boolean: out += v.get<bool>() ? "true" : "false"; return;
    case Value::value_t::number_integer: out += std::to_string(v.get<int64_t>()); return;
    case Value::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); return;
    case Value::value_t::number_float: out += python_float_repr(v.get<double>()); return;
    case Value::value_t::string: append_string(out, v.get_ref<const std::string&>()); return;
    case Value::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& item : v) {
        if (!first) out += ", ";
        first = false;
        append_json(out, item);
      }
      out += ']';
      return;
    }
    case Value::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : v.items()) {
        if (!first) out += ", ";
        first = false;
        append_string(out, key);
        out += ": ";
        append_json(out, item);
      }
      out += '}';
      return;
    }
    default: BERT_CHECK(false, "value type cannot be written to an MLLOG line");
  }
}

const char* event_type_name(EventType type) {
  switch (type) {
    case EventType::INTERVAL_START: return "INTERVAL_START";
    case EventType::INTERVAL_END: return "INTERVAL_END";
    case EventType::POINT_IN_TIME: return "POINT_IN_TIME";
  }
  return "POINT_IN_TIME";
}

}  // namespace

std::string python_json_dumps(const Value& value) {
  std::string out;
  append_json(out, value);
  return out;
}

std::string format_line(const Event& event) {
  BERT_CHECK(event.metadata.is_null() || event.metadata.is_object(), "MLLOG metadata for '", event.key,
             "' must be an object");
  // As the official library: {"file", "lineno"} first, then the caller's entries; a caller entry
  // named file or lineno replaces the value in place.
  Value metadata = Value::object();
  metadata["file"] = event.file;
  metadata["lineno"] = event.lineno;
  if (event.metadata.is_object())
    for (const auto& [key, item] : event.metadata.items()) metadata[key] = item;

  Value record = Value::object();
  record["namespace"] = event.name_space;
  record["time_ms"] = event.time_ms;
  record["event_type"] = event_type_name(event.type);
  record["key"] = event.key;
  record["value"] = event.value;
  record["metadata"] = std::move(metadata);
  return ":::MLLOG " + python_json_dumps(record);
}

std::string source_file_for_log(const char* path) {
  const std::string p = path ? path : "";
  size_t best = std::string::npos;
  for (const char* top : {"/implementations/", "/tests/", "/benchmarks/", "/scripts/"}) {
    const size_t at = p.rfind(top);
    if (at != std::string::npos && (best == std::string::npos || at > best)) best = at;
  }
  if (best != std::string::npos) return p.substr(best + 1);
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

Logger::Logger() : Logger(Options{}) {}

Logger::Logger(const Options& options) { configure(options); }

Logger::~Logger() {
  std::lock_guard lock(mutex_);
  if (file_) std::fclose(file_);  // an unfinished log: nothing more to check
  file_ = nullptr;
}

void Logger::configure(const Options& options) {
  std::lock_guard lock(mutex_);
  if (file_) std::fclose(file_);
  file_ = nullptr;
  to_stdout_ = options.to_stdout;
  name_space_ = options.name_space;
  rank_ = options.rank;
  file_path_ = options.file_label.empty() ? options.file : options.file_label;
  if (rank_ == 0 && !options.file.empty()) {
    file_ = std::fopen(options.file.c_str(), "a");
    if (!file_) throw_input(options.file, cat("cannot open log file for writing: ", std::strerror(errno)));
  }
}

void Logger::close_file() {
  std::lock_guard lock(mutex_);
  if (!file_) return;
  std::FILE* f = file_;
  file_ = nullptr;
  // The data must be on disk before a caller renames the file into place as a finished result.
  const bool flushed = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int err = errno;
  if (std::fclose(f) != 0 || !flushed)
    throw_input(file_path_, cat("cannot write the log file: ", std::strerror(flushed ? errno : err)));
}

void Logger::start(const std::string& key, const Value& value, const Value& metadata, std::source_location where) {
  emit(EventType::INTERVAL_START, key, value, metadata, where);
}

void Logger::end(const std::string& key, const Value& value, const Value& metadata, std::source_location where) {
  emit(EventType::INTERVAL_END, key, value, metadata, where);
}

void Logger::event(const std::string& key, const Value& value, const Value& metadata, std::source_location where) {
  emit(EventType::POINT_IN_TIME, key, value, metadata, where);
}

void Logger::emit(EventType type, const std::string& key, const Value& value, const Value& metadata,
                  const std::source_location& where) {
  if (!enabled()) return;
  Event e;
  e.name_space = name_space_;
  e.time_ms = now_ms();
  e.type = type;
  e.key = key;
  e.value = value;
  e.file = source_file_for_log(where.file_name());
  e.lineno = where.line();
  e.metadata = metadata;
  log(e);
}

void Logger::log(const Event& event) {
  if (!enabled()) return;
  const std::string line = format_line(event) + "\n";
  std::lock_guard lock(mutex_);
  // Flushed per line: a crash or a kill keeps every event logged so far.
  if (to_stdout_) {
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
  }
  if (file_) {
    // A line that does not reach the file (disk full, file size limit) ends the run: a log with a
    // hole in it is not a result.
    if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
      throw_input(file_path_, cat("cannot write the log file: ", std::strerror(errno)));
  }
}

}  // namespace bertperf::mllog
