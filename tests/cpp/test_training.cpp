// Training as a whole, on small learnable data: the loss falls; a run is bit-identical when
// repeated in one process and across processes; on cpu-async (the cpu backend's work queued as on a GPU: capture,
// reading ahead, events; with and without random delays) it gives the cpu backend's losses, eval and checkpoint,
// bit for bit at the same shapes (every batch at full capacity, "static_shapes") and within fp32 rounding of the
// cpu backend at the batches' own sizes; cpu-bf16's FP8 twin tracks fp64 within FP8's precision, and a run of it
// resumed from its checkpoint equals the uninterrupted run; a training step allocates nothing after the first (after
// the captures, where the backend captures; on cpu, cpu-async, cpu-bf16 and its FP8 twin); bad configs, bad data
// and a NaN loss each end `bertperf train` with one line and a non-zero exit.
#include <gtest/gtest.h>

#include <link.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <new>
#include <sstream>

#include "harness/reader_plan.h"
#include "harness/train_config.h"
#include "harness/train_session.h"
#include "harness/train_stack.h"
#include "model/checkpoint.h"
#include "optim/lr_schedule.h"
#include "registry/registry.h"
#include "input_error.h"
#include "staged_steps.h"
#include "synthetic_data.h"

// Counts every operator new and aligned_alloc (the backends' buffers, core/buffer.h) in this test program while
// `g_count_allocations` is set; an operator new called from inside the oneDNN library is counted apart.
static std::atomic<bool> g_count_allocations{false};
static std::atomic<long> g_allocations{0}, g_onednn_allocations{0};
// The executable segments of the oneDNN library, once it is loaded (onednn_text()).
struct TextRange {
  uintptr_t lo = 0, hi = 0;
};
static TextRange g_onednn_text[8];
static std::atomic<int> g_onednn_ranges{0};
static bool from_onednn(uintptr_t address) {
  for (int i = 0; i < g_onednn_ranges; ++i)
    if (address >= g_onednn_text[i].lo && address < g_onednn_text[i].hi) return true;
  return false;
}
void* operator new(std::size_t n) {
  if (g_count_allocations)
    ++(from_onednn(reinterpret_cast<uintptr_t>(__builtin_return_address(0))) ? g_onednn_allocations : g_allocations);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
extern "C" void* __libc_memalign(size_t alignment, size_t n);  // glibc's, which its aligned_alloc calls
extern "C" void* aligned_alloc(size_t alignment, size_t n) {
  if (g_count_allocations) ++g_allocations;
  return __libc_memalign(alignment, n);
}
// These replace the global pair, so free() does match the malloc() above; GCC cannot see that.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace bertperf {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / cat("bertperf_test_", name, "_", ::getpid());
  fs::remove_all(dir);
  return dir;
}

std::vector<double> losses(const TrainConfig& config, uint64_t seed, int steps) {
  const auto dist = DistContext::single();
  TrainSession session(config, seed, *dist);
  std::vector<double> out;
  session.train_until(int64_t(steps) * config.global_batch_size(),
                      [&](const TrainProgress& p) { out.push_back(p.last_loss); });
  return out;
}

struct Command {
  int status;
  std::string out, err;
};

Command run_bertperf(const std::string& args, const fs::path& dir) {
  const std::string out = (dir / "stdout.txt").string(), err = (dir / "stderr.txt").string();
  const std::string command = cat(BERTPERF_BINARY_DIR, "/bin/bertperf ", args, " >", out, " 2>", err);
  const int raw = std::system(command.c_str());
  auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, slurp(out), slurp(err)};
}

