// Hyperparameter configs, benchmark definitions and system descriptions: every shipped file loads,
// the MLPerf eval-cadence rule gives the published intervals, and each kind of bad input gives one
// line naming the file and the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "harness/system_description.h"
#include "harness/train_config.h"

namespace {

namespace fs = std::filesystem;
using namespace bertperf;

const fs::path kSource = BERTPERF_SOURCE_DIR;

TEST(EvalCadence, MatchesTheRulesTable) {
  // Intervals listed with the training rules' formula (256..2048 -> 150k, 3072/4096 -> 175k, ...).
  const EvalCadence mlperf;
  for (int64_t gbs : {256, 448, 2048}) EXPECT_EQ(mlperf.interval(gbs), 150000) << gbs;
  EXPECT_EQ(mlperf.interval(3072), 175000);
  EXPECT_EQ(mlperf.interval(4096), 175000);
  EXPECT_EQ(mlperf.interval(4608), 200000);
  EXPECT_EQ(mlperf.interval(8192), 225000);
  EXPECT_EQ(mlperf.interval(12288), 275000);
  EXPECT_EQ(mlperf.interval(16384), 325000);
}

TEST(EvalCadence, EvalPointsRoundUpToWholeBatches) {
  // NVIDIA's published eval points: GBS 448 -> 150080, 300160; GBS 4608 -> 202752, 400896.
  EXPECT_EQ(eval_point_samples(1, 150000, 448), 150080);
  EXPECT_EQ(eval_point_samples(2, 150000, 448), 300160);
  EXPECT_EQ(eval_point_samples(1, 200000, 4608), 202752);
  EXPECT_EQ(eval_point_samples(2, 200000, 4608), 400896);
  EXPECT_EQ(eval_point_samples(1, 175000, 3072), 175104);  // Baidu's first eval
}

TEST(ShippedConfigs, AllLoadAndReferToAShippedSystem) {
  int count = 0;
  for (const char* bench : {"mlperf", "mini"}) {
    for (const auto& entry : fs::directory_iterator(kSource / "benchmarks/bert" / bench)) {
      // Configs are the .json files beside benchmark.json (folders hold other material).
      if (!entry.is_regular_file() || entry.path().filename() == "benchmark.json") continue;
      SCOPED_TRACE(entry.path().string());
      const TrainConfig c = load_train_config(entry.path().string(), /*check_data=*/false);
      EXPECT_EQ(c.system, entry.path().stem().string());
      EXPECT_GT(c.eval_interval_samples, 0);
      EXPECT_GE(c.max_samples, c.global_batch_size());
      EXPECT_EQ(c.submission_benchmark, "bert");
      const std::string system_file = find_system_file(c.system, entry.path().parent_path().string());
      ASSERT_FALSE(system_file.empty());
      load_system_description(system_file);
      ++count;
    }
  }
  EXPECT_GE(count, 8);
}

TEST(ShippedConfigs, GpuSystemsRunTheCudaBackendWithTheCapturedStep) {
  for (const char* system : {"h200_x1", "a100_1x8", "a100_8x8"}) {
    SCOPED_TRACE(system);
    const TrainConfig c =
        load_train_config((kSource / "benchmarks/bert/mlperf" / (std::string(system) + ".json")).string(), false);
    EXPECT_EQ(c.backend.name, "cuda");
    EXPECT_TRUE(c.backend.capture);
  }
  const TrainConfig cpu = load_train_config((kSource / "benchmarks/bert/mlperf/cpu_2c.json").string(), false);
  EXPECT_EQ(cpu.backend.name, "cpu");
}

TEST(ShippedConfigs, BaiduEightByEightHyperparameters) {
  const TrainConfig c = load_train_config((kSource / "benchmarks/bert/mlperf/a100_8x8.json").string(), false);
  EXPECT_EQ(c.global_batch_size(), 3072);
  EXPECT_EQ(c.eval_interval_samples, 175000);
  EXPECT_DOUBLE_EQ(c.lamb.learning_rate, 0.0020992);
  EXPECT_DOUBLE_EQ(c.lamb.beta1, 0.60466);
  EXPECT_DOUBLE_EQ(c.lamb.beta2, 0.85437);
  EXPECT_EQ(c.lamb.train_steps, 1059);
  EXPECT_EQ(c.max_samples, 4500000);
  EXPECT_DOUBLE_EQ(c.target_accuracy, 0.720);
  EXPECT_EQ(c.eval_samples, 10000);
  EXPECT_EQ(c.runs, 10);
  EXPECT_EQ(c.model.num_hidden_layers, 24);
  EXPECT_TRUE(c.division.empty());
}

TEST(ShippedConfigs, MiniIsLoggedAsOpenDivision) {
  const TrainConfig c = load_train_config((kSource / "benchmarks/bert/mini/cpu_2c.json").string(), false);
  EXPECT_EQ(c.division, "open");
}

// A scratch benchmark directory with a valid config that each test then breaks in one place.
class BadConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("bertperf_test_config_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    fs::copy_file(kSource / "benchmarks/bert/mini/benchmark.json", dir_ / "benchmark.json",
                  fs::copy_options::overwrite_existing);
    std::ifstream in(kSource / "benchmarks/bert/mini/cpu_2c.json");
    config_ = Json::parse(in);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The InputError message of loading the (modified) config.
  std::string error() {
    const fs::path path = dir_ / "cfg.json";
    std::ofstream(path) << config_.dump(2);
    try {
      load_train_config(path.string(), false);
    } catch (const InputError& e) {
      return e.what();
    }
    return "(loaded without error)";
  }

