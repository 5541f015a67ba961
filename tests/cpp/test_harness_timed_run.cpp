// The timed run's event sequence, driven by scripted training trajectories instead of a model so
// that every ending (target reached, sample limit, non-finite loss) is cheap to produce. The logs
// are also written to $BERTPERF_HARNESS_LOG_DIR when set: tests/python/test_harness_compliance.py
// runs the official compliance checker on them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <hdf5.h>

#include "harness/timed_run.h"
#include "model/bert_params.h"

namespace {

namespace fs = std::filesystem;
using namespace bertperf;
using mllog::Value;

const fs::path kSource = BERTPERF_SOURCE_DIR;

// Trains in whole global batches and reports the scripted accuracies, one per evaluation.
class ScriptedRun final : public TrainingRun {
 public:
  ScriptedRun(const TrainConfig& config, std::vector<double> accuracies, int nan_after_evals)
      : config_(config), accuracies_(std::move(accuracies)), nan_after_evals_(nan_after_evals) {}

  std::vector<std::string> tensor_names() const override {
    std::vector<std::string> names;
    const TensorTable table = bert_parameter_table(config_.model);
    for (const auto& t : table.tensors()) names.push_back(t.name);
    return names;
  }
  TrainProgress train_until(int64_t target, const std::function<void(const TrainProgress&)>& on_step,
                            int64_t max_steps) override {
    while (progress_.samples_trained < target && progress_.optimizer_steps < max_steps) {
      progress_.samples_trained += config_.global_batch_size();
      ++progress_.optimizer_steps;
      progress_.last_loss = 2.0;
      if (nan_after_evals_ >= 0 && evals_ >= nan_after_evals_) {
        progress_.last_loss = std::nan("");
        progress_.non_finite_loss = true;
        break;
      }
      if (on_step) on_step(progress_);
    }
    return progress_;
  }
  EvalResult evaluate() override {
    EvalResult r;
    r.mlm_accuracy = accuracies_[std::min<size_t>(evals_++, accuracies_.size() - 1)];
    r.samples = eval_samples >= 0 ? eval_samples : config_.eval_samples;
    return r;
  }
  int64_t eval_sequences() const override { return eval_samples >= 0 ? eval_samples : config_.eval_samples; }
  LibraryVersions library_versions() const override { return {{"Scripted BLAS", "1.2.3"}}; }

  int64_t eval_samples = -1;  // sequences each evaluation reports; -1: the benchmark's number

 private:
  TrainConfig config_;
  std::vector<double> accuracies_;
  int nan_after_evals_;
  int evals_ = 0;
  TrainProgress progress_;
};

struct Line {
  std::string event_type, key;
  Value value, metadata;
};

class TimedRunLog : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = load_train_config((kSource / "benchmarks/bert/mlperf/a100_1x8.json").string(), /*check_data=*/false);
    // The 8-GPU system's global batch of 448 on the one rank these tests run on (timed_run refuses a job of another
    // size than the config's).
    config_.local_batch_size *= config_.ranks;
    config_.ranks = 1;
    system_ = load_system_description((kSource / "systems/a100_1x8.json").string());
    dir_ = fs::temp_directory_path() / ("bertperf_test_timed_run_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  TimedRunResult run(const std::string& name, std::vector<double> accuracies, int nan_after_evals = -1,
                     std::optional<uint64_t> seed = 12345, int64_t eval_samples = -1) {
    const fs::path path = dir_ / (name + ".txt");
    mllog::Logger log(mllog::Logger::Options{.to_stdout = false, .file = path.string(), .name_space = "", .rank = 0, .file_label = ""});
    TimedRunOptions options;
    options.seed = seed;
    options.progress = false;
    options.provenance = provenance_;
    auto factory = [&](const TrainConfig& c, uint64_t) {
      auto scripted = std::make_unique<ScriptedRun>(c, accuracies, nan_after_evals);
      scripted->eval_samples = eval_samples;
      return scripted;
    };
    const auto dist = DistContext::single();
    const TimedRunResult result = timed_run(config_, system_, log, options, *dist, factory);
    log.close_file();
    if (const char* keep = std::getenv("BERTPERF_HARNESS_LOG_DIR"))
      fs::copy_file(path, fs::path(keep) / (name + ".txt"), fs::copy_options::overwrite_existing);
    lines_.clear();
    std::ifstream in(path);
    for (std::string text; std::getline(in, text);) {
      EXPECT_EQ(text.rfind(":::MLLOG {", 0), 0u) << text;
      const Value record = Value::parse(text.substr(9));
      lines_.push_back({record["event_type"], record["key"], record["value"], record["metadata"]});
    }
    return result;
  }

