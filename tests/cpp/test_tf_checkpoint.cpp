// Tests of the TensorFlow checkpoint reader and the TF-to-HDF5 conversion (model/tf_checkpoint.h)
// on tests/golden/tf1_tiny: a TF1 checkpoint of a tiny BERT written by TensorFlow itself
// (scripts/make_tf1_checkpoint.py), with LAMB slots and global_step, and the values TF holds for
// every variable in expected.h5. Also: CRC-32C against the published check value, and one
// InputError line naming the file and the tensor for each kind of damage.
#include "model/tf_checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/errors.h"
#include "core/hdf5.h"
#include "model/bert_params.h"
#include "model/checkpoint.h"
#include "input_error.h"
#include "temp_dir.h"

namespace bertperf {
namespace {

namespace fs = std::filesystem;
using testing::expect_input_error;

const std::string kGolden = std::string(BERTPERF_SOURCE_DIR) + "/tests/golden/tf1_tiny";
const std::string kPrefix = kGolden + "/model.ckpt-28252";

// expected.h5 keys are TF names with '/' as '.' (a variable and its slots cannot both be HDF5 paths).
std::string expected_key(std::string name) {
  for (char& c : name)
    if (c == '/') c = '.';
  return name;
}

class TfCheckpointTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_ / name; }

  // A copy of the golden checkpoint in the scratch directory, for damaging.
  std::string copy_checkpoint() {
    const std::string prefix = path("model.ckpt-28252");
    fs::copy_file(kPrefix + ".index", prefix + ".index");
    fs::copy_file(kPrefix + ".data-00000-of-00001", prefix + ".data-00000-of-00001");
    return prefix;
  }

  bertperf::testing::TempDir dir_{"bertperf_test_tf_checkpoint"};
  const h5::File expected_ = h5::File::open(kGolden + "/expected.h5");
  const BertConfig config_ = load_bert_config(kGolden + "/bert_config.json");
};

TEST(Crc32c, MatchesPublishedCheckValueAndMask) {
  // The CRC-32C check value of "123456789" (RFC 3720 / the Castagnoli catalogue entry).
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  // Extending in two pieces equals one pass.
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
  // Masking is a rotation by 15 plus a constant, so it is invertible and changes the value.
  const uint32_t c = 0xE3069283u, m = crc32c_mask(c);
  EXPECT_NE(m, c);
  const uint32_t rot = m - 0xa282ead8u;
  EXPECT_EQ((rot >> 17) | (rot << 15), c);
}

TEST_F(TfCheckpointTest, ReaderListsEveryVariableWithItsDtypeAndShape) {
  const TfCheckpointReader reader(kPrefix);
  EXPECT_EQ(reader.num_shards(), 1);
  std::vector<std::string> keys;
  for (const TfTensorEntry& e : reader.entries()) {
    keys.push_back(expected_key(e.name));
    ASSERT_TRUE(expected_.has(keys.back())) << e.name;
    const h5::DatasetInfo info = expected_.info(keys.back());
    EXPECT_EQ(e.shape, info.shape) << e.name;
    EXPECT_EQ(tf_dtype_name(e.dtype), h5::type_name(info.type)) << e.name;
  }
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, expected_.datasets());  // nothing missed, nothing invented
  ASSERT_NE(reader.find("global_step"), nullptr);
  EXPECT_EQ(reader.find("global_step")->dtype, TF_INT64);
  EXPECT_TRUE(reader.find("global_step")->shape.empty());
  EXPECT_EQ(reader.find("bert/pooler/dense"), nullptr);
}

