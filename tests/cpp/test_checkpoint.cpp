// Tests of HDF5 checkpoints (model/checkpoint.h): an exact round trip of a small BERT's parameters
// in the TF layout, extra tensors (optimizer slots, global_step) ignored, the FP8 scaling state
// beside the parameters (an exact round trip under "fp8/", skipped by the parameter loader, absent
// from a plain checkpoint, a wrong shape named), and one InputError line naming the file and the
// tensor for a missing tensor, a wrong shape, a wrong dtype, a foreign format, a truncated file and
// a garbage file.
#include "model/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/errors.h"
#include "core/hdf5.h"
#include "model/bert_params.h"
#include "input_error.h"
#include "temp_dir.h"
#include "tiny_bert.h"

namespace bertperf {
namespace {

namespace fs = std::filesystem;

BertConfig tiny_config() {
  return testing::tiny_bert({.vocab = 50, .hidden = 8, .heads = 2, .intermediate = 16, .positions = 16});
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Random values everywhere (gammas and biases too), so a swapped or skipped tensor shows.
    std::mt19937 rng(17);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (const TensorInfo& t : table_.tensors())
      for (size_t i = 0; i < t.numel; ++i) params_.get(t)[i] = uniform(rng);
  }
  std::string path(const std::string& name) const { return dir_ / name; }

  // Writes the parameters through the raw HDF5 layer, leaving out `skip` and applying `edit` last.
  template <typename Edit>
  std::string write_by_hand(const std::string& name, const std::string& skip, Edit&& edit) {
    const std::string p = path(name);
    h5::File f = h5::File::create(p);
    for (const TensorInfo& t : table_.tensors())
      if (t.name != skip) f.write(t.name, params_.get(t), t.shape);
    edit(f);
    f.commit();
    return p;
  }

  void expect_load_error(const std::string& file, std::initializer_list<std::string> parts) {
    FlatTensors loaded(table_);
    testing::expect_input_error([&] { load_checkpoint(loaded, file); }, parts);
  }