size_t count_lines(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

// Backend blocks: the cpu backend at the batches' own sizes and at their full capacity (the shapes of a backend
// that captures), and cpu-async, the cpu backend's work queued on a worker thread, also with random delays of up to
// 300 us before each piece of work (widening the windows in which a missing wait would show).
const char* const kCpu = R"({"name": "cpu", "threads": 1})";
const char* const kCpuStatic = R"({"name": "cpu", "threads": 1, "static_shapes": true})";
const char* const kCpuAsync = R"({"name": "cpu-async", "threads": 1})";
const char* const kCpuAsyncDelayed = R"({"name": "cpu-async", "threads": 1, "delay_us": 300, "delay_seed": 5})";

BackendSpec block(const char* json) { return parse_backend_spec(Json::parse(json), "test"); }

TEST(Training, LossFallsAndAccuracyRisesOnLearnableData) {
  const auto run = testing::write_synthetic_run(scratch("learn"));
  const TrainConfig config = load_train_config(run.config_path);
  const auto dist = DistContext::single();
  TrainSession session(config, 7, *dist);
  const double before = session.evaluate().mlm_accuracy;
  std::vector<double> trace;
  // About 300 steps is where this task's loss starts to fall fast; 500 take a second.
  session.train_until(500 * config.global_batch_size(), [&](const TrainProgress& p) { trace.push_back(p.last_loss); });
  const double after = session.evaluate().mlm_accuracy;
  const double first = (trace[0] + trace[1] + trace[2]) / 3, last = (trace[497] + trace[498] + trace[499]) / 3;
  EXPECT_LT(last, 0.7 * first) << "loss " << first << " -> " << last;
  EXPECT_GT(after, before + 0.2) << "accuracy " << before << " -> " << after;
  fs::remove_all(run.dir);
}

TEST(Training, TwentyStepTrajectoryIsBitIdenticalInOneProcess) {
  const auto run = testing::write_synthetic_run(scratch("repeat"));
  const TrainConfig config = load_train_config(run.config_path);
  const auto a = losses(config, 42, 20), b = losses(config, 42, 20), c = losses(config, 43, 20);
  ASSERT_EQ(a.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(std::memcmp(&a[i], &b[i], sizeof(double)), 0) << "step " << i;
  EXPECT_NE(a, c) << "a different seed must give a different run";
  // cpu-async runs the cpu backend's ops (captured and replayed after the first steps, with random delays) at full
  // capacity: the cpu backend's bits at those shapes.
  TrainConfig at_capacity = config, async = config;
  at_capacity.backend = block(kCpuStatic);
  async.backend = block(kCpuAsyncDelayed);
  const auto s = losses(at_capacity, 42, 20), d = losses(async, 42, 20);
  ASSERT_EQ(d.size(), 20u);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(std::memcmp(&s[i], &d[i], sizeof(double)), 0) << "cpu-async, step " << i;
    EXPECT_NEAR(s[i], a[i], 1e-6 * a[i]) << "full capacity, step " << i;
  }
  fs::remove_all(run.dir);
}

// cpu-bf16 (the CUDA backend's rounding points on the CPU): ten steps of a small BERT with dropout on track the fp64
// oracle within bf16's unit roundoff (2^-9 relative, in the loss: a mean over many tokens, whose rounding errors
// mostly cancel; measured about 1e-4), where fp32 tracks it within 1e-5; they differ from fp32's in every step (the
// rounding is real); and a rerun gives the same bits.
TEST(Training, Bf16TenStepsTrackFp32DifferFromItAndRerunBitIdentically) {
  const auto run = testing::write_synthetic_run(scratch("bf16"));
  TrainConfig config = load_train_config(run.config_path);
  ASSERT_GT(config.model.hidden_dropout_prob, 0.0f);
  ASSERT_GT(config.model.attention_probs_dropout_prob, 0.0f);
  const auto fp32 = losses(config, 42, 10);
  config.backend.name = "cpu-f64";
  const auto fp64 = losses(config, 42, 10);
  config.backend.name = "cpu-bf16";
  const auto bf16 = losses(config, 42, 10), again = losses(config, 42, 10);
  ASSERT_EQ(bf16.size(), 10u);
  constexpr double kBf16UnitRoundoff = 1.0 / 512;
  for (int i = 0; i < 10; ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    EXPECT_EQ(std::memcmp(&bf16[i], &again[i], sizeof(double)), 0) << bf16[i] << " then " << again[i];
    EXPECT_NE(bf16[i], fp32[i]);
    EXPECT_LT(std::fabs(fp32[i] - fp64[i]), 1e-5 * fp64[i]);
    EXPECT_LT(std::fabs(bf16[i] - fp64[i]), kBf16UnitRoundoff * fp64[i]) << "bf16 " << bf16[i] << ", fp64 " << fp64[i];
  }
  fs::remove_all(run.dir);
}

// The FP8 twin (cpu-bf16 with "precision": "fp8") trains the same run within FP8's precision of fp64: its loss
// differs from bf16's (the encoder GEMMs run on quantized operands) but stays within E4M3's unit roundoff (2^-4) of
// the fp64 loss at every step, and a rerun gives the same bits (the scales and amax histories start afresh).
TEST(Training, Fp8TwinTenStepsTrackFp64AndRerunBitIdentically) {
  const auto run = testing::write_synthetic_run(scratch("fp8"));
  TrainConfig config = load_train_config(run.config_path);
  config.backend.name = "cpu-f64";
  const auto fp64 = losses(config, 42, 10);
  config.backend.name = "cpu-bf16";
  const auto bf16 = losses(config, 42, 10);
  config.backend = block(R"({"name": "cpu-bf16", "precision": "fp8"})");
  const auto fp8 = losses(config, 42, 10), again = losses(config, 42, 10);
  ASSERT_EQ(fp8.size(), 10u);
  constexpr double kE4m3UnitRoundoff = 1.0 / 16;
  for (int i = 0; i < 10; ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    EXPECT_EQ(std::memcmp(&fp8[i], &again[i], sizeof(double)), 0) << fp8[i] << " then " << again[i];
    EXPECT_NE(fp8[i], bf16[i]);
    EXPECT_LT(std::fabs(fp8[i] - fp64[i]), kE4m3UnitRoundoff * fp64[i]) << "fp8 " << fp8[i] << ", fp64 " << fp64[i];
    std::printf("[ NOTE     ] step %d: loss fp64 %.6f, bf16 %.6f (%+.2e), fp8 %.6f (%+.2e)\n", i, fp64[i], bf16[i],
                (bf16[i] - fp64[i]) / fp64[i], fp8[i], (fp8[i] - fp64[i]) / fp64[i]);
  }
  fs::remove_all(run.dir);
}

TEST(Training, TwentyStepTrajectoryIsIdenticalAcrossProcesses) {
  const auto run = testing::write_synthetic_run(scratch("processes"));
  const Command first = run_bertperf("train --config " + run.config_path + " --seed 42 --steps 20", run.dir);
  const Command second = run_bertperf("train --config " + run.config_path + " --seed 42 --steps 20", run.dir);
  ASSERT_EQ(first.status, 0) << first.err;
  ASSERT_EQ(second.status, 0) << second.err;
  EXPECT_EQ(count_lines(first.out), 20u);
  EXPECT_EQ(first.out, second.out);
  // The printed losses (9 significant digits: exact for fp32) equal this process's trajectory.
  const auto in_process = losses(load_train_config(run.config_path), 42, 20);
  std::istringstream lines(first.out);
  std::string line;
  for (int i = 0; std::getline(lines, line); ++i) {
    char expected[64];
    std::snprintf(expected, sizeof expected, "loss %.9g ", in_process[i]);
    EXPECT_NE(line.find(expected), std::string::npos) << line << " vs " << expected;
  }
  fs::remove_all(run.dir);
}

// `bertperf train` with eval and a checkpoint prints the same lines on cpu-async as on the cpu backend at the same
// shapes, with and without random delays, and saves the same parameters, bit for bit; the cpu backend at the
// batches' own sizes rounds its products over tokens differently, within fp32 rounding.
TEST(Training, CpuAsyncTrainsAndEvaluatesAsTheCpuBackendBitForBit) {
  const fs::path dir = scratch("async");
  struct Run {
    const char* name;
    const char* backend;
    Command command = {};
    std::unique_ptr<FlatTensors> params = {};
  };
  Run runs[] = {{"cpu-static", kCpuStatic}, {"cpu-async", kCpuAsync}, {"delayed", kCpuAsyncDelayed}, {"cpu", kCpu}};
  std::unique_ptr<TensorTable> table;
  for (Run& r : runs) {
    const auto run =
        testing::write_synthetic_run(dir / r.name, {{"backend", nlohmann::ordered_json::parse(r.backend)}});
    const std::string checkpoint = (dir / r.name / "params.h5").string();
    r.command = run_bertperf("train --config " + run.config_path + " --seed 42 --steps 12 --eval --save " + checkpoint,
                             run.dir);
    ASSERT_EQ(r.command.status, 0) << r.name << ": " << r.command.err;
    if (!table) table = std::make_unique<TensorTable>(bert_parameter_table(load_train_config(run.config_path).model));
    r.params = std::make_unique<FlatTensors>(*table);
    load_checkpoint(*r.params, checkpoint);
  }
  const Run& want = runs[0];
  EXPECT_EQ(count_lines(want.command.out), 13u) << want.command.out;
  EXPECT_NE(want.command.out.find("eval samples 64 mlm_accuracy"), std::string::npos) << want.command.out;
  for (const Run* r : {&runs[1], &runs[2]}) {
    EXPECT_EQ(r->command.out, want.command.out) << r->name;
    EXPECT_EQ(std::memcmp(r->params->data(), want.params->data(), want.params->size() * sizeof(float)), 0)
        << r->name << ": the checkpoints differ";
  }
  double worst = 0;
  for (size_t i = 0; i < want.params->size(); ++i)
    worst = std::max(worst, std::fabs(double(runs[3].params->data()[i]) - want.params->data()[i]));
  EXPECT_LT(worst, 1e-5) << "the cpu backend at the batches' own sizes";
  fs::remove_all(dir);
}

// The first training batch of a config's data, as the trainer reads it with seed 0.
Batch first_batch(const TrainConfig& config, bool pad_predictions = true) {
  ReaderOptions options = reader_plan(config, DataSet::TRAIN, 0, 1).options;
  options.pad_predictions = pad_predictions;
  PretrainingReader reader(options);
  Batch batch;
  EXPECT_TRUE(reader.next(batch));
  return batch;
}

// The first `n` training batches of a config's data, as the trainer reads them with seed 0.
std::vector<Batch> first_batches(const TrainConfig& config, int n) {
  PretrainingReader reader(reader_plan(config, DataSet::TRAIN, 0, 1).options);
  std::vector<Batch> batches(n);
  for (Batch& b : batches) EXPECT_TRUE(reader.next(b));
  return batches;
}

// The training stack of a config on one rank, from the parameters of seed 1.
struct StepParts {
  std::unique_ptr<DistContext> dist = DistContext::single();
  TrainStack stack;

  StepParts(const TrainConfig& config, BatchCapacity capacity, int micro_batches = 1,
            ClipMode clip = ClipMode::PER_MICRO_BATCH)
      : stack(spec(config, capacity, micro_batches, clip), *dist) {}

  static TrainStackSpec spec(const TrainConfig& config, BatchCapacity capacity, int micro_batches, ClipMode clip) {
    TrainStackSpec s = stack_spec(config, 1, capacity);
    s.micro_batches = micro_batches;
    s.clip = clip;
    return s;
  }
};

// No host wait in a step (harness/train_step.h): steps launched one after another, each next batch staged between
// them as a session stages it, wait for nothing on the stepping thread until their records are read, and then once;
// the records read after seven steps are those read after each step, bit for bit, with the step count and the
// learning rate the host's schedule gives (so the device's schedule is pinned inside the step). On cpu, cpu-bf16 and
// cpu-async with random delays (its worker far behind the host), after three steps (a capture's first two) read one by
// one.
TEST(Training, StepsWaitForNothingUntilTheirRecordsAreRead) {
  const auto run = testing::write_synthetic_run(scratch("no_wait"), {{"lamb", {{"warmup_steps", 4}}}});
  TrainConfig config = load_train_config(run.config_path);
  constexpr int kSteps = 10, kOneByOne = 3;
  const std::vector<Batch> batches = first_batches(config, kSteps);
  for (const char* backend : {kCpu, kCpuAsyncDelayed, R"({"name": "cpu-bf16", "threads": 1, "gemm": "emulated"})"}) {
    SCOPED_TRACE(backend);
    config.backend = block(backend);
    std::vector<StepStats> each;
    {
      StepParts parts(config, batches[0].capacity);
      testing::StagedSteps staged(parts.stack, batches);
      for (int i = 0; i < kSteps; ++i) each.push_back(staged.run(i));
    }
    StepParts parts(config, batches[0].capacity);
    testing::StagedSteps staged(parts.stack, batches);
    std::vector<StepStats> got;
    for (int i = 0; i < kOneByOne; ++i) got.push_back(staged.run(i));
    const int64_t before = Device::host_waits_of_this_thread();
    for (int i = kOneByOne; i < kSteps; ++i) staged.launch(i);
    EXPECT_EQ(Device::host_waits_of_this_thread() - before, 0) << "the stepping thread waited for the device";
    for (const StepStats& s : parts.stack.step().read()) got.push_back(s);
    EXPECT_EQ(Device::host_waits_of_this_thread() - before, 1) << "reading the records is one wait";
    ASSERT_EQ(got.size(), size_t(kSteps));
    for (int i = 0; i < kSteps; ++i) {
      EXPECT_EQ(std::memcmp(&got[i].loss, &each[i].loss, sizeof(LossStats)), 0) << "step " << i;
      EXPECT_EQ(got[i].grad_norm, each[i].grad_norm) << "step " << i;
      EXPECT_TRUE(got[i].finite() && each[i].finite()) << "step " << i;
      EXPECT_EQ(got[i].updates, i);
      EXPECT_EQ(got[i].learning_rate, static_cast<float>(learning_rate(config.lamb, i))) << "step " << i;
      EXPECT_EQ(each[i].learning_rate, got[i].learning_rate) << "step " << i;
    }
    EXPECT_LT(got[1].learning_rate, got[3].learning_rate) << "the warmup must show in the learning rates";
  }
  fs::remove_all(run.dir);
}

// A step that is not finite ends `bertperf train` at that step whether the host reads the step records after every
// step or every 16, on cpu and on cpu-async (captured): the same steps printed, the same one-line error naming the
// step. A learning rate of 1e6 makes
// the weights overflow after a few steps (LAMB's trust ratio makes each update about 1e6 times the weights).
TEST(Training, NonFiniteStepInTheRingEndsTheRunAtItsStep) {
  std::vector<Command> runs;
  for (const char* name : {"cpu", "cpu-async"})
    for (int slots : {1, 16}) {
      const fs::path dir = scratch(cat("diverge_", name, "_", slots));
      const auto run = testing::write_synthetic_run(
          dir, {{"lamb", {{"learning_rate", 1e6}}}, {"backend", {{"name", name}, {"record_slots", slots}}}});
      runs.push_back(run_bertperf("train --config " + run.config_path + " --steps 30", dir));
      const Command& c = runs.back();
      SCOPED_TRACE(cat(name, ", ", slots, " slots"));
      EXPECT_EQ(c.status, 3) << c.err;
      EXPECT_EQ(count_lines(c.err), 1u) << c.err;
      EXPECT_NE(c.err.find("at step"), std::string::npos) << c.err;
      EXPECT_GE(count_lines(c.out), 2u) << "the run must diverge after some finite steps for this test to mean much";
      EXPECT_LT(count_lines(c.out), 16u) << "the run must diverge inside the first ring of steps";
      fs::remove_all(dir);
    }
  for (size_t i = 0; i < runs.size(); i += 2) {  // each backend's 16 slots against its 1
    EXPECT_EQ(runs[i + 1].out, runs[i].out) << "run " << i;
    EXPECT_EQ(runs[i + 1].err, runs[i].err) << "run " << i;
  }
}

// A step that is not finite ends the run at its own step, and the weights a diverged run is evaluated on
// (timed_run.cpp: a diverged run logs its eval_accuracy where it stopped) must be those of that step, however many
// steps the host had launched behind it before it read their records: the steps after it in the ring update nothing.
// A NaN count weight in the second batch makes its loss and gradient NaN (a transient divergence: the batches after
// it are finite), so the third and fourth steps would update the weights if they were let.
TEST(Training, StepsLaunchedAfterANonFiniteStepUpdateNothing) {
  const auto run = testing::write_synthetic_run(scratch("halt"));
  TrainConfig config = load_train_config(run.config_path);
  constexpr int kSteps = 4, kBad = 1;
  std::vector<Batch> batches = first_batches(config, kSteps);
  batches[kBad].mlm_weights[0] = std::numeric_limits<float>::quiet_NaN();
  for (const char* backend : {kCpu, kCpuAsyncDelayed}) {
    SCOPED_TRACE(backend);
    config.backend = block(backend);
    std::vector<float> stopped;  // the weights where a run that reads every step's record stops
    {
      StepParts parts(config, batches[0].capacity);
      testing::StagedSteps staged(parts.stack, batches);
      for (int i = 0; i <= kBad; ++i) EXPECT_EQ(staged.run(i).finite(), i != kBad) << "step " << i;
      FlatTensors params(parts.stack.table());
      parts.stack.params().download(params);
      stopped.assign(params.data(), params.data() + params.size());
    }
    StepParts parts(config, batches[0].capacity);
    testing::StagedSteps staged(parts.stack, batches);
    for (int i = 0; i < kSteps; ++i) staged.launch(i);
    const std::vector<StepStats> records = parts.stack.step().read();
    ASSERT_EQ(records.size(), size_t(kSteps));
    EXPECT_TRUE(records[0].finite());
    for (int i = kBad; i < kSteps; ++i) EXPECT_FALSE(records[i].finite()) << "step " << i << " updated the weights";
    FlatTensors ring(parts.stack.table());
    parts.stack.params().download(ring);
    EXPECT_EQ(std::memcmp(ring.data(), stopped.data(), stopped.size() * sizeof(float)), 0)
        << "the steps launched after the non-finite one changed the weights";
  }
  fs::remove_all(run.dir);
}

// A resumed FP8 run quantizes as the uninterrupted one: six steps in one go equal, bit for bit (losses, gradient
// norms, the FP8 state at the end), three steps, a checkpoint, and three more on a new stack started from it (the
// same batches, the same step numbers). The learning rate is 0, so the parameters stay put: a checkpoint carries the
// parameters and the FP8 scaling state but not LAMB's moments (no checkpoint here does), and the FP8 state is what
// is under test, with an amax history of 2 so both its rows matter. Resuming from the same parameters without the
// FP8 state (scales 1 again) must differ, or the test could not fail. A run without FP8, and an FP8 run with another
// history length, refuse the checkpoint in one line.
TEST(Training, Fp8RunResumedFromItsCheckpointEqualsTheUninterruptedRun) {
  const fs::path dir = scratch("fp8_resume");
  const auto run = testing::write_synthetic_run(dir);
  TrainConfig config = load_train_config(run.config_path);
  config.backend = block(R"({"name": "cpu-bf16", "threads": 1, "precision": "fp8", "fp8_history": 2})");
  config.lamb.learning_rate = 0;
  constexpr int kSteps = 6, kFirst = 3;
  const std::vector<Batch> batches = first_batches(config, kSteps);
  struct Trace {
    std::vector<StepStats> steps;
    std::unique_ptr<FlatTensors> fp8;
  };
  // Steps [first, kSteps) on a stack from `config`, then its checkpoint at `save` (if any).
  auto train = [&](const TrainConfig& c, int first, int last, const std::string& save = "") {
    StepParts parts(c, batches[0].capacity);
    testing::StagedSteps staged(parts.stack, {batches.begin() + first, batches.begin() + last});
    Trace t;
    for (int i = first; i < last; ++i) t.steps.push_back(staged.run(i));
    t.fp8 = std::make_unique<FlatTensors>(parts.stack.model().fp8_state_table());
    parts.stack.model().download_fp8_state(*t.fp8);
    if (!save.empty()) parts.stack.save_checkpoint(save);
    return t;
  };
  auto same = [](const StepStats& a, const StepStats& b) {
    return std::memcmp(&a.loss, &b.loss, sizeof a.loss) == 0 && std::memcmp(&a.grad_norm, &b.grad_norm, 8) == 0;
  };
  const Trace whole = train(config, 0, kSteps);
  const std::string checkpoint = (dir / "fp8.h5").string(), plain = (dir / "plain.h5").string();
  const Trace head = train(config, 0, kFirst, checkpoint);
  ASSERT_TRUE(has_fp8_state(checkpoint));
  for (int i = 0; i < kFirst; ++i) EXPECT_TRUE(same(head.steps[i], whole.steps[i])) << "step " << i;

  TrainConfig resumed = config;
  resumed.init_checkpoint = checkpoint;
  const Trace tail = train(resumed, kFirst, kSteps);
  for (int i = kFirst; i < kSteps; ++i)
    EXPECT_TRUE(same(tail.steps[i - kFirst], whole.steps[i]))
        << "step " << i << ": loss " << tail.steps[i - kFirst].loss.mlm_loss << ", uninterrupted "
        << whole.steps[i].loss.mlm_loss;
  ASSERT_GT(whole.fp8->size(), 0u);
  EXPECT_EQ(std::memcmp(tail.fp8->data(), whole.fp8->data(), whole.fp8->size() * sizeof(float)), 0);

  {  // the same parameters without the FP8 state: the scales start at 1 again, and the run differs
    const auto dist = DistContext::single();
    TrainStack stack(StepParts::spec(resumed, batches[0].capacity, 1, ClipMode::PER_MICRO_BATCH), *dist);
    FlatTensors params(stack.table());
    stack.params().download(params);
    save_checkpoint(params, plain);
  }
  resumed.init_checkpoint = plain;
  const Trace fresh = train(resumed, kFirst, kSteps);
  EXPECT_FALSE(same(fresh.steps[0], whole.steps[kFirst])) << "resuming without the FP8 state changed nothing";

  auto expect_refused = [&](TrainConfig c, const char* backend, const std::string& what) {
    SCOPED_TRACE(backend);
    c.backend = block(backend);
    c.init_checkpoint = checkpoint;
    testing::expect_input_error([&] { StepParts parts(c, batches[0].capacity); }, {checkpoint, what});
  };
  expect_refused(config, R"({"name": "cpu-bf16", "threads": 1})", "FP8 scaling state");
  expect_refused(config, R"({"name": "cpu-bf16", "threads": 1, "precision": "fp8"})", "fp8/amax_history");
  fs::remove_all(dir);
}

// Finds the oneDNN library's executable segments, where it is loaded (a build with oneDNN, once cpu-bf16 is built).
void find_onednn_text() {
  g_onednn_ranges = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void*) {
        if (!info->dlpi_name || !std::strstr(info->dlpi_name, "libdnnl")) return 0;
        for (int i = 0; i < info->dlpi_phnum && g_onednn_ranges < 8; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
          const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
          g_onednn_text[g_onednn_ranges] = {lo, lo + ph.p_memsz};
          ++g_onednn_ranges;
        }
        return 0;
      },
      nullptr);
}

