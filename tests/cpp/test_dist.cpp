// The distributed context (comm/context.h) and the MPI gradient reducer: a world of one without a launcher; a
// launcher's environment refused by a build without MPI (test_dist_serial, this file over a context built without
// MPI); and under `mpirun -np 2` (dist_probe.cpp): ranks, local ranks and nodes, all-reduce, broadcast and the
// reducer against sums the probe computes itself, and one rank's bad input ending the whole job instead of leaving
// the other waiting.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include "core/errors.h"
#include "comm/context.h"
#include "comm/reducer.h"
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
  double seconds;  // from start to exit
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
  const auto start = std::chrono::steady_clock::now();
  const int raw = std::system(command.c_str());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, slurp(out), slurp(err), seconds};
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
  // Rank 1 throws a bad-input error while rank 0 waits in a barrier: the job must end, non-zero, within 60 s, and
  // rank 0's watcher hears of it first.
  const Job job = run_probe(kMpirun2, "fail", 90);
  std::cout << "job ended " << job.seconds << " s after it started (exit " << job.code << ")\n";
  EXPECT_NE(job.code, 124) << "the job hung: " << job.err;
  EXPECT_EQ(job.code, 2) << job.err;
  EXPECT_LT(job.seconds, 60.0);
  const std::string line = cat("rank 1 on ", this_host(),
                               ": dist_probe: error: shard_1.hdf5: row 3: token id 40000 is outside the vocabulary");
  EXPECT_NE(job.err.find(line), std::string::npos) << job.err;
  EXPECT_EQ(job.err.find("rank 0 on"), std::string::npos) << job.err;
  EXPECT_NE(job.out.find("peer failure: " + line), std::string::npos) << job.out;
#endif
}

TEST(DistJob, OneRankThrowingEndsTheJob) {
#ifndef BERTPERF_HAVE_MPI
  GTEST_SKIP() << "built without MPI";
#else
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  // Rank 1 throws a plain exception while rank 0 sits in all-reduces that would never complete.
  const Job job = run_probe(kMpirun2, "throw", 90);
  std::cout << "job ended " << job.seconds << " s after it started (exit " << job.code << ")\n";
  EXPECT_NE(job.code, 124) << "the job hung: " << job.err;
  EXPECT_EQ(job.code, 1) << job.err;
  EXPECT_LT(job.seconds, 60.0);
  const std::string line = cat("rank 1 on ", this_host(), ": dist_probe: simulated fault in the backward");
  EXPECT_NE(job.err.find(line), std::string::npos) << job.err;
  EXPECT_NE(job.out.find("peer failure: " + line), std::string::npos) << job.out;
#endif
}

