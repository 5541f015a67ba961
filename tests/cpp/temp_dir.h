// A scratch directory for one test: created empty, removed with everything in it when the object
// goes. The name carries the process id and the object's address, so tests running in parallel
// (CTest -j, one process per test) never share one.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

namespace bertperf::testing {

struct TempDir {
  std::filesystem::path path;

  explicit TempDir(const std::string& prefix = "bertperf_test") {
    path = std::filesystem::temp_directory_path() /
           (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(reinterpret_cast<uintptr_t>(this)));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

}  // namespace bertperf::testing