  std::vector<const Line*> find(const std::string& key) const {
    std::vector<const Line*> out;
    for (const auto& l : lines_)
      if (l.key == key) out.push_back(&l);
    return out;
  }
  size_t index_of(const std::string& key) const {
    for (size_t i = 0; i < lines_.size(); ++i)
      if (lines_[i].key == key) return i;
    return lines_.size();
  }

  TrainConfig config_;
  SystemDescription system_;
  fs::path dir_;
  std::vector<Line> lines_;
  // What `bertperf run-once` hands every run (cli/build_info.h); the official checker must pass these lines too.
  std::optional<RunProvenance> provenance_ =
      RunProvenance{"0123456789abcdef0123456789abcdef01234567", false, "git", "benchmarks/bert/mlperf/a100_1x8.json"};
};

TEST_F(TimedRunLog, SuccessSequence) {
  const TimedRunResult r = run("success", {0.40, 0.65, 0.71, 0.7205});
  EXPECT_TRUE(r.success);
  EXPECT_EQ(r.status, "success");
  EXPECT_EQ(r.evaluations, 4);
  EXPECT_EQ(r.samples_trained, 4 * 150080);

  ASSERT_GE(lines_.size(), 400u);
  EXPECT_EQ(lines_.front().key, "cache_clear");
  EXPECT_EQ(lines_.front().value, true);
  EXPECT_EQ(lines_[1].key, "init_start");
  EXPECT_EQ(lines_.back().key, "run_stop");
  EXPECT_EQ(lines_.back().metadata["status"], "success");
  EXPECT_EQ(lines_.back().event_type, "INTERVAL_END");

  // Keys that must appear exactly once, with their values.
  const std::map<std::string, Value> once = {
      {"submission_benchmark", "bert"}, {"submission_org", "bertperf"}, {"submission_division", "closed"},
      {"submission_status", "research"}, {"submission_platform", "a100_1x8"}, {"seed", 12345},
      {"global_batch_size", 448}, {"gradient_accumulation_steps", 1}, {"opt_base_learning_rate", 0.00035},
      {"opt_lamb_epsilon", 1e-6}, {"opt_epsilon", 1e-6}, {"opt_learning_rate_training_steps", 7100},
      {"opt_learning_rate_warmup_steps", 0}, {"num_warmup_steps", 0}, {"start_warmup_step", 0},
      {"opt_lamb_beta_1", 0.9}, {"opt_lamb_beta_2", 0.999}, {"opt_lamb_weight_decay_rate", 0.01},
      {"max_sequence_length", 512}, {"max_predictions_per_seq", 76}, {"opt_name", "lamb"},
      {"init_stop", nullptr}, {"run_start", nullptr}, {"block_start", nullptr}, {"block_stop", nullptr},
      {"epoch_start", nullptr}, {"epoch_stop", nullptr},
      {"train_samples", 4 * 150080}, {"eval_samples", 10000}, {"run_stop", nullptr}};
  for (const auto& [key, value] : once) {
    const auto found = find(key);
    ASSERT_EQ(found.size(), 1u) << key;
    EXPECT_EQ(found[0]->value, value) << key;
    EXPECT_EQ(found[0]->value.is_number_float(), value.is_number_float()) << key << ": integers stay integers";
  }
  // The order the rules need.
  const size_t init_stop = index_of("init_stop");
  for (const char* key : {"submission_division", "submission_benchmark", "seed", "global_batch_size",
                          "weights_initialization"})
    EXPECT_LT(index_of(key), init_stop) << key;
  EXPECT_LT(init_stop, index_of("run_start"));
  EXPECT_LT(index_of("run_start"), index_of("block_start"));
  EXPECT_LT(index_of("block_stop"), index_of("train_samples"));
  EXPECT_LT(index_of("eval_samples"), index_of("run_stop"));

  // One weights_initialization per BERT-large tensor, each name once.
  std::set<std::string> tensors;
  for (const Line* l : find("weights_initialization")) tensors.insert(l->metadata["tensor"].get<std::string>());
  EXPECT_EQ(find("weights_initialization").size(), 398u);
  EXPECT_EQ(tensors.size(), 398u);
  EXPECT_TRUE(tensors.count("bert/embeddings/word_embeddings"));
  EXPECT_TRUE(tensors.count("cls/seq_relationship/output_bias"));

  // Each eval: tracked_stats, eval_start, eval_stop, eval_accuracy at the same sample count.
  const auto accuracies = find("eval_accuracy");
  ASSERT_EQ(accuracies.size(), 4u);
  const std::vector<double> expected = {0.40, 0.65, 0.71, 0.7205};
  for (size_t k = 0; k < 4; ++k) {
    const int64_t samples = int64_t(k + 1) * 150080;
    EXPECT_EQ(accuracies[k]->metadata["epoch_num"], samples);
    EXPECT_EQ(accuracies[k]->value, expected[k]);
    EXPECT_EQ(find("eval_start")[k]->metadata["epoch_num"], samples);
    EXPECT_EQ(find("eval_stop")[k]->metadata["epoch_num"], samples);
    EXPECT_EQ(find("tracked_stats")[k]->metadata["epoch_num"], samples);
    EXPECT_GT(find("tracked_stats")[k]->value["throughput"].get<double>(), 0);
  }
  EXPECT_EQ(find("block_start")[0]->metadata["first_epoch_num"], 1);
  EXPECT_EQ(find("block_start")[0]->metadata["epoch_count"], 1);
  EXPECT_EQ(find("epoch_start")[0]->metadata["epoch_num"], 0);
  EXPECT_EQ(find("epoch_stop")[0]->metadata["epoch_num"], 4 * 150080);
  EXPECT_LT(index_of("run_start"), index_of("epoch_start"));
  EXPECT_LT(index_of("block_stop"), index_of("epoch_stop"));
}