TEST(DistJob, OneRankKilledEndsTheJob) {
#ifndef BERTPERF_HAVE_MPI
  GTEST_SKIP() << "built without MPI";
#else
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  // Both ranks sit in all-reduces; rank 1 gets SIGKILL. The launcher must end rank 0 and the job, non-zero, naming
  // the rank and the host, within 60 s of the kill.
  TempDir dir("bertperf_dist_kill");
  const std::string out = dir / "out.txt", err = dir / "err.txt", times = dir / "times.txt";
  const std::string script = cat(
      "timeout 90 ", kMpirun2, " ", BERTPERF_BINARY_DIR, "/bin/dist_probe train >", out, " 2>", err, " & job=$!\n",
      "for i in $(seq 300); do grep -q 'rank 0 pid' ", out, " && grep -q 'rank 1 pid' ", out, " && break; sleep 0.1; done\n",
      "victim=$(sed -n 's/^rank 1 pid //p' ", out, ")\n",
      "kill -9 \"$victim\"; killed=$(date +%s.%N)\n",
      "wait $job; code=$?\n",
      "echo \"$code $(awk \"BEGIN{print $(date +%s.%N) - $killed}\")\" >", times, "\n");
  std::ofstream(dir / "kill.sh") << script;
  ASSERT_EQ(std::system(cat("bash ", dir / "kill.sh").c_str()), 0);
  std::istringstream result(slurp(times));
  int code = -1;
  double seconds = -1;
  result >> code >> seconds;
  const std::string output = slurp(out), errors = slurp(err);
  std::cout << "job ended " << seconds << " s after rank 1 was killed (exit " << code << ")\n";
  ASSERT_NE(output.find("rank 1 pid"), std::string::npos) << output << errors;
  EXPECT_NE(code, 124) << "the job hung: " << errors;
  EXPECT_NE(code, 0) << errors;
  EXPECT_GE(seconds, 0.0);
  EXPECT_LT(seconds, 60.0);
  // Open MPI's line: "mpirun noticed that process rank 1 with PID N on node HOST exited on signal 9 (Killed)."
  EXPECT_NE(errors.find("rank 1"), std::string::npos) << errors;
  EXPECT_NE(errors.find(this_host()), std::string::npos) << errors;
  // Rank 0 is gone too (within seconds of the launcher), not left spinning.
  const int pid0 = std::stoi(output.substr(output.find("rank 0 pid ") + 11));
  const auto alive = [pid0] {
    const std::string stat = slurp(cat("/proc/", pid0, "/stat"));
    const size_t paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
  };
  for (int i = 0; i < 100 && alive(); ++i) ::usleep(100000);
  EXPECT_FALSE(alive()) << "rank 0 (pid " << pid0 << ") still runs 10 s after the job ended";
#endif
}

TEST(DistJob, LauncherAndMpiMustAgree) {
#ifndef BERTPERF_HAVE_MPI
  GTEST_SKIP() << "built without MPI";
#else
  // A PMI launcher said two tasks, but MPI started as a singleton: two independent single-rank trainings would
  // follow, so it is refused.
  const Job job = run_probe("env PMI_SIZE=2", "check", 60);
  EXPECT_EQ(job.code, 2) << job.out << job.err;
  EXPECT_NE(job.err.find("dist_probe: error: this process is one of 2 tasks (PMI_SIZE=2) but MPI sees 1 rank"),
            std::string::npos)
      << job.err;
  // srun said two tasks and gave no PMIx or PMI contact (no --mpi plugin): refused before MPI_Init, which would fail
  // in many lines.
  const Job srun = run_probe("env SLURM_STEP_NUM_TASKS=2", "check", 60);
  EXPECT_EQ(srun.code, 2) << srun.out << srun.err;
  EXPECT_EQ(srun.err, "dist_probe: error: this process is one of several tasks (SLURM_STEP_NUM_TASKS=2) but srun "
                      "gave it no PMIx or PMI contact, so MPI cannot join the tasks: run srun --mpi=pmix\n");
#endif
}