// After a first step at a shape (which makes the backend's plans: the arena's buffers, cpu-bf16's oneDNN primitives)
// a step allocates nothing: not on cpu, not on cpu-async (whose step is captured at its second and third runs, one
// graph per staging set, and replayed after: queuing and replaying allocate nothing either), not on cpu-bf16 with its
// GEMMs emulated, and on cpu-bf16 with oneDNN's GEMMs nothing of its own. oneDNN's execute builds an argument map and
// an execution context on every call (a few small operator new calls inside libdnnl, freed before it returns), which
// no public oneDNN call avoids: those are counted apart and printed, and must be all there is. The bf16 backends run
// two threads, so the tiles' thread slots are shared out too.
TEST(Training, StepAllocatesNothingAfterTheFirst) {
  const auto run = testing::write_synthetic_run(scratch("alloc"));
  TrainConfig config = load_train_config(run.config_path);
  const Batch batch = first_batch(config);
  const char* const backends[] = {kCpu, kCpuAsync, R"({"name": "cpu-bf16", "threads": 2, "gemm": "emulated"})",
                                  R"({"name": "cpu-bf16", "threads": 2, "gemm": "auto"})",
                                  R"({"name": "cpu-bf16", "threads": 2, "gemm": "auto", "precision": "fp8"})"};
  for (const char* backend : backends) {
    config.backend = block(backend);
    // A ring of two records, so that steps launched without a read fill it (launch() then reads for the caller).
    config.backend.record_slots = 2;
    const bool onednn_may_allocate = std::strstr(backend, "auto") != nullptr;
    for (const ClipMode clip : {ClipMode::PER_MICRO_BATCH, ClipMode::AFTER_REDUCTION}) {
      const std::string what =
          cat(backend, clip == ClipMode::PER_MICRO_BATCH ? ", per micro-batch" : ", after reduction");
      SCOPED_TRACE(what);
      // Two micro-batches, so the accumulation path runs too.
      StepParts parts(config, batch.capacity, 2, clip);
      find_onednn_text();
      TrainStep& step = parts.stack.step();
      // The step as a session runs it: its batches staged through the pipeline (model/batch_pipeline.h).
      testing::StagedSteps staged(parts.stack, {batch, batch}, 2);
      const int64_t warm = parts.stack.backend().capabilities().capture ? 3 : 1;
      for (int64_t i = 0; i < warm; ++i) staged.run(i);
      EXPECT_EQ(step.captured(), parts.stack.backend().capabilities().capture);
      g_allocations = 0;
      g_onednn_allocations = 0;
      g_count_allocations = true;
      for (int64_t i = warm; i < warm + 3; ++i) staged.run(i);
      // As a session runs them: launched without a wait, the records read once (one read by launch() on the way).
      for (int64_t i = warm + 3; i < warm + 6; ++i) staged.launch(i);
      EXPECT_EQ(step.read().size(), 3u);
      g_count_allocations = false;
      EXPECT_EQ(g_allocations.load(), 0);
      if (!onednn_may_allocate) {
        EXPECT_EQ(g_onednn_allocations.load(), 0);
      }
      if (g_onednn_allocations > 0)
        std::printf("[ NOTE     ] %s: %ld allocations inside oneDNN's execute in 6 steps (%s)\n", what.c_str(),
                    g_onednn_allocations.load(), parts.stack.backend().describe().c_str());
    }
  }
  fs::remove_all(run.dir);
}

