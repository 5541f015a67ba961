// The build of this executable (build_info.h).
#include "cli/build_info.h"

#include "build_provenance.h"

namespace bertperf::cli {

const BuildInfo& build_info() {
  static const BuildInfo info{BERTPERF_VERSION, BERTPERF_BUILD_COMMIT, BERTPERF_BUILD_DIRTY != 0, BERTPERF_BUILD_SOURCE,
                              BERTPERF_SOURCE_DIR};
  return info;
}

std::string version_line() {
  const BuildInfo& b = build_info();
  return "bertperf " + b.version + ", commit " + b.commit + " (" + b.source +
         (b.dirty ? ", with uncommitted changes)" : ")");
}

RunProvenance run_provenance(const std::string& config_path) {
  const BuildInfo& b = build_info();
  return RunProvenance{b.commit, b.dirty, b.source, config_for_log(config_path, b.source_dir)};
}

}  // namespace bertperf::cli
