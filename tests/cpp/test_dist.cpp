// The distributed context (dist/context.h) and the MPI gradient reducer: a world of one without a launcher; a
// launcher's environment refused by a build without MPI (test_dist_serial, this file over a context built without
// MPI); and under `mpirun -np 2` (dist_probe.cpp): ranks, local ranks and nodes, all-reduce, broadcast and the
// reducer against sums the probe computes itself, and one rank's bad input ending the whole job instead of leaving
// the other waiting.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "core/errors.h"
#include "dist/context.h"
#include "dist/reducer.h"
#include "temp_dir.h"

#ifdef BERTPERF_HAVE_NCCL
#include <cuda_runtime.h>
#endif

using namespace bertperf;
using bertperf::testing::TempDir;

namespace {

[[maybe_unused]] const char* const kMpirun2 = "mpirun -np 2 --oversubscribe --allow-run-as-root";
[[maybe_unused]] const char* const kMpirun4 = "mpirun -np 4 --oversubscribe --allow-run-as-root";
const char* const kLauncherVars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_STEP_NUM_TASKS"};

// Sets (or, with nullopt, removes) environment variables for a scope, then puts back what was there.
class ScopedEnv {
 public:
  void set(const std::string& name, std::optional<std::string> value) {
    const char* old = std::getenv(name.c_str());
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    apply(name, value);
  }
  // No launcher: what a plain `bertperf train` sees.
  void no_launcher() {
    for (const char* var : kLauncherVars) set(var, std::nullopt);
  }
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) apply(it->first, it->second);
  }

 private:
  static void apply(const std::string& name, const std::optional<std::string>& value) {
    if (value)
      setenv(name.c_str(), value->c_str(), 1);
    else
      unsetenv(name.c_str());
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

std::string this_host() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

void expect_world_of_one(DistContext& dist) {
  EXPECT_EQ(dist.rank(), 0);
  EXPECT_EQ(dist.size(), 1);
  EXPECT_TRUE(dist.is_root());
  EXPECT_EQ(dist.local_rank(), 0);
  EXPECT_EQ(dist.local_size(), 1);
  EXPECT_EQ(dist.node(), 0);
  EXPECT_EQ(dist.nodes(), 1);
  EXPECT_EQ(dist.host(), this_host());
  EXPECT_FALSE(dist.mpi());
  // Collectives are the identity; abort returns.
  std::vector<float> f = {1.5f, -2.0f};
  std::vector<double> d = {3.25};
  dist.allreduce_sum(f.data(), f.size());
  dist.allreduce_sum(d.data(), d.size());
  EXPECT_EQ(f, (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(d, (std::vector<double>{3.25}));
  uint64_t value = 42;
  dist.broadcast(value);
  EXPECT_EQ(value, 42u);
  dist.barrier();
  dist.abort(3);
}

struct Job {
  int code;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

[[maybe_unused]] bool have_mpirun() { return std::system("command -v mpirun >/dev/null 2>&1") == 0; }

// dist_probe started by `launch` (a launcher and its options, or an environment), killed after `limit_s` seconds
// (then the code is timeout's 124).
[[maybe_unused]] Job run_probe(const std::string& launch, const std::string& mode, int limit_s) {
  TempDir dir("bertperf_dist");
  const std::string out = dir / "out.txt", err = dir / "err.txt";
  const std::string command =
      cat("timeout ", limit_s, " ", launch, " ", BERTPERF_BINARY_DIR, "/bin/dist_probe ", mode, " >", out, " 2>", err);
  const int raw = std::system(command.c_str());
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, slurp(out), slurp(err)};
}

// What the failure handler prints on a world of one, and the code it returns.
std::pair<int, std::string> reported(const std::function<void()>& fail, DistContext* dist) {
  std::stringstream captured;
  std::streambuf* old = std::cerr.rdbuf(captured.rdbuf());
  int code = -1;
  try {
    fail();
  } catch (...) {
    code = report_failure("bertperf train", dist);
  }
  std::cerr.rdbuf(old);
  return {code, captured.str()};
}

}  // namespace

TEST(DistContext, WithoutLauncherIsAWorldOfOne) {
  ScopedEnv env;
  env.no_launcher();
  auto dist = DistContext::create();
  expect_world_of_one(*dist);
  EXPECT_NE(dist->describe().find("single process"), std::string::npos) << dist->describe();
  expect_world_of_one(*DistContext::single());
}

TEST(DistContext, FailureIsOneLineAndAnExitCode) {
  auto dist = DistContext::single();
  const auto input = reported([] { throw_input("shard_1.hdf5", "row 3: bad token"); }, dist.get());
  EXPECT_EQ(input.first, 2);
  EXPECT_EQ(input.second, "bertperf train: error: shard_1.hdf5: row 3: bad token\n");
  const auto internal = reported([] { throw InternalError("check failed"); }, dist.get());
  EXPECT_EQ(internal.first, 1);
  EXPECT_EQ(internal.second, "bertperf train: check failed\n");
  // Before there is a context (its creation failed).
  const auto early = reported([] { throw_input("", "no MPI"); }, nullptr);
  EXPECT_EQ(early.first, 2);
  EXPECT_EQ(early.second, "bertperf train: error: no MPI\n");
}

TEST(DistContext, MultiTaskLaunchWithoutMpiIsRefused) {
#ifdef BERTPERF_HAVE_MPI
  GTEST_SKIP() << "this build has MPI; test_dist_serial checks the build without it";
#else
  const auto refused = [](const char* var, const char* value) {
    ScopedEnv env;
    env.no_launcher();
    env.set(var, value);
    try {
      DistContext::create();
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  for (const auto& [var, value] : {std::pair{"OMPI_COMM_WORLD_SIZE", "2"}, std::pair{"PMI_SIZE", "8"},
                                   std::pair{"SLURM_STEP_NUM_TASKS", "4"}, std::pair{"PMIX_RANK", "1"}}) {
    const std::string message = refused(var, value);
    EXPECT_NE(message.find(cat(var, "=", value)), std::string::npos) << var << ": " << message;
    EXPECT_NE(message.find("without MPI"), std::string::npos) << message;
  }
  EXPECT_NE(refused("SLURM_STEP_NUM_TASKS", "four").find("SLURM_STEP_NUM_TASKS"), std::string::npos);
  // One task, or PMIx's rank 0 alone, is a world of one.
  for (const auto& [var, value] : {std::pair{"SLURM_STEP_NUM_TASKS", "1"}, std::pair{"PMIX_RANK", "0"}}) {
    ScopedEnv env;
    env.no_launcher();
    env.set(var, value);
    expect_world_of_one(*DistContext::create());
  }
#endif
}

TEST(DistJob, TwoRanksUnderMpirun) {
#ifndef BERTPERF_HAVE_MPI
  GTEST_SKIP() << "built without MPI";
#else
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  const Job job = run_probe(kMpirun2, "check", 120);
  ASSERT_EQ(job.code, 0) << job.out << job.err;
  std::map<int, std::map<std::string, std::string>> ranks;
  std::istringstream lines(job.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("rank=", 0) != 0) continue;
    std::map<std::string, std::string> fields;
    std::istringstream words(line);
    for (std::string word; words >> word;) fields[word.substr(0, word.find('='))] = word.substr(word.find('=') + 1);
    ranks[std::stoi(fields["rank"])] = fields;
  }
  ASSERT_EQ(ranks.size(), 2u) << job.out;
  for (const auto& [rank, f] : ranks) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(f.at("size"), "2");
    EXPECT_EQ(f.at("local_rank"), std::to_string(rank));  // one node: local ranks follow world ranks
    EXPECT_EQ(f.at("local_size"), "2");
    EXPECT_EQ(f.at("node"), "0");
    EXPECT_EQ(f.at("nodes"), "1");
    EXPECT_EQ(f.at("host"), this_host());
    EXPECT_EQ(f.at("mpi"), "1");
    EXPECT_EQ(f.at("root"), rank == 0 ? "1" : "0");
    EXPECT_NE(job.out.find(cat("rank ", rank, " ok")), std::string::npos) << job.out;
  }
  EXPECT_NE(job.out.find("describe: MPI, 2 ranks on 1 node"), std::string::npos) << job.out;
#endif
}

TEST(DistJob, OneRankFailingEndsTheJob) {
#ifndef BERTPERF_HAVE_MPI
  GTEST_SKIP() << "built without MPI";
#else
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  // Rank 1 throws a bad-input error while rank 0 waits in a barrier: the job must end, non-zero, within 60 s.
  const Job job = run_probe(kMpirun2, "fail", 60);
  EXPECT_NE(job.code, 124) << "the job hung: " << job.err;
  EXPECT_NE(job.code, 0) << job.err;
  const std::string line = cat("rank 1 on ", this_host(),
                               ": dist_probe: error: shard_1.hdf5: row 3: token id 40000 is outside the vocabulary");
  EXPECT_NE(job.err.find(line), std::string::npos) << job.err;
  EXPECT_EQ(job.err.find("rank 0 on"), std::string::npos) << job.err;
#endif
}

TEST(DistJob, LauncherAndMpiMustAgree) {
#ifndef BERTPERF_HAVE_MPI
  GTEST_SKIP() << "built without MPI";
#else
  // srun said two tasks, but MPI started as a singleton (what an srun without the right --mpi plugin does): two
  // independent single-rank trainings would follow, so it is refused.
  const Job job = run_probe("env SLURM_STEP_NUM_TASKS=2", "check", 60);
  EXPECT_EQ(job.code, 2) << job.out << job.err;
  EXPECT_NE(job.err.find("dist_probe: error: this process is one of 2 tasks (SLURM_STEP_NUM_TASKS=2) but MPI sees 1 rank"),
            std::string::npos)
      << job.err;
#endif
}

TEST(SplitFlat, PartsCoverTheBufferAtCuts) {
  const std::vector<int64_t> cuts = {0, 10, 25, 40, 70, 90};
  const auto parts = split_flat(100, cuts, 3);
  ASSERT_EQ(parts.size(), 3u);
  // Ideal ends 34 and 67: the nearest cuts are 40 (6 away, not 25 at 9) and 70.
  EXPECT_EQ(parts[0].begin, 0u);
  EXPECT_EQ(parts[0].end, 40u);
  EXPECT_EQ(parts[1].end, 70u);
  EXPECT_EQ(parts[2].end, 100u);
  // More ranks than cuts: the later parts are empty, never reversed.
  const auto many = split_flat(100, {0, 50}, 4);
  size_t covered = 0;
  for (size_t p = 0; p < many.size(); ++p) {
    EXPECT_LE(many[p].begin, many[p].end);
    if (p > 0) {
      EXPECT_EQ(many[p].begin, many[p - 1].end);
    }
    covered += many[p].size();
  }
  EXPECT_EQ(covered, 100u);
  EXPECT_EQ(many[0].end, 50u);
  // One rank: everything.
  EXPECT_EQ(split_flat(7, {}, 1)[0].end, 7u);
}

TEST(DistJob, ReducersUnderMpirun) {
#ifndef BERTPERF_HAVE_MPI
  GTEST_SKIP() << "built without MPI";
#else
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  for (const char* launch : {kMpirun2, kMpirun4}) {
    SCOPED_TRACE(launch);
    const Job job = run_probe(launch, "reducers", 120);
    ASSERT_EQ(job.code, 0) << job.out << job.err;
    for (const char* line : {"reducer: bucketed all-reduce over MPI, fp32: 10 buckets", "MPI_Iallreduce polled",
                             "reducer: hierarchical over MPI", "reducer: sharded (ZeRO-1)"})
      EXPECT_NE(job.out.find(line), std::string::npos) << line << "\n" << job.out;
    const int ranks = launch == kMpirun2 ? 2 : 4;
    for (int r = 0; r < ranks; ++r) EXPECT_NE(job.out.find(cat("rank ", r, " reducers ok")), std::string::npos) << job.out;
  }
#endif
}

// The NCCL reducer on one GPU: a communicator of one rank, bucketed on its own stream, gives back what it was handed
// (the sum over one rank) and sums partial norms. The device check runs it where a GPU is present.
TEST(NcclReducer, OneGpuSmoke) {
#ifndef BERTPERF_HAVE_NCCL
  GTEST_SKIP() << "built without NCCL (it needs the CUDA toolkit, NCCL and MPI)";
#else
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no CUDA device here";
  auto dist = DistContext::single();
  const size_t n = 300001;
  const auto reducer =
      make_nccl_reducer(*dist, DType::F32, {.algorithm = ReduceAlgorithm::BUCKETED, .bucket_mb = 0.25}, 0, n);
  EXPECT_NE(reducer->describe().find("over NCCL"), std::string::npos) << reducer->describe();
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1013) * 0.37f - 100.0f;
  float* grads = nullptr;
  double* norms = nullptr;
  ASSERT_EQ(cudaMalloc(&grads, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&norms, 2 * sizeof(double)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(grads, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  const double partial[2] = {1.5, -2.25};
  ASSERT_EQ(cudaMemcpy(norms, partial, sizeof partial, cudaMemcpyHostToDevice), cudaSuccess);
  reducer->ready(grads, n / 2, n);
  reducer->finish(grads, n);
  reducer->sum(norms, 2);
  std::vector<float> back(n);
  double summed[2] = {};
  ASSERT_EQ(cudaMemcpy(back.data(), grads, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(summed, norms, sizeof summed, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host);
  EXPECT_EQ(summed[0], 1.5);
  EXPECT_EQ(summed[1], -2.25);
  cudaFree(grads);
  cudaFree(norms);
#endif
}
