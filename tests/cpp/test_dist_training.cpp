// Data-parallel training equals one rank with the same global batch (dist_train_probe.cpp feeds both the same
// micro-batches): over 20 steps of a tiny BERT with dropout on, every step's loss within 1e-6 relative and every
// parameter within 1e-5, for each reduction (plain all-reduce, bucketed and overlapped with the backward,
// hierarchical, sharded LAMB) in the clip modes it runs in. Under `mpirun -np 2` on this host, and as 2 hosts x 2
// ranks over TCP between network namespaces (scripts/netns_hosts.sh), skipped with the reason where this machine
// does not permit them. cpu-bf16 under `mpirun -np 2` too, at bf16's precision. Two ranks on cpu-async (the backend's
// work queued on a thread, with random delays) train as one rank on the cpu backend, with MPI waiting for the
// backend's events before it touches a gradient, and with the whole step captured, MPI's collectives queued on the
// backend, bit for bit as the same ranks eager.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/errors.h"
#include "synthetic_data.h"
#include "temp_dir.h"

using namespace bertperf;
using bertperf::testing::TempDir;

namespace {

namespace fs = std::filesystem;

struct Command {
  int code;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string slurp_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

Command shell(const std::string& command, const fs::path& dir) {
  const std::string out = (dir / "out.txt").string(), err = (dir / "err.txt").string();
  const int raw = std::system(cat(command, " >", out, " 2>", err).c_str());
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, slurp(out), slurp(err)};
}

bool have_mpirun() { return std::system("command -v mpirun >/dev/null 2>&1") == 0; }

struct Case {
  const char* name;
  const char* reduction;  // the "reduction" block
  bool after_reduction;   // clip mode
  const char* described;  // what the probe's "reduction:" line must say
};

const Case kCases[] = {
    {"allreduce", R"({"algorithm": "allreduce"})", false, "all-reduce over MPI"},
    {"allreduce-after", R"({"algorithm": "allreduce"})", true, "all-reduce over MPI"},
    {"bucketed", R"({"algorithm": "bucketed", "bucket_mb": 0.01})", true, "bucketed all-reduce over MPI"},
    {"hierarchical", R"({"algorithm": "hierarchical"})", true, "hierarchical over MPI"},
    {"sharded", R"({"algorithm": "allreduce", "shard_optimizer": true})", false, "sharded (ZeRO-1)"},
    {"sharded-after", R"({"algorithm": "allreduce", "shard_optimizer": true})", true, "sharded (ZeRO-1)"},
};

// Train data, benchmark.json and configs for the tiny BERT (tiny_bert.h, with dropout).
class TrainFiles {
 public:
  explicit TrainFiles(const fs::path& dir) : dir_(dir) {
    bertperf::testing::write_tiny_benchmark(dir, 16, 1);
    write_varlength((dir / "train.hdf5").string(), bertperf::testing::synthetic_sequences(640, 32, 64, 5, 1));
    write_varlength((dir / "eval.hdf5").string(), bertperf::testing::synthetic_sequences(16, 32, 64, 5, 2));
  }

