// The build of this executable: its version, the commit its sources come from and whether they differed from it
// (cmake/build_provenance.cmake writes build_provenance.h on every build, and only this executable reads it, so a
// new commit relinks nothing else). Timed runs log it (harness/provenance.h); `bertperf --version` prints it.
#pragma once

#include <string>

#include "harness/provenance.h"

namespace bertperf::cli {

struct BuildInfo {
  std::string version;      // the project's, "0.1.0"
  std::string commit;       // 40 hex digits, or "unknown"
  bool dirty = true;        // the sources differed from the commit
  std::string source;       // "git", "archive" or "unknown"
  std::string source_dir;   // the repository the build came from, for config paths in logs
};

const BuildInfo& build_info();

// "bertperf 0.1.0, commit <sha> (git, with uncommitted changes)".
std::string version_line();

// What a run of `config_path` logs about its origin.
RunProvenance run_provenance(const std::string& config_path);

}  // namespace bertperf::cli