// Training and eval read batches without the weight-0 prediction slots; the reference's padded
// batch (the form the PyTorch golden test checks) must give the same loss, accuracy and gradients.
TEST(Training, UnpaddedPredictionsGiveThePaddedLossAndGradients) {
  const auto run = testing::write_synthetic_run(scratch("unpadded"));
  const TrainConfig config = load_train_config(run.config_path);
  const Batch padded = first_batch(config, true), unpadded = first_batch(config, false);
  ASSERT_EQ(padded.predictions, padded.capacity.sequences * config.max_predictions);
  ASSERT_LT(unpadded.predictions, padded.predictions) << "the synthetic data must have empty slots";
  for (int i = 0; i < unpadded.predictions; ++i) EXPECT_EQ(unpadded.mlm_weights[i], 1.0f);
  StepParts parts(config, padded.capacity);
  TrainStack& stack = parts.stack;
  BatchStage stage(stack.backend(), padded.capacity);
  const ops::DropoutCounter counter{7, 3, 0};
  auto run_step = [&](const Batch& host, FlatTensors& grads) {
    const DeviceBatch& batch = stage.stage(host, LossWeighting::MEAN);
    stack.model().zero_stats();
    stack.model().forward(batch, stack.params().weights(), true, &counter, 0);
    stack.backend().fill_zero(stack.params().grads(), stack.params().elements() * sizeof(float));
    stack.model().backward(batch, stack.params().weights(), stack.params().grads(), 1.0f);
    stack.params().download_grads(grads);
    return stack.model().read_stats();
  };
  FlatTensors padded_grads(stack.table()), unpadded_grads(stack.table());
  const LossStats a = run_step(padded, padded_grads), b = run_step(unpadded, unpadded_grads);
  EXPECT_NEAR(a.mlm_loss, b.mlm_loss, 1e-6 * std::abs(a.mlm_loss));
  EXPECT_DOUBLE_EQ(a.nsp_loss, b.nsp_loss);
  EXPECT_EQ(a.mlm_correct, b.mlm_correct);
  for (const TensorInfo& t : stack.table().tensors()) {
    const float* x = padded_grads.get(t.name);
    const float* y = unpadded_grads.get(t.name);
    double scale = 0, diff = 0;
    for (size_t i = 0; i < t.numel; ++i) {
      scale = std::max(scale, double(std::abs(x[i])));
      diff = std::max(diff, double(std::abs(x[i] - y[i])));
    }
    EXPECT_LE(diff, 1e-5 * scale + 1e-12) << t.name;
  }
  fs::remove_all(run.dir);
}

