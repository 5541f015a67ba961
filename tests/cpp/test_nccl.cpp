// The NCCL transport's smoke test, where a GPU is: nccl_probe.cpp runs every reduction of the policy over NCCL on the
// CUDA backend's memory against the fp64 sums of every rank's values, with the backend's own queued work writing each
// input just before and reading each result just after. Under `mpirun -np 2` where two GPUs and mpirun are present
// (the NCCL paths of several ranks: grouped reduces and broadcasts of uneven parts, the hierarchy's splits), else as
// one process, a world of one. Skipped, saying why, in a build without NCCL or the CUDA backend, or without a GPU.
// (The host-side arithmetic the transport relies on, parts and groups, is tested without a GPU in test_dist.cpp.)
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "comm/transport.h"
#include "core/errors.h"
#include "registry/registry.h"
#include "temp_dir.h"

#ifdef BERTPERF_HAVE_NCCL
#include "gpu/runtime.h"
#endif

using namespace bertperf;
using bertperf::testing::TempDir;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST(NcclTransport, EveryReductionMatchesTheSumsOnTheGpu) {
#ifndef BERTPERF_HAVE_NCCL
  GTEST_SKIP() << "skipped: this build has no NCCL (it needs the CUDA toolkit and NCCL)";
#else
  const std::vector<std::string> here = available_backends();
  if (std::find(here.begin(), here.end(), "cuda") == here.end())
    GTEST_SKIP() << "skipped: no CUDA backend here (this build has none, or no GPU is visible); the NCCL smoke test "
                    "needs a GPU";
  const int gpus = gpu::device_count();
  const bool several = gpus >= 2 && std::system("command -v mpirun >/dev/null 2>&1") == 0;
  const int ranks = several ? 2 : 1;
  TempDir dir("bertperf_nccl");
  const std::string out = dir / "out.txt", err = dir / "err.txt";
  const std::string launch = several ? "mpirun -np 2 --oversubscribe --allow-run-as-root " : "";
  const int raw = std::system(
      cat("timeout 300 ", launch, BERTPERF_BINARY_DIR, "/bin/nccl_probe >", out, " 2>", err).c_str());
  const std::string output = slurp(out), errors = slurp(err);
  std::cout << "nccl_probe on " << ranks << " rank" << (ranks == 1 ? "" : "s") << " (" << gpus << " GPUs here):\n"
            << output;
  ASSERT_TRUE(WIFEXITED(raw) && WEXITSTATUS(raw) == 0) << output << errors;
  for (const char* line : {"reducer: all-reduce over NCCL", "reducer: bucketed all-reduce over NCCL",
                           "on its own CUDA stream", "reducer: hierarchical over NCCL", "reducer: sharded (ZeRO-1) over NCCL",
                           "transport: NCCL"})
    EXPECT_NE(output.find(line), std::string::npos) << line << "\n" << output;
  for (int r = 0; r < ranks; ++r)
    EXPECT_NE(output.find(cat("rank ", r, " nccl ok")), std::string::npos) << output << errors;
#endif
}