  bertperf::testing::TempDir dir_{"bertperf_test_checkpoint"};
  BertConfig config_ = tiny_config();
  TensorTable table_ = bert_parameter_table(config_);
  FlatTensors params_{table_};
};

TEST_F(CheckpointTest, RoundTripIsExactAndUsesTfNamesAndShapes) {
  const std::string p = path("model.h5");
  save_checkpoint(params_, p);
  FlatTensors loaded(table_);
  load_checkpoint(loaded, p);
  for (const TensorInfo& t : table_.tensors())
    EXPECT_EQ(std::memcmp(loaded.get(t), params_.get(t), t.numel * sizeof(float)), 0) << t.name;

  // The file itself: one float32 dataset per TF name with the TF shape, and the format stamp.
  const h5::File f = h5::File::open(p);
  EXPECT_EQ(f.datasets().size(), table_.size());
  const h5::DatasetInfo q = f.info("bert/encoder/layer_1/intermediate/dense/kernel");
  EXPECT_EQ(q.type, h5::ElementType::F32);
  EXPECT_EQ(q.shape, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(f.info("cls/seq_relationship/output_weights").shape, (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(f.attr_string("", "format"), kCheckpointFormat);
  EXPECT_EQ(f.attr_int("", "version"), kCheckpointVersion);
}

TEST_F(CheckpointTest, ExtraTensorsAndMissingFormatStampAreAccepted) {
  const std::vector<float> slot(8, 3.0f);
  const std::string p = write_by_hand("extra.h5", "", [&](h5::File& f) {
    f.write("bert/encoder/layer_0/attention/self/query/adam_m", slot, {8});
    f.write("bert/embeddings/word_embeddings_LAMB", std::vector<float>(400, 1.0f), {50, 8});
    f.write("global_step", std::vector<int64_t>{28252}, {});
  });
  FlatTensors loaded(table_);
  load_checkpoint(loaded, p);
  const TensorInfo& w = table_.at("bert/embeddings/word_embeddings");
  EXPECT_EQ(std::memcmp(loaded.get(w), params_.get(w), w.numel * sizeof(float)), 0);
}

// The FP8 state as BertModel lays it out (bert.h fp8_state_table) for 2 layers and an amax history of 3.
TEST_F(CheckpointTest, Fp8StateRidesBesideTheParameters) {
  TensorTable fp8_table;
  fp8_table.add("fp8/scale", {2, 4, 3});
  fp8_table.add("fp8/amax_history", {3, 2, 4, 3});
  FlatTensors fp8(fp8_table);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(0.0f, 448.0f);
  for (const TensorInfo& t : fp8_table.tensors())
    for (size_t i = 0; i < t.numel; ++i) fp8.get(t)[i] = uniform(rng);

  const std::string plain = path("plain.h5"), with = path("fp8.h5");
  save_checkpoint(params_, plain);
  save_checkpoint(params_, with, &fp8);
  EXPECT_FALSE(has_fp8_state(plain));
  ASSERT_TRUE(has_fp8_state(with));
  FlatTensors loaded(table_), loaded_fp8(fp8_table);
  load_checkpoint(loaded, with);  // the parameters alone, the FP8 group skipped
  EXPECT_EQ(std::memcmp(loaded.data(), params_.data(), params_.size() * sizeof(float)), 0);
  load_fp8_state(loaded_fp8, with);
  for (const TensorInfo& t : fp8_table.tensors())
    EXPECT_EQ(std::memcmp(loaded_fp8.get(t), fp8.get(t), t.numel * sizeof(float)), 0) << t.name;
  EXPECT_EQ(h5::File::open(with).info("fp8/amax_history").shape, (std::vector<int64_t>{3, 2, 4, 3}));

  // Another history length: one line naming the file, the tensor and both shapes.
  TensorTable other_table;
  other_table.add("fp8/scale", {2, 4, 3});
  other_table.add("fp8/amax_history", {1, 2, 4, 3});
  FlatTensors other(other_table);
  testing::expect_input_error([&] { load_fp8_state(other, with); },
                              {with, "fp8/amax_history", "[3,2,4,3]", "[1,2,4,3]"});
}

TEST_F(CheckpointTest, MissingTensorIsNamed) {
  const std::string gone = "bert/encoder/layer_1/attention/output/LayerNorm/beta";
  const std::string p = write_by_hand("missing.h5", gone, [](h5::File&) {});
  expect_load_error(p, {p, gone, "missing"});
}

TEST_F(CheckpointTest, WrongShapeIsNamedWithBothShapes) {
  const std::string name = "bert/pooler/dense/kernel";
  const std::string p = write_by_hand("shape.h5", name, [&](h5::File& f) {
    f.write(name, std::vector<float>(8 * 4, 0.0f), {4, 8});
  });
  expect_load_error(p, {p, name, "[4,8]", "[8,8]"});
}

TEST_F(CheckpointTest, WrongDtypeIsNamed) {
  const std::string name = "cls/predictions/output_bias";
  const std::string p = write_by_hand("dtype.h5", name, [&](h5::File& f) {
    f.write(name, std::vector<double>(50, 0.5), {50});
  });
  expect_load_error(p, {p, name, "float64"});
}

TEST_F(CheckpointTest, ForeignFormatAndNewerVersionAreRefused) {
  const std::string other = write_by_hand("other.h5", "", [](h5::File& f) {
    f.set_attr("", "format", std::string("keras-weights"));
  });
  expect_load_error(other, {other, "keras-weights"});
  const std::string newer = write_by_hand("newer.h5", "", [](h5::File& f) {
    f.set_attr("", "format", std::string(kCheckpointFormat));
    f.set_attr("", "version", kCheckpointVersion + 1);
  });
  expect_load_error(newer, {newer, "version"});
}

TEST_F(CheckpointTest, TruncatedAndGarbageFilesAreNamed) {
  const std::string good = path("good.h5");
  save_checkpoint(params_, good);
  const std::string cut = path("cut.h5");
  fs::copy_file(good, cut);
  fs::resize_file(cut, fs::file_size(good) * 2 / 3);
  expect_load_error(cut, {cut});

  const std::string garbage = path("garbage.h5");
  {
    std::ofstream out(garbage, std::ios::binary);
    std::mt19937 rng(3);
    for (int i = 0; i < 4096; ++i) out.put(static_cast<char>(rng()));
  }
  expect_load_error(garbage, {garbage, "not an HDF5 file"});
  expect_load_error(path("absent.h5"), {path("absent.h5"), "no such file"});
}

}  // namespace
}  // namespace bertperf