  // A config of `ranks` x `accum` micro-batches of 8 sequences.
  std::string config(const std::string& name, int ranks, int accum, bool after_reduction, const std::string& reduction,
                     const std::string& backend = R"({"name": "cpu", "threads": 1})") const {
    return bertperf::testing::write_tiny_config(
        dir_ / (name + ".json"),
        {{"batch", {{"grad_accum_steps", accum}, {"ranks", ranks}}},
         {"backend", nlohmann::ordered_json::parse(backend)},
         {"distributed",
          {{"clip", after_reduction ? "after_reduction" : "per_micro_batch"},
           {"reduction", nlohmann::ordered_json::parse(reduction)}}}});
  }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

struct Trained {
  std::vector<double> losses;
  std::vector<float> params;
  std::string err;
};

constexpr int kSteps = 20;

// Two ranks on this machine, under mpirun.
const char* const kTwoRanks = "mpirun -np 2 --oversubscribe --allow-run-as-root --mca mpi_yield_when_idle 1";

Trained train(const std::string& launch, const std::string& config, const fs::path& dir, const std::string& name,
              int steps = kSteps) {
  const std::string out = (dir / (name + ".params")).string();
  const Command c = shell(cat("timeout 120 ", launch, " ", BERTPERF_BINARY_DIR, "/bin/dist_train_probe ", config, " ",
                              steps, " ", out),
                          dir);
  EXPECT_EQ(c.code, 0) << name << ": " << c.out << c.err;
  Trained t;
  t.err = c.err;
  std::istringstream lines(c.out);
  for (std::string line; std::getline(lines, line);) {
    int step = 0;
    double loss = 0;
    if (std::sscanf(line.c_str(), "step %d loss %lf", &step, &loss) == 2) t.losses.push_back(loss);
  }
  std::ifstream file(out, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  t.params.resize(bytes.size() / sizeof(float));
  std::memcpy(t.params.data(), bytes.data(), t.params.size() * sizeof(float));
  return t;
}

// One rank's 20 steps of 4 micro-batches, plain all-reduce: clipped per micro-batch ([0]) and after the reduction
// ([1]), the runs a job of several ranks must train as.
std::array<Trained, 2> one_rank_runs(const TrainFiles& setup) {
  return {train("", setup.config("one", 1, 4, false, R"({"algorithm": "allreduce"})"), setup.dir(), "one"),
          train("", setup.config("one-after", 1, 4, true, R"({"algorithm": "allreduce"})"), setup.dir(), "one-after")};
}

// How many parameters of `a` and `b` (of one size) differ in their bits.
size_t differing_params(const Trained& a, const Trained& b) {
  size_t differ = 0;
  for (size_t i = 0; i < a.params.size(); ++i) differ += std::memcmp(&a.params[i], &b.params[i], sizeof(float)) != 0;
  return differ;
}

// Losses within loss_rtol relative, parameters within param_atol (fp32: one rank's and the ranks' sums differ only in
// the order the fp32 gradients are added).
void expect_same_training(const Trained& one, const Trained& many, const char* name, double loss_rtol = 1e-6,
                          double param_atol = 1e-5) {
  SCOPED_TRACE(name);
  ASSERT_EQ(one.losses.size(), size_t(kSteps));
  ASSERT_EQ(many.losses.size(), size_t(kSteps)) << many.err;
  double worst_loss = 0;
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_LE(std::fabs(many.losses[s] - one.losses[s]), loss_rtol * std::fabs(one.losses[s]))
        << "step " << s + 1 << ": " << many.losses[s] << " vs one rank's " << one.losses[s];
    worst_loss = std::max(worst_loss, std::fabs(many.losses[s] - one.losses[s]) / std::fabs(one.losses[s]));
  }
  ASSERT_EQ(many.params.size(), one.params.size());
  ASSERT_FALSE(one.params.empty());
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < one.params.size(); ++i)
    if (std::fabs(double(many.params[i]) - one.params[i]) > worst) {
      worst = std::fabs(double(many.params[i]) - one.params[i]);
      at = i;
    }
  EXPECT_LE(worst, param_atol) << "parameter " << at << ": " << many.params[at] << " vs one rank's " << one.params[at];
  std::cout << name << ": loss within " << worst_loss << " relative, parameters within " << worst << "\n";
}

// One rank's 20 steps, then each case launched by `launch` as `ranks` ranks of 4 / ranks micro-batches on `nodes`
// nodes.
void run_cases(const std::string& launch, int ranks, const fs::path& dir, int nodes = 1) {
  TrainFiles setup(dir);
  const std::array<Trained, 2> one = one_rank_runs(setup);
  // The 20 steps moved the parameters well past the tolerance (so a match is not a matter of doing little).
  const Trained init = train("", setup.config("init", 1, 4, false, R"({"algorithm": "allreduce"})"), dir, "init", 0);
  double moved = 0;
  for (size_t i = 0; i < init.params.size() && i < one[0].params.size(); ++i)
    moved = std::max(moved, std::fabs(double(one[0].params[i]) - init.params[i]));
  ASSERT_GT(moved, 1e-2);
  for (const Case& c : kCases) {
    const Trained many =
        train(launch, setup.config(c.name, ranks, 4 / ranks, c.after_reduction, c.reduction), dir, c.name);
    EXPECT_NE(many.err.find(c.described), std::string::npos) << c.name << ": " << many.err;
    if (std::string(c.name) == "hierarchical") {  // the hierarchy's groups follow the nodes
      EXPECT_NE(many.err.find(cat("inside each of ", nodes, " node", nodes == 1 ? "" : "s", " of ", ranks / nodes,
                                  " ranks")),
                std::string::npos)
          << many.err;
    }
    expect_same_training(one[c.after_reduction], many, c.name);
  }
}

}  // namespace