// Where the run comes from (harness/provenance.h): the build's commit and the config after the hyperparameters, the
// library versions once the run is built, all before init_stop.
TEST_F(TimedRunLog, ProvenanceLines) {
  run("provenance", {0.7205});
  const auto commit = find("bertperf_commit");
  ASSERT_EQ(commit.size(), 1u);
  EXPECT_EQ(commit[0]->value, "0123456789abcdef0123456789abcdef01234567");
  EXPECT_EQ(commit[0]->metadata["dirty"], false);
  EXPECT_EQ(commit[0]->metadata["source"], "git");
  ASSERT_EQ(find("bertperf_config").size(), 1u);
  EXPECT_EQ(find("bertperf_config")[0]->value, "benchmarks/bert/mlperf/a100_1x8.json");
  const auto versions = find("bertperf_library_versions");
  ASSERT_EQ(versions.size(), 1u);
  const Value& v = versions[0]->value;
  // The host's libraries first (HDF5 as this build's header names it), then the run's.
  EXPECT_EQ(v["HDF5"], cat(H5_VERS_MAJOR, ".", H5_VERS_MINOR, ".", H5_VERS_RELEASE));
  EXPECT_EQ(v["Scripted BLAS"], "1.2.3");
  EXPECT_TRUE(v.contains("compiler"));
  EXPECT_EQ(v.begin().key(), "HDF5");
  EXPECT_EQ((--v.end()).key(), "Scripted BLAS");
  const size_t init_stop = index_of("init_stop");
  EXPECT_LT(index_of("max_samples"), index_of("bertperf_commit"));
  EXPECT_LT(index_of("bertperf_config"), index_of("bertperf_library_versions"));
  EXPECT_LT(index_of("bertperf_library_versions"), init_stop);

  // Without provenance (a harness test, a library user): the versions alone.
  provenance_.reset();
  run("no_provenance", {0.7205});
  EXPECT_TRUE(find("bertperf_commit").empty());
  EXPECT_TRUE(find("bertperf_config").empty());
  EXPECT_EQ(find("bertperf_library_versions").size(), 1u);
}