TEST(DistJob, SrunIdentityMustAgreeWithMpi) {
#ifndef BERTPERF_HAVE_MPI
  GTEST_SKIP() << "built without MPI";
#else
  // srun's account of a one-task step, given to a process that MPI starts as a world of one: what agrees is taken,
  // and each disagreement is refused with one line naming the variable.
  const std::string step = "env SLURM_STEP_NUM_TASKS=1 SLURM_NTASKS=1 SLURM_STEP_NUM_NODES=1 SLURM_LOCALID=0 ";
  const Job ok = run_probe(step + "SLURM_PROCID=0 SLURM_NODEID=0", "check", 60);
  EXPECT_EQ(ok.code, 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("rank=0 size=1 local_rank=0 local_size=1 node=0 nodes=1"), std::string::npos) << ok.out;
  for (const auto& [env, message] : std::vector<std::pair<std::string, std::string>>{
           {"SLURM_PROCID=1 SLURM_NODEID=0", "SLURM_PROCID: the launcher says this process's rank is 1 but MPI says 0"},
           {"SLURM_PROCID=0 SLURM_NODEID=1", "SLURM_NODEID: the launcher says node 1 but MPI sees 1 node"},
           {"SLURM_PROCID=0 SLURM_NODEID=0 SLURM_LOCALID=1", "SLURM_LOCALID: the launcher says the local rank is 1 but MPI says 0"},
           {"SLURM_PROCID=0 SLURM_NODEID=0 SLURM_STEP_NUM_NODES=2", "SLURM_STEP_NUM_NODES: the launcher says the number of nodes is 2 but MPI says 1"},
           {"SLURM_PROCID=0 SLURM_NODEID=0 SLURM_NTASKS=2", "SLURM_NTASKS: the launcher says the number of ranks is 2 but MPI says 1"},
           {"SLURM_PROCID=zero", "SLURM_PROCID: 'zero' is not a count"}}) {
    const Job job = run_probe(step + env, "check", 60);
    EXPECT_EQ(job.code, 2) << env << ": " << job.out << job.err;
    EXPECT_NE(job.err.find("dist_probe: error: " + message), std::string::npos) << env << ": " << job.err;
    EXPECT_EQ(std::count(job.err.begin(), job.err.end(), '\n'), 1) << job.err;
  }
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

#ifdef BERTPERF_HAVE_NCCL
// The device part of a GPU backend as far as a reducer needs it: CUDA events on the legacy default stream, which the
// test's plain cudaMemcpy calls are ordered with.
class DefaultStreamDevice final : public Device {
 public:
  DefaultStreamDevice() { caps_.asynchronous = true, caps_.host_memory = false; }
  const Capabilities& capabilities() const override { return caps_; }
  void* allocate(size_t, MemoryKind) override { throw InternalError("not used by the reducer"); }
  void deallocate(void*, MemoryKind) noexcept override {}
  void upload(void*, const void*, size_t) override { throw InternalError("not used by the reducer"); }
  void download(void*, const void*, size_t) override { throw InternalError("not used by the reducer"); }
  void copy(void*, const void*, size_t) override { throw InternalError("not used by the reducer"); }
  void fill_zero(void*, size_t) override { throw InternalError("not used by the reducer"); }
  void convert(void*, DType, const void*, DType, size_t) override { throw InternalError("not used by the reducer"); }
  void synchronize() override { cudaDeviceSynchronize(); }
  std::unique_ptr<Event> make_event() override { return std::make_unique<CudaEvent>(); }
  void record(Event& e) override { cudaEventRecord(static_cast<cudaEvent_t>(e.native()), nullptr); }
  void wait(Event& e) override { cudaStreamWaitEvent(nullptr, static_cast<cudaEvent_t>(e.native()), 0); }
  void host_wait(Event& e) override { cudaEventSynchronize(static_cast<cudaEvent_t>(e.native())); }

 private:
  struct CudaEvent final : Event {
    cudaEvent_t event = nullptr;
    CudaEvent() { cudaEventCreateWithFlags(&event, cudaEventDisableTiming); }
    ~CudaEvent() override { cudaEventDestroy(event); }
    void* native() override { return event; }
  };
  Capabilities caps_;
};
#endif

// The NCCL reducer on one GPU: a communicator of one rank, bucketed on its own stream, gives back what it was handed
// (the sum over one rank) and sums partial norms. The device check runs it where a GPU is present.
TEST(NcclReducer, OneGpuSmoke) {
#ifndef BERTPERF_HAVE_NCCL
  GTEST_SKIP() << "built without NCCL (it needs the CUDA toolkit, NCCL and MPI)";
#else
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no CUDA device here";
  auto dist = DistContext::single();
  DefaultStreamDevice device;
  const size_t n = 300001;
  const auto reducer = make_nccl_reducer(device, *dist, DType::F32,
                                         {.algorithm = ReduceAlgorithm::BUCKETED, .bucket_mb = 0.25}, 0, n);
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