TEST(Training, NanLossEndsWithOneLineAndNonZeroExit) {
  const fs::path dir = scratch("nan");
  const TrainConfig clean = load_train_config(testing::write_synthetic_run(dir).config_path);
  const TensorTable table = bert_parameter_table(clean.model);
  FlatTensors params(table);
  bert_init_parameters(params, clean.model, 1);
  params.get("bert/embeddings/LayerNorm/gamma")[0] = std::nanf("");
  save_checkpoint(params, (dir / "nan.h5").string());
  const auto run = testing::write_synthetic_run(dir, {{"init_checkpoint", "nan.h5"}});
  const Command c = run_bertperf("train --config " + run.config_path + " --steps 5", dir);
  EXPECT_NE(c.status, 0);
  EXPECT_EQ(count_lines(c.err), 1u) << c.err;
  EXPECT_NE(c.err.find("NaN"), std::string::npos) << c.err;
  EXPECT_EQ(c.out, "") << "no step may complete with a NaN loss";
  fs::remove_all(dir);
}

// Each broken config: exit status 2 and one line naming the file and the field.
TEST(Training, BadConfigsEndWithOneLineNamingFileAndField) {
  const fs::path dir = scratch("config");
  const auto run = testing::write_synthetic_run(dir);
  std::stringstream text;
  text << std::ifstream(run.config_path).rdbuf();
  const std::string good = text.str();
  struct Case {
    std::string from, to, field;
  };
  const Case cases[] = {
      {"\"seq_len\": 32,", "", "seq_len"},                                  // missing field
      {"\"local_batch_size\": 8", "\"local_batch_size\": \"8\"", "local_batch_size"},  // wrong type
      {"\"packed\": false", "\"packed\": false, \"shuffle\": true", "shuffle"},          // unknown key
      {"\"hidden_size\": 32", "\"hidden_size\": 30", "num_attention_heads"},             // inconsistent
      {"\"epsilon\": 1e-06", "\"epsilon\": -1", "epsilon"},                              // out of range
  };
  for (const Case& k : cases) {
    std::string broken = good;
    const size_t at = broken.find(k.from);
    ASSERT_NE(at, std::string::npos) << k.from;
    broken.replace(at, k.from.size(), k.to);
    const std::string path = (dir / "broken.json").string();
    std::ofstream(path) << broken;
    const Command c = run_bertperf("train --config " + path + " --steps 1", dir);
    EXPECT_EQ(c.status, 2) << k.field << ": " << c.err;
    EXPECT_EQ(count_lines(c.err), 1u) << c.err;
    EXPECT_NE(c.err.find("broken.json"), std::string::npos) << c.err;
    EXPECT_NE(c.err.find(k.field), std::string::npos) << c.err;
  }
  fs::remove_all(dir);
}

// A data file that is not HDF5, and one with a wrong shape: one line naming the file.
TEST(Training, BadDataEndsWithOneLineNamingTheFile) {
  const fs::path dir = scratch("data");
  const auto run = testing::write_synthetic_run(dir);
  std::ofstream(dir / "train.hdf5", std::ios::trunc) << "this is not an HDF5 file\n";
  Command c = run_bertperf("train --config " + run.config_path + " --steps 1", dir);
  EXPECT_EQ(c.status, 2) << c.err;
  EXPECT_EQ(count_lines(c.err), 1u) << c.err;
  EXPECT_NE(c.err.find("train.hdf5"), std::string::npos) << c.err;

  // Sequences longer than the config's seq_len: the shard does not fit the model.
  write_varlength((dir / "train.hdf5").string(), testing::synthetic_sequences(16, 60, 64, 5, 3));
  c = run_bertperf("train --config " + run.config_path + " --steps 1", dir);
  EXPECT_EQ(c.status, 2) << c.err;
  EXPECT_EQ(count_lines(c.err), 1u) << c.err;
  EXPECT_NE(c.err.find("train.hdf5"), std::string::npos) << c.err;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace bertperf