TEST(DistTraining, TwoRanksEqualOneForEveryReduction) {
#ifndef BERTPERF_HAVE_MPI
  GTEST_SKIP() << "built without MPI";
#else
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  TempDir dir("bertperf_dist_training");
  run_cases(kTwoRanks, 2, dir.path);
#endif
}

// cpu-bf16 (bf16 activations and weight copy, fp32 master weights and gradients, which the MPI reducer sums as on
// cpu): 2 ranks of 2 micro-batches against one rank of 4, plain all-reduce and sharded LAMB (whose ranks each
// update half the master weights and bf16 copy, then gather them). Their gradient sums differ only in the order fp32
// adds them, but a master weight that moves by one fp32 ulp can round its bf16 copy the other way (a change of 2^-8
// of that weight in the forward), so the bounds are looser than fp32's: losses within 1e-4 relative and parameters
// within 1e-4 (the 20 steps move them by over 1e-2; a lost or doubled micro-batch moves them by far more). Measured
// on an AVX512-BF16 machine: losses within 2e-16, parameters within 1.2e-7 (no copy rounded the other way).
TEST(DistTraining, TwoRanksEqualOneOnCpuBf16) {
#ifndef BERTPERF_HAVE_MPI
  GTEST_SKIP() << "built without MPI";
#else
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  TempDir dir("bertperf_dist_bf16");
  TrainFiles setup(dir.path);
  const std::string bf16 = R"({"name": "cpu-bf16", "threads": 1})", plain = R"({"algorithm": "allreduce"})";
  const Trained one = train("", setup.config("bf16-one", 1, 4, false, plain, bf16), dir.path, "bf16-one");
  const Trained init = train("", setup.config("bf16-init", 1, 4, false, plain, bf16), dir.path, "bf16-init", 0);
  double moved = 0;
  for (size_t i = 0; i < init.params.size() && i < one.params.size(); ++i)
    moved = std::max(moved, std::fabs(double(one.params[i]) - init.params[i]));
  ASSERT_GT(moved, 1e-2);
  for (const Case& c : {kCases[0], kCases[4]}) {
    const std::string name = cat("bf16-", c.name);
    const Trained many = train(kTwoRanks, setup.config(name, 2, 2, false, c.reduction, bf16), dir.path, name);
    EXPECT_NE(many.err.find(c.described), std::string::npos) << name << ": " << many.err;
    expect_same_training(one, many, name.c_str(), 1e-4, 1e-4);
  }
#endif
}

// The reducers on an asynchronous backend that queues no host functions ("host_functions": false, so the step stays
// eager): MPI reads a gradient bucket once the backend's event after the backward's writes has passed (on the
// communication thread for the bucketed reducer), and the sum, the sharded norms and the gather wait for all the work
// before them. cpu-async with random delays makes a missing wait show as wrong numbers.
TEST(DistTraining, TwoRanksOnCpuAsyncEqualOneOnCpu) {
#ifndef BERTPERF_HAVE_MPI
  GTEST_SKIP() << "built without MPI";
#else
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  TempDir dir("bertperf_dist_async");
  TrainFiles setup(dir.path);
  const std::array<Trained, 2> one = one_rank_runs(setup);
  const std::string async =
      R"({"name": "cpu-async", "threads": 1, "delay_us": 200, "delay_seed": 4, "host_functions": false})";
  for (const Case& c : kCases) {
    if (c.name != std::string("allreduce") && c.name != std::string("bucketed") &&
        c.name != std::string("sharded-after"))
      continue;
    const Trained many = train(kTwoRanks,
                               setup.config(cat("async-", c.name), 2, 2, c.after_reduction, c.reduction, async),
                               dir.path, cat("async-", c.name));
    EXPECT_NE(many.err.find(c.described), std::string::npos) << c.name << ": " << many.err;
    EXPECT_NE(many.err.find("step: eager: the backend queues no host functions"), std::string::npos) << many.err;
    expect_same_training(one[c.after_reduction], many, cat("cpu-async ", c.name).c_str());
  }
#endif
}

