// A run's provenance log lines (provenance.h).
#include "harness/provenance.h"

#include <algorithm>
#include <filesystem>

#include "core/hdf5.h"

#include "comm/context.h"

namespace bertperf {

namespace fs = std::filesystem;

std::string config_for_log(const std::string& config_path, const std::string& repository) {
  std::error_code ec;
  const fs::path config = fs::weakly_canonical(fs::absolute(config_path, ec), ec);
  if (!repository.empty()) {
    const fs::path root = fs::weakly_canonical(fs::path(repository), ec);
    const fs::path inside = config.lexically_relative(root);
    if (!ec && !inside.empty() && *inside.begin() != ".." && inside.is_relative()) return inside.generic_string();
  }
  return config.generic_string();
}

namespace {

std::string compiler_version() {
#if defined(__clang__)
  return std::string("Clang ") + __clang_version__;
#elif defined(__GNUC__)
  return std::string("GCC ") + __VERSION__;
#else
  return "unknown";
#endif
}

}  // namespace

LibraryVersions host_library_versions() {
  LibraryVersions versions = {{"HDF5", h5::library_version()}};
  if (const std::string mpi = DistContext::mpi_library_version(); !mpi.empty()) versions.emplace_back("MPI", mpi);
  versions.emplace_back("compiler", compiler_version());
  return versions;
}

void log_provenance(mllog::Logger& log, const RunProvenance& provenance) {
  log.event("bertperf_commit", provenance.commit, {{"dirty", provenance.dirty}, {"source", provenance.source}});
  log.event("bertperf_config", provenance.config);
}

void log_library_versions(mllog::Logger& log, const LibraryVersions& versions) {
  mllog::Value value = mllog::Value::object();
  for (const auto& [name, version] : versions) value[name] = version;
  log.event("bertperf_library_versions", value);
}

}  // namespace bertperf