TEST(Provenance, ConfigPathsAreRelativeToTheRepositoryInsideIt) {
  const fs::path repo = fs::temp_directory_path() / ("bertperf_test_provenance_" + std::to_string(::getpid()));
  fs::create_directories(repo / "benchmarks" / "bert" / "mini");
  std::ofstream(repo / "benchmarks" / "bert" / "mini" / "cpu_2c.json") << "{}";
  const std::string inside = (repo / "benchmarks" / "bert" / "mini" / "cpu_2c.json").string();
  EXPECT_EQ(config_for_log(inside, repo.string()), "benchmarks/bert/mini/cpu_2c.json");
  EXPECT_EQ(config_for_log(inside, (repo / "").string()), "benchmarks/bert/mini/cpu_2c.json");
  // Through a path with "..": the same file.
  EXPECT_EQ(config_for_log((repo / "benchmarks" / ".." / "benchmarks" / "bert" / "mini" / "cpu_2c.json").string(),
                           repo.string()),
            "benchmarks/bert/mini/cpu_2c.json");
  // Outside the repository (or no repository): the absolute path.
  const fs::path other = repo.string() + "_other";
  EXPECT_EQ(config_for_log(inside, other.string()), fs::weakly_canonical(inside).generic_string());
  EXPECT_EQ(config_for_log(inside, ""), fs::weakly_canonical(inside).generic_string());
  fs::remove_all(repo);
}

TEST_F(TimedRunLog, AbortsAtMaxSamples) {
  const TimedRunResult r = run("aborted", {0.5});
  EXPECT_FALSE(r.success);
  EXPECT_EQ(r.status, "aborted");
  EXPECT_NE(r.abort_reason.find("not reached"), std::string::npos) << r.abort_reason;
  // The last eval point is capped at max_samples (4.5M), rounded up to a whole batch.
  EXPECT_EQ(r.samples_trained, (4500000 + 447) / 448 * 448);
  EXPECT_EQ(find("eval_accuracy").size(), 30u);
  EXPECT_EQ(lines_.back().metadata["status"], "aborted");
  EXPECT_EQ(find("train_samples")[0]->value, r.samples_trained);
}

TEST_F(TimedRunLog, AbortsOnNonFiniteLoss) {
  const TimedRunResult r = run("nan", {0.4}, /*nan_after_evals=*/1);
  EXPECT_EQ(r.status, "aborted");
  EXPECT_NE(r.abort_reason.find("non-finite"), std::string::npos) << r.abort_reason;
  // The scheduled eval, then the one where the loss diverged (no tracked_stats for that interval).
  EXPECT_EQ(find("eval_accuracy").size(), 2u);
  EXPECT_EQ(find("tracked_stats").size(), 1u);
  EXPECT_EQ(lines_.back().metadata["status"], "aborted");
  EXPECT_EQ(find("train_samples").size(), 1u);
}

// Diverged before the first eval point: the run is still evaluated where it stopped, so the log has
// the eval_accuracy the checkers need (test_harness_compliance.py: it fails on convergence only).
TEST_F(TimedRunLog, NonFiniteLossBeforeFirstEvalStillLogsAccuracy) {
  const TimedRunResult r = run("nan_first", {0.02}, /*nan_after_evals=*/0);
  EXPECT_EQ(r.status, "aborted");
  EXPECT_NE(r.abort_reason.find("non-finite"), std::string::npos) << r.abort_reason;
  ASSERT_EQ(find("eval_accuracy").size(), 1u);
  EXPECT_EQ(find("eval_accuracy")[0]->value, 0.02);
  EXPECT_EQ(find("eval_start").size(), 1u);
  EXPECT_EQ(find("eval_stop").size(), 1u);
  EXPECT_LT(index_of("eval_accuracy"), index_of("run_stop"));
  EXPECT_EQ(lines_.back().metadata["status"], "aborted");
}