// The whole step captured across ranks: on cpu-async the MPI transport queues each collective on the backend's queue
// as a host function (comm/transport.h), so the step from the first forward to the LAMB update, the reducer's
// collectives included, is captured at the second and third steps and replayed from then on. With random delays on
// the queue, 2 ranks captured over 20 steps equal the same 2 ranks eager (capture off) bit for bit: every step's
// loss and every parameter, for the plain, bucketed, hierarchical and sharded reductions (the same ops on the same
// data in the same order, whether replayed or issued), and train as one rank on cpu does (to fp32's order of sums).
// A capture that dropped, reordered or ran a collective early changes the numbers; the eager run says why it is
// eager.
TEST(DistTraining, TwoRanksCapturedOnCpuAsyncEqualEagerBitForBit) {
#ifndef BERTPERF_HAVE_MPI
  GTEST_SKIP() << "built without MPI";
#else
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  TempDir dir("bertperf_dist_captured");
  TrainFiles setup(dir.path);
  const std::array<Trained, 2> one = one_rank_runs(setup);
  for (const Case& c : kCases) {
    const std::string name = c.name;
    if (name != "allreduce" && name != "bucketed" && name != "hierarchical" && name != "sharded-after") continue;
    Trained runs[2];
    for (const bool capture : {true, false}) {
      const std::string backend = cat(R"({"name": "cpu-async", "threads": 1, "delay_us": 100, "delay_seed": )",
                                      capture ? 5 : 6, R"(, "capture": )", capture ? "true" : "false", "}");
      const std::string run = cat(capture ? "captured-" : "eager-", name);
      runs[capture] = train(kTwoRanks, setup.config(run, 2, 2, c.after_reduction, c.reduction, backend), dir.path, run);
    }
    const Trained &captured = runs[1], &eager = runs[0];
    EXPECT_NE(captured.err.find("step: captured from the second step, the reducer's collectives included"),
              std::string::npos)
        << name << ": " << captured.err;
    EXPECT_NE(captured.err.find("rank 1: replayed captured steps"), std::string::npos) << name << ": " << captured.err;
    EXPECT_NE(eager.err.find("step: eager: capture is off in the config"), std::string::npos) << name << ": "
                                                                                              << eager.err;
    EXPECT_EQ(eager.err.find("replayed captured steps"), std::string::npos) << name << ": " << eager.err;
    ASSERT_EQ(captured.losses.size(), size_t(kSteps)) << name << ": " << captured.err;
    ASSERT_EQ(eager.losses.size(), size_t(kSteps)) << name << ": " << eager.err;
    for (int s = 0; s < kSteps; ++s)
      EXPECT_EQ(captured.losses[s], eager.losses[s]) << name << ", step " << s + 1;
    ASSERT_EQ(captured.params.size(), eager.params.size()) << name;
    ASSERT_FALSE(captured.params.empty()) << name;
    EXPECT_EQ(differing_params(captured, eager), 0u)
        << name << ": parameters that differ between the captured and the eager run";
    expect_same_training(one[c.after_reduction], captured, cat("captured ", name).c_str());  // and train as one rank
  }
#endif
}