  fs::path dir_;
  Json config_;
};

TEST_F(BadConfig, ValidBaseLoads) { EXPECT_EQ(error(), "(loaded without error)"); }

TEST_F(BadConfig, MissingField) {
  config_["lamb"].erase("beta2");
  EXPECT_NE(error().find("cfg.json: lamb: missing field 'beta2'"), std::string::npos) << error();
}

TEST_F(BadConfig, WrongType) {
  config_["batch"]["ranks"] = "8";
  EXPECT_NE(error().find("cfg.json: batch: field 'ranks' must be an integer"), std::string::npos) << error();
}

TEST_F(BadConfig, BalancedBatchesFlag) {
  config_["distributed"] = {{"balanced_batches", true}};
  const fs::path path = dir_ / "cfg.json";
  EXPECT_EQ(error(), "(loaded without error)");
  EXPECT_TRUE(load_train_config(path.string(), false).balanced_batches);
  config_.erase("distributed");
  EXPECT_EQ(error(), "(loaded without error)");
  EXPECT_FALSE(load_train_config(path.string(), false).balanced_batches);
  config_["distributed"] = {{"balanced_batches", "yes"}};
  EXPECT_NE(error().find("cfg.json: distributed: field 'balanced_batches' must be"), std::string::npos) << error();
}

TEST_F(BadConfig, UnknownKey) {
  config_["lamb"]["learning_rat"] = 0.1;
  EXPECT_NE(error().find("cfg.json: lamb: unknown field 'learning_rat'"), std::string::npos) << error();
}

TEST_F(BadConfig, UnknownTopLevelKey) {
  config_["eval_every"] = 5;
  EXPECT_NE(error().find("unknown field 'eval_every'"), std::string::npos) << error();
}

TEST_F(BadConfig, OutOfRangeValue) {
  config_["lamb"]["beta1"] = 1.5;
  EXPECT_NE(error().find("field 'beta1' must be in [0, 1)"), std::string::npos) << error();
}

TEST_F(BadConfig, BenchmarkNameMismatch) {
  config_["benchmark"] = "bert";
  EXPECT_NE(error().find("field 'benchmark' is \"bert\""), std::string::npos) << error();
}

TEST_F(BadConfig, Reduction) {
  config_["distributed"] = {{"clip", "after_reduction"},
                            {"reduction", {{"algorithm", "bucketed"}, {"bucket_mb", 4}}}};
  const fs::path path = dir_ / "cfg.json";
  std::ofstream(path) << config_.dump(2);
  const TrainConfig good = load_train_config(path.string(), false);
  EXPECT_EQ(good.reduction.algorithm, ReduceAlgorithm::BUCKETED);
  EXPECT_EQ(good.reduction.bucket_mb, 4);
  EXPECT_FALSE(good.reduction.shard_optimizer);
  EXPECT_TRUE(good.clip_after_reduction);
  config_["distributed"]["reduction"] = {{"algorithm", "ring"}};
  EXPECT_NE(error().find("cfg.json: distributed: reduction: field 'algorithm' must be \"allreduce\""),
            std::string::npos)
      << error();
  config_["distributed"]["reduction"] = {{"algorithm", "bucketed"}, {"bucket_mb", 0}};
  EXPECT_NE(error().find("field 'bucket_mb' must be in (0, 4096]"), std::string::npos) << error();
  config_["distributed"]["reduction"] = {{"algorithm", "hierarchical"}, {"shard_optimizer", true}};
  EXPECT_NE(error().find("field 'shard_optimizer' reduce-scatters the whole buffer"), std::string::npos) << error();
  config_["distributed"]["reduction"] = {{"shard_optimiser", true}};
  EXPECT_NE(error().find("distributed: reduction: unknown field 'shard_optimiser'"), std::string::npos) << error();
}

