// A run's provenance log lines (provenance.h).
#include "harness/provenance.h"

#include <algorithm>
#include <filesystem>

#include "core/hdf5.h"

#ifdef BERTPERF_HAVE_MPI
// The one MPI call outside dist/, which is closed to changes while it is being reworked: it belongs beside the
// distributed context (dist/context.h) and moves there then. MPI allows it before MPI_Init and after MPI_Finalize.
#include <mpi.h>
#endif

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

#ifdef BERTPERF_HAVE_MPI
// "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, ..." -> "Open MPI v4.1.4" (the text before the first
// comma or line break).
std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return "unknown";
  std::string version(text, static_cast<size_t>(std::max(0, length)));
  version = version.substr(0, version.find_first_of(",\n"));
  while (!version.empty() && (version.back() == ' ' || version.back() == '\0')) version.pop_back();
  return version.empty() ? "unknown" : version;
}
#endif

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
#ifdef BERTPERF_HAVE_MPI
  versions.emplace_back("MPI", mpi_library_version());
#endif
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
