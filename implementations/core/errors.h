// The one error-check family of bertperf.
//
// Two kinds of failure, kept apart on purpose:
//  - InputError: the user handed us something wrong (config, data file, checkpoint, log, command
//    line). The message is one line naming what and where; the CLI prints it and exits 2.
//  - InternalError: a broken precondition or a failed library call (BLAS, HDF5, MPI, CUDA, NCCL).
//    The message carries the expression, file and line; the CLI prints it and exits 1.
// Both are exceptions so that destructors run (no half-written result files) and nothing dies on a
// signal. Library-specific checks (CUDA_CHECK, HDF5_CHECK, ...) are thin wrappers over
// BERT_CHECK_GEN so every failure reads the same way.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace bertperf {

struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct InternalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Concatenates anything streamable: cat("layer ", i, " has ", n, " rows").
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

// A tensor shape as messages print it: [2,3,4].
inline std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

[[noreturn]] void throw_internal(const char* expr, const char* file, int line, const std::string& msg);

// One line for the user: "<where>: <what>".
[[noreturn]] inline void throw_input(const std::string& where, const std::string& what) {
  throw InputError(where.empty() ? what : where + ": " + what);
}

}  // namespace bertperf

// Generic check: `ok` decides success, `msg` (a std::string expression) explains failure.
#define BERT_CHECK_GEN(expr, ok, msg)                                            \
  do {                                                                           \
    if (!(ok)) ::bertperf::throw_internal(#expr, __FILE__, __LINE__, (msg));     \
  } while (0)

// Plain precondition with a message built from streamable parts.
#define BERT_CHECK(cond, ...) BERT_CHECK_GEN(cond, (cond), ::bertperf::cat(__VA_ARGS__))

// HDF5 calls return a negative value on failure.
#define HDF5_CHECK(call, ...)                                                    \
  do {                                                                           \
    auto bert_h5_status_ = (call);                                               \
    BERT_CHECK_GEN(call, bert_h5_status_ >= 0, ::bertperf::cat("HDF5: ", __VA_ARGS__)); \
  } while (0)
