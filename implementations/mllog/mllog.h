// The :::MLLOG event logger: lines byte-identical to those of the official Python `mlperf_logging`
// library (json.dumps with default settings), so our logs read exactly like any other submitter's
// and the official checkers parse them the same way.
//
// A line is ":::MLLOG " + {"namespace", "time_ms", "event_type", "key", "value", "metadata"} with
// metadata starting with the caller's "file" and "lineno". Values are ordered JSON (nlohmann's
// ordered_json) so that the int/float distinction and insertion order survive; formatting follows
// Python: floats as repr() (shortest round trip, "1e-06", "6700.0", "1e+16"), ensure_ascii string
// escaping with surrogate pairs, ", " and ": " separators.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <source_location>
#include <string>

namespace bertperf::mllog {

using Value = nlohmann::ordered_json;

// Python's repr(float) for a double (NaN, Infinity and -Infinity as json.dumps writes them).
std::string python_float_repr(double value);
// json.dumps(value) with the defaults: ensure_ascii, ", "/": " separators, no indentation.
std::string python_json_dumps(const Value& value);

enum class EventType { INTERVAL_START, INTERVAL_END, POINT_IN_TIME };

struct Event {
  std::string name_space;  // "namespace" in the line
  int64_t time_ms = 0;
  EventType type = EventType::POINT_IN_TIME;
  std::string key;
  Value value;        // null when the event has none
  std::string file;   // metadata "file"
  int64_t lineno = 0; // metadata "lineno"
  Value metadata;     // user metadata (object or null), appended after file/lineno
};

// The full line without the trailing newline.
std::string format_line(const Event& event);

// A source path as it appears in metadata "file": relative to the repository root (from
// "implementations/", "tests/", ... onwards) so logs neither leak build-machine paths nor depend on
// where the tree was checked out, and stay stable across runs for the seed checker.
std::string source_file_for_log(const char* path);

// Milliseconds since the Unix epoch, truncated as Python's int(time.time()*1000).
int64_t now_ms();

// The process's logger. Only rank 0 writes; other ranks' calls are no-ops, so callers need no
// rank checks and keys that must appear exactly once cannot be duplicated by extra ranks.
class Logger {
 public:
  struct Options {
    bool to_stdout = true;
    std::string file;         // also append lines here (empty: none)
    std::string name_space;   // default namespace, "" as the official library
    int rank = 0;             // this process's rank in the job (DistContext::rank(), comm/context.h)
    std::string file_label;   // how error messages name the file (default: `file`), e.g. the
                              // final name of a log written to a temporary file
  };

  Logger();
  explicit Logger(const Options& options);
  ~Logger();
  Logger(const Logger&) = delete;
  Logger& operator=(const Logger&) = delete;

  // Re-targets the logger; closes any previous file.
  void configure(const Options& options);
  // Flushes, syncs to disk and closes the file sink (e.g. before renaming it into place); an
  // InputError naming the file when any of it fails. Every line is also checked as it is written.
  void close_file();
  bool enabled() const { return rank_ == 0; }

  void start(const std::string& key, const Value& value = nullptr, const Value& metadata = nullptr,
             std::source_location where = std::source_location::current());
  void end(const std::string& key, const Value& value = nullptr, const Value& metadata = nullptr,
           std::source_location where = std::source_location::current());
  void event(const std::string& key, const Value& value = nullptr, const Value& metadata = nullptr,
             std::source_location where = std::source_location::current());
  // Full control (explicit time, type, file and line), e.g. for back-dated events and tests.
  void log(const Event& event);

 private:
  void emit(EventType type, const std::string& key, const Value& value, const Value& metadata,
            const std::source_location& where);

  std::mutex mutex_;
  bool to_stdout_ = true;
  std::FILE* file_ = nullptr;
  std::string file_path_;
  std::string name_space_;
  int rank_ = 0;
};

}  // namespace bertperf::mllog
