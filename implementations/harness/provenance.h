// What a run's log says about where the run comes from, so that a result set can be packaged with the exact code
// that produced it (bertperf-package) and its system description filled from what the run used:
//
//   bertperf_commit            value: the commit the build's sources come from (40 hex digits, or "unknown");
//                              metadata "dirty": the sources differed from that commit (uncommitted changes),
//                              "source": "git" (a checkout), "archive" (a `git archive`, e.g. a submission's code)
//                              or "unknown"
//   bertperf_config            value: the config the run trained with, as a path inside the repository the build
//                              came from ("benchmarks/bert/mini/cpu_2c.json"), or as given when it lies elsewhere
//   bertperf_library_versions  value: {library: version}: HDF5, MPI and the compiler here, then the backend's
//                              (OpenBLAS; the CUDA driver and runtime, cuBLASLt, cuDNN) and NCCL where a run uses it
//
// The official checkers pass keys they do not know, so these lines change no verdict. The commit comes from the
// build (cmake/build_provenance.cmake regenerates it on every build), handed down by the executable.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "mllog/mllog.h"

namespace bertperf {

using LibraryVersions = std::vector<std::pair<std::string, std::string>>;  // (name, version)

struct RunProvenance {
  std::string commit = "unknown";
  bool dirty = true;
  std::string source = "unknown";  // "git", "archive" or "unknown"
  std::string config;              // as logged (config_for_log)
};

// `config_path` relative to `repository` when it lies inside it, else its absolute path.
std::string config_for_log(const std::string& config_path, const std::string& repository);

// The libraries every run here uses, whatever its backend: HDF5, MPI (when built with it) and the compiler.
LibraryVersions host_library_versions();

// The bertperf_commit and bertperf_config lines.
void log_provenance(mllog::Logger& log, const RunProvenance& provenance);
// The bertperf_library_versions line.
void log_library_versions(mllog::Logger& log, const LibraryVersions& versions);

}  // namespace bertperf
