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

// dist_probe (or another probe) started by `launch` (a launcher and its options, or an environment), killed after
// `limit_s` seconds (then the code is timeout's 124).
[[maybe_unused]] Job run_probe(const std::string& launch, const std::string& mode, int limit_s,
                               const std::string& probe = "dist_probe") {
  TempDir dir("bertperf_dist");
  const std::string out = dir / "out.txt", err = dir / "err.txt";
  const std::string command =
      cat("timeout ", limit_s, " ", launch, " ", BERTPERF_BINARY_DIR, "/bin/", probe, " ", mode, " >", out, " 2>", err);
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
    EXPECT_EQ(f.at("launcher"), "mpirun");
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

// While the MPI transport makes and frees its communicators (a duplicate of the world and its node and cross-node
// splits), the context's own threads make no MPI call (comm/context.cpp: the start-up crash of issue 31). The probe
// counts, through MPI's profiling interface, every call another thread makes while a communicator is being made
// (each such call held open 300 ms, so an unguarded watcher polling every 20 ms is caught every time).
TEST(DistJob, ContextThreadsKeepOutOfCommunicatorSetUp) {
#ifndef BERTPERF_HAVE_MPI
  GTEST_SKIP() << "built without MPI";
#else
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  const Job job = run_probe(kMpirun2, "", 60, "comm_overlap_probe");
  EXPECT_EQ(job.code, 0) << job.out << job.err;
  EXPECT_NE(job.out.find("overlaps=0 ranks=2 nodes=1"), std::string::npos) << job.out << job.err;
#endif
}

namespace {

// read_launch_identity over a table instead of this process's environment.
LaunchIdentity identity_of(const std::map<std::string, std::string>& vars) {
  return read_launch_identity([&](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::string input_error_of(const std::map<std::string, std::string>& vars) {
  try {
    identity_of(vars);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// What launchers set, as their documentation says: Open MPI's mpirun OMPI_COMM_WORLD_{SIZE,RANK,LOCAL_RANK,
// LOCAL_SIZE}; Slurm's srun SLURM_STEP_NUM_TASKS, SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, SLURM_STEP_NUM_NODES,
// and PMIX_RANK with --mpi=pmix; a batch script's own shell SLURM_JOB_ID and SLURM_PROCID but no step.
TEST(LaunchIdentity, ReadsWhatEachLauncherSays) {
  const LaunchIdentity none = identity_of({});
  EXPECT_FALSE(none.launched());
  EXPECT_FALSE(none.several);
  EXPECT_FALSE(none.slurm_allocation);
  EXPECT_FALSE(none.rank.value);

  const LaunchIdentity mpirun = identity_of({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "2"},
                                             {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(mpirun.launcher, Launcher::MPIRUN);
  EXPECT_EQ(mpirun.tasks, 4);
  EXPECT_TRUE(mpirun.several);
  EXPECT_EQ(mpirun.source, "OMPI_COMM_WORLD_SIZE=4");
  EXPECT_EQ(mpirun.rank.value, 2);
  EXPECT_STREQ(mpirun.rank.var, "OMPI_COMM_WORLD_RANK");
  EXPECT_EQ(mpirun.local_rank.value, 0);
  EXPECT_EQ(mpirun.local_size.value, 2);
  EXPECT_FALSE(mpirun.node.value);  // mpirun does not number nodes

  const std::map<std::string, std::string> step = {
      {"SLURM_JOB_ID", "17"},         {"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_NTASKS", "4"},
      {"SLURM_PROCID", "3"},          {"SLURM_LOCALID", "1"},        {"SLURM_NODEID", "1"},
      {"SLURM_STEP_NUM_NODES", "2"},  {"SLURM_NNODES", "5"},         {"PMIX_RANK", "3"}};
  const LaunchIdentity srun = identity_of(step);
  EXPECT_EQ(srun.launcher, Launcher::SRUN);
  EXPECT_STREQ(launcher_name(srun.launcher), "srun");
  EXPECT_EQ(srun.tasks, 4);
  EXPECT_TRUE(srun.slurm_allocation);
  EXPECT_FALSE(srun.srun_without_pmi);
  EXPECT_EQ(srun.rank.value, 3);
  EXPECT_EQ(srun.local_rank.value, 1);
  EXPECT_EQ(srun.node.value, 1);
  EXPECT_EQ(srun.nodes.value, 2);  // the step's nodes, not the allocation's
  EXPECT_STREQ(srun.nodes.var, "SLURM_STEP_NUM_NODES");
  EXPECT_EQ(srun.size.value, 4);
  EXPECT_EQ(srun.size2.value, 4);
  // Without the step's node count, the allocation's.
  auto older = step;
  older.erase("SLURM_STEP_NUM_NODES");
  EXPECT_STREQ(identity_of(older).nodes.var, "SLURM_NNODES");
  // srun without an MPI plugin: no PMIx or PMI contact for several tasks; one task needs none.
  auto bare = step;
  bare.erase("PMIX_RANK");
  EXPECT_TRUE(identity_of(bare).srun_without_pmi);
  bare["PMI_FD"] = "5";
  EXPECT_FALSE(identity_of(bare).srun_without_pmi);
  EXPECT_FALSE(identity_of({{"SLURM_STEP_NUM_TASKS", "1"}}).srun_without_pmi);

  // mpirun inside an srun step: mpirun's account wins.
  auto nested = step;
  nested.insert({{"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_RANK", "5"}});
  const LaunchIdentity inner = identity_of(nested);
  EXPECT_EQ(inner.launcher, Launcher::MPIRUN);
  EXPECT_EQ(inner.tasks, 8);
  EXPECT_EQ(inner.rank.value, 5);
  EXPECT_FALSE(inner.node.value);

  // A batch script's shell is inside an allocation but no launcher started it.
  const LaunchIdentity batch = identity_of({{"SLURM_JOB_ID", "17"}, {"SLURM_PROCID", "0"}, {"SLURM_NNODES", "2"}});
  EXPECT_FALSE(batch.launched());
  EXPECT_TRUE(batch.slurm_allocation);
  EXPECT_FALSE(batch.rank.value);

  // PMI and PMIx alone.
  const LaunchIdentity pmi = identity_of({{"PMI_SIZE", "8"}, {"PMI_RANK", "1"}});
  EXPECT_EQ(pmi.launcher, Launcher::PMI);
  EXPECT_EQ(pmi.tasks, 8);
  EXPECT_TRUE(identity_of({{"PMIX_RANK", "1"}}).several);
  EXPECT_FALSE(identity_of({{"PMIX_RANK", "0"}}).several);
  EXPECT_EQ(identity_of({{"PMIX_RANK", "0"}}).launcher, Launcher::PMIX);

  // Values that are not numbers: one line naming the variable.
  EXPECT_EQ(input_error_of({{"OMPI_COMM_WORLD_SIZE", "0"}}), "OMPI_COMM_WORLD_SIZE: '0' is not a number of tasks");
  EXPECT_EQ(input_error_of({{"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_LOCALID", "x"}}), "SLURM_LOCALID: 'x' is not a count");
  EXPECT_EQ(input_error_of({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "-1"}}),
            "OMPI_COMM_WORLD_RANK: '-1' is not a count");
}

TEST(DistContext, KeepsHowItWasLaunched) {
  ScopedEnv env;
  env.no_launcher();
  env.set("SLURM_JOB_ID", "99");
  const auto dist = DistContext::create();
  EXPECT_FALSE(dist->launch().launched());
  EXPECT_TRUE(dist->launch().slurm_allocation);
  EXPECT_EQ(dist->fewest_local(), 1);
  EXPECT_EQ(dist->most_local(), 1);
}

// The hierarchy's parts: equal, laid out rank by rank (what NCCL's in-place reduce-scatter and all-gather need),
// the remainder left as a tail.
TEST(Parts, EvenSplitAndTheEqualLayout) {
  const EvenSplit ten = even_split(10, 3);
  EXPECT_EQ(ten.parts, (std::vector<FlatRange>{{0, 3}, {3, 6}, {6, 9}}));
  EXPECT_EQ(ten.tail, (FlatRange{9, 10}));
  EXPECT_EQ(equal_part_count(ten.parts), 3u);
  const EvenSplit exact = even_split(12, 4);
  EXPECT_EQ(exact.tail.size(), 0u);
  EXPECT_EQ(equal_part_count(exact.parts), 3u);
  // Fewer elements than ranks: all tail.
  const EvenSplit small = even_split(2, 4);
  EXPECT_EQ(small.tail, (FlatRange{0, 2}));
  EXPECT_EQ(equal_part_count(small.parts), 0u);
  EXPECT_EQ(even_split(7, 1).parts, (std::vector<FlatRange>{{0, 7}}));
  // The sharded update's parts, cut at chunks, are not the equal layout; neither is a part that does not start at 0.
  EXPECT_EQ(equal_part_count(split_flat(100, {0, 10, 25, 40, 70, 90}, 3)), 0u);
  EXPECT_EQ(equal_part_count({{7, 100}}), 0u);
  EXPECT_EQ(equal_part_count({{0, 100}}), 100u);
  EXPECT_EQ(equal_part_count({}), 0u);
}

// 2 nodes x 2 ranks, world ranks 0 1 on node 0 and 2 3 on node 1: the node groups {0,1} {2,3} by local rank, the
// cross groups {0,2} {1,3} by node.
TEST(Groups, SplitsByNodeAndByLocalRank) {
  std::map<std::pair<int, int>, std::vector<std::pair<int, int>>> members;  // (group, color) -> (key, rank)
  for (int rank = 0; rank < 4; ++rank)
    for (Group g : {Group::WORLD, Group::NODE, Group::CROSS}) {
      const GroupSplit s = group_split(g, rank, rank / 2, rank % 2);
      members[{static_cast<int>(g), s.color}].push_back({s.key, rank});
    }
  auto ranks_of = [&](Group g, int color) {
    auto m = members[{static_cast<int>(g), color}];
    std::sort(m.begin(), m.end());  // by key: the order inside the group
    std::vector<int> out;
    for (auto& [key, rank] : m) out.push_back(rank);
    return out;
  };
  EXPECT_EQ(ranks_of(Group::WORLD, 0), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(ranks_of(Group::NODE, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(ranks_of(Group::NODE, 1), (std::vector<int>{2, 3}));
  EXPECT_EQ(ranks_of(Group::CROSS, 0), (std::vector<int>{0, 2}));
  EXPECT_EQ(ranks_of(Group::CROSS, 1), (std::vector<int>{1, 3}));
  EXPECT_EQ(members.size(), 5u);

  EXPECT_NO_THROW(check_uniform_nodes(2, 2));
  try {
    check_uniform_nodes(1, 3);
    FAIL() << "nodes of 1 to 3 ranks were accepted for a hierarchy";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "distributed: reduction: hierarchical reduction needs as many ranks on every node, but nodes have from "
              "1 to 3; use \"allreduce\" or \"bucketed\"");
  }
}

TEST(Reduction, TransportOptionsFollowTheAlgorithm) {
  EXPECT_FALSE(transport_options({}).overlap);
  EXPECT_FALSE(transport_options({}).hierarchy);
  EXPECT_TRUE(transport_options({.algorithm = ReduceAlgorithm::BUCKETED}).overlap);
  EXPECT_FALSE(transport_options({.algorithm = ReduceAlgorithm::BUCKETED, .thread = false}).thread);
  EXPECT_TRUE(transport_options({.algorithm = ReduceAlgorithm::HIERARCHICAL}).hierarchy);
  EXPECT_FALSE(transport_options({.algorithm = ReduceAlgorithm::HIERARCHICAL}).overlap);
  // A sharded reducer reduce-scatters the whole buffer at finish.
  EXPECT_FALSE(transport_options({.algorithm = ReduceAlgorithm::BUCKETED, .shard_optimizer = true}).overlap);
}