TEST_F(TfCheckpointTest, EveryFloatTensorReadsBitExact) {
  const TfCheckpointReader reader(kPrefix);
  size_t floats = 0;
  for (const TfTensorEntry& e : reader.entries()) {
    if (e.dtype != TF_FLOAT) continue;
    const std::vector<float> want = expected_.read<float>(expected_key(e.name));
    std::vector<float> got(want.size());
    reader.read_float(e, got.data(), got.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << e.name;
    ++floats;
  }
  EXPECT_EQ(floats, reader.entries().size() - 1);  // all but global_step
  std::vector<float> one(1);
  expect_input_error([&] { reader.read_float(*reader.find("global_step"), one.data(), 1); },
                     {"global_step", "int64", "float32"});
}

TEST_F(TfCheckpointTest, ConversionWritesEveryModelTensorAndSkipsTheRest) {
  const TensorTable table = bert_parameter_table(config_);
  const std::string out = path("converted.h5");
  const TfConversion result = convert_tf_checkpoint(kPrefix, table, out);
  EXPECT_EQ(result.converted, table.size());
  const TfCheckpointReader reader(kPrefix);
  EXPECT_EQ(result.skipped.size(), reader.entries().size() - table.size());
  for (const std::string& s : result.skipped)
    EXPECT_TRUE(s == "global_step" || s.ends_with("/LAMB") || s.ends_with("/LAMB_1")) << s;

  FlatTensors params(table);
  load_checkpoint(params, out);
  for (const TensorInfo& t : table.tensors()) {
    const std::vector<float> want = expected_.read<float>(expected_key(t.name));
    ASSERT_EQ(want.size(), t.numel) << t.name;
    EXPECT_EQ(std::memcmp(params.get(t), want.data(), t.numel * sizeof(float)), 0) << t.name;
  }
}

TEST_F(TfCheckpointTest, ModelMismatchNamesTheTensor) {
  BertConfig wider = config_;
  wider.intermediate_size = 32;
  const std::string out = path("never.h5");
  expect_input_error([&] { convert_tf_checkpoint(kPrefix, bert_parameter_table(wider), out); },
                     {kPrefix, "bert/encoder/layer_0/intermediate/dense/kernel", "[8,16]", "[8,32]"});
  BertConfig deeper = config_;
  deeper.num_hidden_layers = 3;
  expect_input_error([&] { convert_tf_checkpoint(kPrefix, bert_parameter_table(deeper), out); },
                     {kPrefix, "missing tensor", "bert/encoder/layer_2/"});
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(TfCheckpointTest, DamagedFilesNameTheFileAndTensor) {
  const std::string prefix = copy_checkpoint();
  const std::string data = prefix + ".data-00000-of-00001";
  const TfCheckpointReader reader(prefix);
  const TfTensorEntry& word = *reader.find("bert/embeddings/word_embeddings");
  std::vector<float> buf(word.size / sizeof(float));

  // One flipped byte inside the tensor: its checksum catches it.
  {
    std::fstream f(data, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(word.offset + 5);
    f.put('\x7f');
  }
  expect_input_error([&] { reader.read_float(word, buf.data(), buf.size()); },
                     {data, "bert/embeddings/word_embeddings", "checksum"});

  // A data file cut short inside the last float tensor.
  const TfTensorEntry* last = &word;
  for (const TfTensorEntry& e : reader.entries())
    if (e.dtype == TF_FLOAT && e.offset > last->offset) last = &e;
  fs::resize_file(data, last->offset + 2);
  std::vector<float> tail(last->size / sizeof(float));
  expect_input_error([&] { reader.read_float(*last, tail.data(), tail.size()); }, {data, last->name, "truncated"});

  // A missing data file.
  fs::remove(data);
  expect_input_error([&] { reader.read_float(word, buf.data(), buf.size()); }, {data});

  // A damaged index: a flipped byte in a table block fails its checksum.
  const std::string index = prefix + ".index";
  {
    std::fstream f(index, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(20);
    const char c = static_cast<char>(f.get());
    f.seekp(20);
    f.put(static_cast<char>(c ^ 0x10));
  }
  expect_input_error([&] { TfCheckpointReader{prefix}; }, {index, "checksum"});

  // Not an index at all, and no index.
  { std::ofstream(index, std::ios::trunc) << std::string(100, 'x'); }
  expect_input_error([&] { TfCheckpointReader{prefix}; }, {index, "not a TensorFlow checkpoint index"});
  expect_input_error([&] { TfCheckpointReader{path("nothing")}; }, {path("nothing") + ".index", "no such file"});
}

}  // namespace
}  // namespace bertperf