// A micro-batch that is not finite on one rank skips the update on every rank, as one rank running every rank's
// micro-batches would skip it (harness/train_step.h: the step's non-finite count is summed across ranks before the
// update), and the steps after it update nothing (its record halts them). Two ranks, a NaN count weight in rank 1's
// micro-batch of step 2 of 3, each clip mode, on cpu and captured on cpu-async: the weights are those of the same two
// ranks after one step, bit for bit. (Clipped per micro-batch, rank 1's NaN gradient adds nothing to the sum, so a
// rank 0 that decided alone would make the update.)
TEST(DistTraining, ANonFiniteMicroBatchOnOneRankSkipsTheUpdateOnEveryRank) {
#ifndef BERTPERF_HAVE_MPI
  GTEST_SKIP() << "built without MPI";
#else
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  TempDir dir("bertperf_dist_nonfinite");
  TrainFiles setup(dir.path);
  for (const char* backend : {R"({"name": "cpu", "threads": 1})", R"({"name": "cpu-async", "threads": 1})"}) {
    for (const bool after : {false, true}) {
      const std::string name = cat(std::string(backend).find("async") != std::string::npos ? "async" : "cpu",
                                   after ? "-after" : "-per-micro-batch");
      const std::string config = setup.config(name, 2, 1, after, R"({"algorithm": "allreduce"})", backend);
      const Trained one_step = train(kTwoRanks, config, dir.path, name + "-one", 1);
      const Trained nan = train(cat(kTwoRanks, " -x BERTPERF_PROBE_NAN=1:1"), config, dir.path, name + "-nan", 3);
      ASSERT_EQ(nan.losses.size(), 3u) << name << ": " << nan.err;
      ASSERT_EQ(one_step.losses.size(), 1u) << name << ": " << one_step.err;
      EXPECT_EQ(nan.losses[0], one_step.losses[0]) << name;
      EXPECT_FALSE(std::isfinite(nan.losses[1])) << name << ": the NaN micro-batch did not reach the loss";
      ASSERT_EQ(nan.params.size(), one_step.params.size()) << name;
      ASSERT_FALSE(nan.params.empty()) << name;
      EXPECT_EQ(differing_params(nan, one_step), 0u)
          << name << ": parameters updated after the step that was not finite";
    }
  }
#endif
}

// The session around a step captured across ranks (`bertperf train`, 2 ranks on cpu-async with random delays): the
// printed losses and learning rates, the evaluation at the end and the saved checkpoint equal those of the same run
// with capture off, byte for byte.
TEST(DistTraining, TrainCommandCapturedAcrossRanksEvaluatesAndSavesAsEager) {
#ifndef BERTPERF_HAVE_MPI
  GTEST_SKIP() << "built without MPI";
#else
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  TempDir dir("bertperf_dist_captured_cli");
  TrainFiles setup(dir.path);
  Command runs[2];
  for (const bool capture : {true, false}) {
    const std::string name = capture ? "captured" : "eager";
    const std::string backend = cat(R"({"name": "cpu-async", "threads": 1, "delay_us": 100, "delay_seed": 7, )",
                                    R"("capture": )", capture ? "true" : "false", "}");
    const std::string config =
        setup.config(name, 2, 2, true, R"({"algorithm": "bucketed", "bucket_mb": 0.01})", backend);
    runs[capture] = shell(cat("timeout 120 ", kTwoRanks, " ", BERTPERF_BINARY_DIR, "/bin/bertperf train --config ",
                              config, " --seed 3 --steps 8 --eval --save ", (dir.path / (name + ".h5")).string()),
                          dir.path);
    ASSERT_EQ(runs[capture].code, 0) << runs[capture].out << runs[capture].err;
  }
  EXPECT_NE(runs[1].err.find("step: captured from the second step, the reducer's collectives included"),
            std::string::npos)
      << runs[1].err;
  EXPECT_NE(runs[0].err.find("step: eager: capture is off in the config"), std::string::npos) << runs[0].err;
  EXPECT_NE(runs[1].out.find("step 8 "), std::string::npos) << runs[1].out;
  EXPECT_NE(runs[1].out.find("eval samples "), std::string::npos) << runs[1].out;
  EXPECT_EQ(runs[1].out, runs[0].out);
  const std::string saved[2] = {slurp_bytes(dir.path / "eager.h5"), slurp_bytes(dir.path / "captured.h5")};
  ASSERT_FALSE(saved[0].empty());
  EXPECT_TRUE(saved[0] == saved[1]) << "the checkpoints differ";
#endif
}