// Without max_samples anywhere, a run is train_steps optimizer steps, whatever a step holds.
TEST_F(TimedRunLog, StopsAtTrainStepsWithoutMaxSamples) {
  config_ = load_train_config((kSource / "benchmarks/bert/mini/cpu_2c.json").string(), false);
  system_ = load_system_description((kSource / "systems/cpu_2c.json").string());
  config_.max_steps = 7;
  config_.max_samples = 1000 * config_.global_batch_size();
  config_.eval_interval_samples = config_.global_batch_size() * 3;
  const TimedRunResult r = run("step_limit", {0.01});
  EXPECT_EQ(r.status, "aborted");
  EXPECT_EQ(r.samples_trained, 7 * config_.global_batch_size());
  EXPECT_NE(r.abort_reason.find("7 optimizer steps"), std::string::npos) << r.abort_reason;
}

TEST_F(TimedRunLog, FreshSeedsDiffer) {
  const TimedRunResult a = run("seed_a", {0.8}, -1, std::nullopt);
  const TimedRunResult b = run("seed_b", {0.8}, -1, std::nullopt);
  EXPECT_NE(a.seed, b.seed);
  EXPECT_LT(a.seed, uint64_t(1) << 31);
  EXPECT_EQ(find("seed")[0]->value, b.seed);
}

TEST_F(TimedRunLog, MiniIsOpenDivision) {
  config_ = load_train_config((kSource / "benchmarks/bert/mini/cpu_2c.json").string(), false);
  system_ = load_system_description((kSource / "systems/cpu_2c.json").string());
  const TimedRunResult r = run("mini", {0.1, 0.35});
  EXPECT_TRUE(r.success);
  EXPECT_EQ(find("submission_division")[0]->value, "open");
  EXPECT_EQ(find("eval_samples")[0]->value, config_.eval_samples);
}

TEST_F(TimedRunLog, EvalSamplesIsWhatWasEvaluated) {
  run("long_eval", {0.8}, -1, 1, /*eval_samples=*/10500);
  EXPECT_EQ(find("eval_samples")[0]->value, 10500);
}

// An eval set smaller than the benchmark's is refused at init, naming the file and both counts.
TEST_F(TimedRunLog, RefusesTooSmallEvalSet) {
  for (int64_t n : {int64_t(0), int64_t(9999)}) {
    try {
      run("short_eval", {0.8}, -1, 1, /*eval_samples=*/n);
      ADD_FAILURE() << "an eval set of " << n << " sequences was accepted";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(config_.eval_file), std::string::npos) << what;
      EXPECT_NE(what.find(cat("holds ", n, " sequences")), std::string::npos) << what;
      EXPECT_NE(what.find("10000"), std::string::npos) << what;
    }
    std::ifstream in(dir_ / "short_eval.txt");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("init_start"), std::string::npos);
    EXPECT_EQ(text.find("run_start"), std::string::npos);  // refused before the clock starts
  }
}

// A job of another number of ranks than the config's batch.ranks is refused as a training session refuses it: one
// line naming the config, before anything is logged.
TEST_F(TimedRunLog, RefusesAJobOfAnotherSize) {
  config_.ranks = 2;
  config_.local_batch_size /= 2;
  try {
    run("two_ranks", {0.8});
    ADD_FAILURE() << "a config of 2 ranks ran on a world of one";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), config_.source + ": the config asks for 2 ranks (batch.ranks) but this job has 1; "
                                                      "launch it with mpirun -np 2");
  }
  std::ifstream in(dir_ / "two_ranks.txt");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "");
}

}  // namespace