TEST_F(BadConfig, BadModel) {
  config_["bert_config"]["hidden_size"] = 100;
  config_["bert_config"]["num_attention_heads"] = 7;
  EXPECT_NE(error().find("cfg.json: bert_config: hidden_size 100 is not a multiple"), std::string::npos) << error();
}

TEST_F(BadConfig, ModelFromPath) {
  std::ofstream(dir_ / "bert_config.json") << config_["bert_config"].dump();
  config_["bert_config"] = "bert_config.json";
  EXPECT_EQ(error(), "(loaded without error)");
}

TEST_F(BadConfig, EvalIntervalOverride) {
  config_["eval"]["interval_samples"] = 640;
  const fs::path path = dir_ / "cfg.json";
  std::ofstream(path) << config_.dump(2);
  EXPECT_EQ(load_train_config(path.string(), false).eval_interval_samples, 640);
}

TEST_F(BadConfig, MissingDataIsReportedWhenChecked) {
  const fs::path path = dir_ / "cfg.json";
  std::ofstream(path) << config_.dump(2);
  try {
    load_train_config(path.string(), true);
    FAIL() << "loaded with missing data";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no file matches"), std::string::npos) << e.what();
  }
}

TEST_F(BadConfig, UnsetEnvironmentVariable) {
  config_["data"]["eval_file"] = "${BERTPERF_SURELY_UNSET_VARIABLE}/eval.hdf5";
  EXPECT_NE(error().find("environment variable BERTPERF_SURELY_UNSET_VARIABLE is not set"), std::string::npos)
      << error();
}

class BadSystem : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ifstream in(kSource / "systems/cpu_2c.json");
    system_ = Json::parse(in);
    path_ = fs::temp_directory_path() / ("bertperf_test_system_" + std::to_string(::getpid()) + ".json");
  }
  void TearDown() override { fs::remove(path_); }
  std::string error() {
    std::ofstream(path_) << system_.dump(4);
    try {
      load_system_description(path_.string());
    } catch (const InputError& e) {
      return e.what();
    }
    return "(loaded without error)";
  }
  Json system_;
  fs::path path_;
};

TEST_F(BadSystem, EveryRequiredFieldIsChecked) {
  EXPECT_EQ(system_description_fields().size(), 33u);
  for (const auto& field : system_description_fields()) {
    const Json saved = system_[field];
    system_.erase(field);
    EXPECT_NE(error().find("missing field '" + field + "'"), std::string::npos) << field << ": " << error();
    system_[field] = saved;
  }
  EXPECT_EQ(error(), "(loaded without error)");
}

TEST_F(BadSystem, ValuesAreChecked) {
  system_["number_of_nodes"] = 8;
  EXPECT_NE(error().find("field 'number_of_nodes' must be a string"), std::string::npos) << error();
  system_["number_of_nodes"] = "eight";
  EXPECT_NE(error().find("field 'number_of_nodes' must be a whole number"), std::string::npos) << error();
  system_["number_of_nodes"] = "1";
  system_["division"] = "closedd";
  EXPECT_NE(error().find("field 'division' must be"), std::string::npos) << error();
  system_["division"] = "closed";
  system_["status"] = "available";
  EXPECT_NE(error().find("field 'status' must be one of"), std::string::npos) << error();
  system_["status"] = "Available cloud";
  system_["extra"] = "";
  EXPECT_NE(error().find("unknown field 'extra'"), std::string::npos) << error();
}

TEST(SystemDescription, LogStatusSpelling) {
  SystemDescription s;
  for (auto [status, logged] : {std::pair{"Available on-premise", "onprem"}, std::pair{"Available cloud", "cloud"},
                                std::pair{"Research, Development, or Internal (RDI)", "research"},
                                std::pair{"Preview", "preview"}, std::pair{"onprem", "onprem"}}) {
    s.status = status;
    EXPECT_EQ(s.log_status(), logged);
  }
}

}  // namespace