// The session's path (`bertperf train`, TrainSession): under mpirun -np 2, sharded LAMB and the bucketed reducer
// print the same losses as the plain all-reduce (the same rows dealt to the same ranks), and the sharded run logs
// about half the optimizer state per rank.
TEST(DistTraining, TrainCommandLogsTheReductionAndShardedState) {
#ifndef BERTPERF_HAVE_MPI
  GTEST_SKIP() << "built without MPI";
#else
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  TempDir dir("bertperf_dist_train_cli");
  TrainFiles setup(dir.path);
  auto run = [&](const char* name, const char* reduction) {
    const std::string config = setup.config(name, 2, 2, true, reduction);
    return shell(cat("timeout 120 ", kTwoRanks, " ", BERTPERF_BINARY_DIR, "/bin/bertperf train --config ", config,
                     " --seed 3 --steps 5"),
                 dir.path);
  };
  auto losses = [](const std::string& out) {
    std::vector<double> l;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);)
      if (auto at = line.find(" loss "); at != std::string::npos) l.push_back(std::stod(line.substr(at + 6)));
    return l;
  };
  const Command plain = run("plain", R"({"algorithm": "allreduce"})");
  const Command sharded = run("sharded", R"({"shard_optimizer": true})");
  const Command bucketed = run("bucketed", R"({"algorithm": "bucketed", "bucket_mb": 0.01})");
  for (const Command* c : {&plain, &sharded, &bucketed}) ASSERT_EQ(c->code, 0) << c->out << c->err;
  const auto want = losses(plain.out);
  ASSERT_EQ(want.size(), 5u) << plain.out;
  for (const Command* c : {&sharded, &bucketed}) {
    const auto got = losses(c->out);
    ASSERT_EQ(got.size(), 5u) << c->out;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(std::fabs(got[i] - want[i]), 1e-6 * std::fabs(want[i])) << i;
  }
  EXPECT_NE(bucketed.err.find("reduction: bucketed all-reduce over MPI"), std::string::npos) << bucketed.err;
  // "LAMB state X MiB on this rank (Y MiB unsharded)" from each rank.
  for (int r = 0; r < 2; ++r) {
    const std::string tag = cat("rank ", r, ": reduction: sharded (ZeRO-1)");
    const size_t at = sharded.err.find(tag);
    ASSERT_NE(at, std::string::npos) << sharded.err;
    double mine = 0, full = 0;
    ASSERT_EQ(std::sscanf(sharded.err.c_str() + sharded.err.find("LAMB state ", at),
                          "LAMB state %lf MiB on this rank (%lf MiB unsharded)", &mine, &full), 2)
        << sharded.err;
    EXPECT_NEAR(mine / full, 0.5, 0.1) << sharded.err;
  }
#endif
}

// Two hosts of two ranks each, Open MPI over TCP between network namespaces.
TEST(DistTraining, TwoHostsOfTwoRanksEqualOneForEveryReduction) {
#ifndef BERTPERF_HAVE_MPI
  GTEST_SKIP() << "built without MPI";
#else
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not installed";
  TempDir dir("bertperf_dist_hosts");
  const std::string script = cat(BERTPERF_SOURCE_DIR, "/scripts/netns_hosts.sh");
  const int id = static_cast<int>(getpid());
  const std::string env =
      cat("env NETNS_PREFIX=bp", id % 1000000, " NETNS_SUBNET=10.", 200 + id % 50, ".", id / 50 % 250, " ");
  const Command check = shell(env + script + " check", dir.path);
  if (check.code != 0) GTEST_SKIP() << "network namespaces: " << check.out << check.err;
  struct Hosts {  // taken down however the test ends
    std::string down;
    ~Hosts() { std::system(down.c_str()); }
  } hosts{env + script + " down >/dev/null 2>&1"};
  const Command up = shell(env + script + " up 2", dir.path);
  ASSERT_EQ(up.code, 0) << up.out << up.err;
  run_cases(cat(env, "MPIRUN_ARGS='--mca mpi_yield_when_idle 1' ", script, " mpirun 2 2"), 4, dir.path, 2);
#endif
}
