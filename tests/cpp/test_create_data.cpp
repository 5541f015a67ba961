// The pretraining-data generator against the official MLPerf generator's own output
// (tests/golden/create_data/, produced by scripts/make_create_data_golden.py), the HDF5 writers
// against the layout spec, the eval picker against pick_eval_samples.py, and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/errors.h"
#include "core/hdf5.h"
#include "data/create_pretraining_data.h"
#include "data/layouts.h"
#include "data/md5.h"
#include "data/tokenizer.h"
#include "temp_dir.h"

using namespace bertperf;
namespace fs = std::filesystem;

namespace {

const std::string kGolden = std::string(BERTPERF_SOURCE_DIR) + "/tests/golden/create_data/";

nlohmann::json load_json(const std::string& name) {
  std::ifstream in(kGolden + name);
  if (!in) throw std::runtime_error("missing golden file " + name);
  return nlohmann::json::parse(in);
}

// The vocabulary read independently of the tokenizer: one token per line, id = line index
// (the golden vocabulary has no repeated tokens).
SpecialTokenIds golden_ids() {
  std::ifstream in(kGolden + "vocab.txt");
  std::vector<std::string> tokens;
  for (std::string line; std::getline(in, line);) tokens.push_back(line);
  const auto find = [&](const std::string& t) {
    return static_cast<int32_t>(std::find(tokens.begin(), tokens.end(), t) - tokens.begin());
  };
  return {find("[CLS]"), find("[SEP]"), find("[MASK]"), static_cast<int32_t>(tokens.size())};
}

PretrainingDataConfig config_of(const nlohmann::json& g) {
  PretrainingDataConfig c;
  c.max_seq_length = g["max_seq_length"];
  c.max_predictions_per_seq = g["max_predictions_per_seq"];
  c.masked_lm_prob = g["masked_lm_prob"];
  c.short_seq_prob = g["short_seq_prob"];
  c.dupe_factor = g["dupe_factor"];
  c.random_seed = g["random_seed"];
  return c;
}

std::vector<Document> golden_documents(const std::string& corpus) {
  return load_json("documents_" + corpus + ".json")["rows"].get<std::vector<Document>>();
}

// Instance by instance, field by field, so a failure says where the streams part.
void expect_equal_to_golden(const SequenceStore& got, const nlohmann::json& g) {
  const auto& rows = g["rows"];
  ASSERT_EQ(got.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const auto ids = r[0].get<std::vector<int32_t>>();
    ASSERT_EQ(std::vector<int32_t>(got.tokens(i).begin(), got.tokens(i).end()), ids) << "instance " << i;
    const size_t n_a = r[1];
    std::vector<int8_t> seg(ids.size(), 1);
    std::fill(seg.begin(), seg.begin() + n_a, 0);
    ASSERT_EQ(std::vector<int8_t>(got.segments(i).begin(), got.segments(i).end()), seg) << "instance " << i;
    ASSERT_EQ(std::vector<int32_t>(got.positions(i).begin(), got.positions(i).end()), r[2].get<std::vector<int32_t>>())
        << "instance " << i;
    ASSERT_EQ(std::vector<int32_t>(got.labels(i).begin(), got.labels(i).end()), r[3].get<std::vector<int32_t>>())
        << "instance " << i;
    ASSERT_EQ(int(got.nsp_labels[i]), r[4].get<int>()) << "instance " << i;
  }
}

const char* kConfigs[] = {"mlperf", "seq128", "seq32"};
const char* kCorpora[] = {"corpus_a", "corpus_b"};

using bertperf::testing::TempDir;

}  // namespace

// The generator alone, from the reference tokenizer's own documents: independent of our tokenizer.
TEST(CreateData, InstancesEqualReferenceFromReferenceDocuments) {
  const SpecialTokenIds ids = golden_ids();
  for (const char* config : kConfigs)
    for (const char* corpus : kCorpora) {
      SCOPED_TRACE(std::string(config) + " " + corpus);
      const auto g = load_json(std::string("instances_") + config + "_" + corpus + ".json");
      ASSERT_EQ(g["vocab_size"].get<int>(), ids.vocab_size);
      const PretrainingDataConfig c = config_of(g);
      PythonRandom rng(c.random_seed);
      expect_equal_to_golden(create_training_instances(golden_documents(corpus), ids, c, rng), g);
    }
}

// Text to instances with our tokenizer, several inputs on two threads, through the HDF5 writer.
TEST(CreateData, FilesFromTextEqualReference) {
  const FullTokenizer tokenizer(Vocab::load(kGolden + "vocab.txt"));
  for (const char* config : kConfigs) {
    SCOPED_TRACE(config);
    TempDir dir;
    CreateDataJob job;
    for (const char* corpus : kCorpora) job.inputs.push_back(kGolden + corpus + ".txt");
    job.out_dir = dir.path.string();
    job.threads = 2;
    job.checksums = true;
    const auto g0 = load_json(std::string("instances_") + config + "_corpus_a.json");
    std::ostringstream log;
    const auto files = create_pretraining_files(job, tokenizer, config_of(g0), log);
    ASSERT_EQ(files.size(), 2u);
    for (size_t k = 0; k < 2; ++k) {
      const auto g = load_json(std::string("instances_") + config + "_" + kCorpora[k] + ".json");
      const ShardData shard = read_shard(files[k].output, {golden_ids().vocab_size, g["max_seq_length"], g["max_predictions_per_seq"]});
      EXPECT_EQ(shard.layout, ShardLayout::VARLENGTH);
      expect_equal_to_golden(shard.sequences, g);
      EXPECT_EQ(files[k].checksum, hdf5_md5(files[k].output));
    }
    EXPECT_NE(log.str().find("[2/2]"), std::string::npos) << log.str();
  }
}

// Shard mode is the reference run once over all inputs: the same instances as one input holding
// the inputs' text back to back (checked against the reference above), dealt round-robin.
TEST(CreateData, ShardsDealOneJobOverAllInputsRoundRobin) {
  const FullTokenizer tokenizer(Vocab::load(kGolden + "vocab.txt"));
  const auto g = load_json("instances_seq128_corpus_a.json");
  TempDir dir;
  {
    std::ofstream joined(dir / "joined.txt", std::ios::binary);
    for (const char* corpus : kCorpora) {
      std::ifstream in(kGolden + corpus + ".txt", std::ios::binary);
      joined << in.rdbuf();
    }
  }
  CreateDataJob whole;
  whole.inputs = {dir / "joined.txt"};
  whole.out_dir = dir / "whole";
  CreateDataJob sharded;
  for (const char* corpus : kCorpora) sharded.inputs.push_back(kGolden + corpus + ".txt");
  sharded.out_dir = dir / "sharded";
  sharded.shards = 3;
  sharded.checksums = true;
  std::ostringstream log;
  const auto one = create_pretraining_files(whole, tokenizer, config_of(g), log);
  const auto parts = create_pretraining_files(sharded, tokenizer, config_of(g), log);
  const ShardLimits format{golden_ids().vocab_size, 128, 20};
  const SequenceStore all = read_shard(one[0].output, format).sequences;
  ASSERT_EQ(parts.size(), 3u);
  size_t total = 0;
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(parts[s].output, dir / ("sharded/part-0000" + std::to_string(s) + "-of-00003.hdf5"));
    EXPECT_EQ(parts[s].checksum, hdf5_md5(parts[s].output));
    const SequenceStore part = read_shard(parts[s].output, format).sequences;
    total += part.size();
    for (size_t k = 0; k < part.size(); ++k) {
      const size_t i = s + 3 * k;
      ASSERT_LT(i, all.size());
      ASSERT_TRUE(std::ranges::equal(part.tokens(k), all.tokens(i))) << "shard " << s << " row " << k;
      ASSERT_TRUE(std::ranges::equal(part.segments(k), all.segments(i)));
      ASSERT_TRUE(std::ranges::equal(part.positions(k), all.positions(i)));
      ASSERT_TRUE(std::ranges::equal(part.labels(k), all.labels(i)));
      ASSERT_EQ(part.nsp_labels[k], all.nsp_labels[i]);
    }
  }
  EXPECT_EQ(total, all.size());
  EXPECT_GT(total, 3u);
}

TEST(CreateData, ReadDocumentsSplitsAsReference) {
  const FullTokenizer tokenizer(Vocab::load(kGolden + "vocab.txt"));
  for (const char* corpus : kCorpora) {
    std::ifstream in(kGolden + corpus + ".txt", std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_EQ(read_documents(text.str(), tokenizer), golden_documents(corpus)) << corpus;
  }
}

TEST(CreateData, EvalPicksMatchPickEvalSamples) {
  // pick_eval_samples.py takes int(i * (N / K)); it equals i * N / K except where recorded.
  const auto g = load_json("eval_picks.json");
  for (const auto& [key, exceptions] : g.items()) {
    const size_t n = std::stoull(key.substr(0, key.find('/'))), k = std::stoull(key.substr(key.find('/') + 1));
    std::map<size_t, size_t> differ;
    for (const auto& e : exceptions) differ[e[0]] = e[1];
    const auto picks = eval_pick_indices(n, k);
    ASSERT_EQ(picks.size(), k);
    for (size_t i = 0; i < k; ++i) {
      const size_t expect = differ.count(i) ? differ[i] : static_cast<size_t>((static_cast<unsigned __int128>(i) * n) / k);
      ASSERT_EQ(picks[i], expect) << key << " i=" << i;
    }
  }
}

TEST(CreateData, EvalFileHoldsEvenlySpacedPicks) {
  const FullTokenizer tokenizer(Vocab::load(kGolden + "vocab.txt"));
  TempDir dir;
  CreateDataJob job;
  job.inputs = {kGolden + "corpus_a.txt"};
  job.out_dir = dir.path.string();
  job.eval_samples = 7;
  job.layout = ShardLayout::FIXED;
  const auto g = load_json("instances_seq128_corpus_a.json");
  std::ostringstream log;
  const auto files = create_pretraining_files(job, tokenizer, config_of(g), log);
  ASSERT_EQ(files.back().output, dir / "eval_7.hdf5");
  const ShardData shard = read_shard(files.back().output, {0, 128, 20});
  EXPECT_EQ(shard.layout, ShardLayout::FIXED);
  const size_t n = g["rows"].size();
  ASSERT_EQ(shard.sequences.size(), 7u);
  for (size_t i = 0; i < 7; ++i) {
    const auto& row = g["rows"][i * n / 7];
    EXPECT_EQ(std::vector<int32_t>(shard.sequences.tokens(i).begin(), shard.sequences.tokens(i).end()),
              row[0].get<std::vector<int32_t>>());
  }
}

// The fixed layout's keys, dtypes and shapes exactly as in NVIDIA's shards; padding is zero.
TEST(CreateData, FixedLayoutKeysDtypesShapes) {
  SequenceStore s;
  s.input_ids = {4, 10, 5, 11, 12, 5, 4, 13, 5, 14, 5};
  s.segment_ids = {0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1};
  s.token_offsets = {0, 6, 11};
  s.mlm_positions = {1, 4, 3};
  s.mlm_ids = {20, 21, 22};
  s.mlm_offsets = {0, 2, 3};
  s.nsp_labels = {0, 1};
  TempDir dir;
  write_fixed(dir / "f.hdf5", s, 8, 3);
  const h5::File f = h5::File::open(dir / "f.hdf5");
  EXPECT_EQ(f.datasets(), (std::vector<std::string>{"input_ids", "input_mask", "masked_lm_ids", "masked_lm_positions",
                                                    "next_sentence_labels", "segment_ids"}));
  const std::map<std::string, std::pair<h5::ElementType, std::vector<int64_t>>> expect = {
      {"input_ids", {h5::ElementType::I16, {2, 8}}},          {"input_mask", {h5::ElementType::I8, {2, 8}}},
      {"segment_ids", {h5::ElementType::I8, {2, 8}}},         {"masked_lm_positions", {h5::ElementType::I16, {2, 3}}},
      {"masked_lm_ids", {h5::ElementType::I16, {2, 3}}},      {"next_sentence_labels", {h5::ElementType::I8, {2}}}};
  for (const auto& [key, e] : expect) {
    const auto info = f.info(key);
    EXPECT_FALSE(info.vlen) << key;
    EXPECT_EQ(info.type, e.first) << key;
    EXPECT_EQ(info.shape, e.second) << key;
  }
  EXPECT_EQ(f.read<int16_t>("input_ids"), (std::vector<int16_t>{4, 10, 5, 11, 12, 5, 0, 0, 4, 13, 5, 14, 5, 0, 0, 0}));
  EXPECT_EQ(f.read<int8_t>("input_mask"), (std::vector<int8_t>{1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(f.read<int16_t>("masked_lm_positions"), (std::vector<int16_t>{1, 4, 0, 3, 0, 0}));
  EXPECT_EQ(f.read<int16_t>("masked_lm_ids"), (std::vector<int16_t>{20, 21, 0, 22, 0, 0}));
  const ShardData back = read_shard(dir / "f.hdf5", {30, 8, 3});
  EXPECT_EQ(back.sequences.input_ids, s.input_ids);
  EXPECT_EQ(back.sequences.segment_ids, s.segment_ids);
  EXPECT_EQ(back.sequences.mlm_positions, s.mlm_positions);
  EXPECT_EQ(back.sequences.nsp_labels, s.nsp_labels);
  // hdf5_md5.py on a fixed file hashes whole padded rows.
  EXPECT_EQ(hdf5_md5(dir / "f.hdf5"), hdf5_md5(s, true, 8));
  write_varlength(dir / "v.hdf5", s);
  const h5::File v = h5::File::open(dir / "v.hdf5");
  for (const char* key : {"input_ids", "segment_ids", "masked_lm_positions", "masked_lm_ids"}) {
    EXPECT_TRUE(v.info(key).vlen) << key;
    EXPECT_EQ(v.info(key).shape, (std::vector<int64_t>{2})) << key;
  }
  EXPECT_EQ(v.info("input_ids").type, h5::ElementType::I16);
  EXPECT_EQ(v.info("segment_ids").type, h5::ElementType::I8);
  EXPECT_FALSE(v.info("next_sentence_labels").vlen);
  EXPECT_EQ(v.info("next_sentence_labels").type, h5::ElementType::I8);
  EXPECT_EQ(hdf5_md5(dir / "v.hdf5"), hdf5_md5(s, false, 8));
}

TEST(CreateData, Md5MatchesRfcAndPythonStr) {
  EXPECT_EQ(md5_hex(""), "d41d8cd98f00b204e9800998ecf8427e");  // RFC 1321 test suite
  EXPECT_EQ(md5_hex("abc"), "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(md5_hex("12345678901234567890123456789012345678901234567890123456789012345678901234567890"),
            "57edf4a22be3c955ac49da2e2107b67a");
  // hashlib.md5(str([101, 2023, 102]).encode()).hexdigest() and of str(['ab', 'cd']).
  const int32_t row[] = {101, 2023, 102};
  EXPECT_EQ(python_list_md5(row, 3), md5_hex("[101, 2023, 102]"));
  EXPECT_EQ(python_str_list_md5({"ab", "cd"}), md5_hex("['ab', 'cd']"));
  EXPECT_EQ(md5_hex("[101, 2023, 102]"), "93f9f9887fed5308b399d79a602ca76a");
}

TEST(CreateData, BadInputIsOneClearError) {
  const SpecialTokenIds ids = golden_ids();
  PretrainingDataConfig c;
  PythonRandom rng(1);
  // A token id outside the vocabulary names the source and the document.
  try {
    create_training_instances({{{7, 8}, {ids.vocab_size + 3}}}, ids, c, rng, "x.txt");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("x.txt"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
  }
  EXPECT_THROW(create_training_instances({{}, {}}, ids, c, rng), InputError);  // only empty documents
  c.max_seq_length = 4;
  EXPECT_THROW(create_training_instances({{{7, 8}}}, ids, c, rng), InputError);
  // A missing input file, and an input with no text.
  const FullTokenizer tokenizer(Vocab::load(kGolden + "vocab.txt"));
  TempDir dir;
  CreateDataJob job;
  job.out_dir = dir / "out";
  job.inputs = {dir / "missing.txt"};
  std::ostringstream log;
  EXPECT_THROW(create_pretraining_files(job, tokenizer, {}, log), InputError);
  std::ofstream(dir / "blank.txt") << "\n  \n\n";
  job.inputs = {dir / "blank.txt"};
  EXPECT_THROW(create_pretraining_files(job, tokenizer, {}, log), InputError);
  // Shard mode: not with an eval set, and not more shards than instances.
  job.inputs = {kGolden + "corpus_a.txt"};
  job.shards = 2;
  job.eval_samples = 5;
  EXPECT_THROW(create_pretraining_files(job, tokenizer, {}, log), InputError);
  job.eval_samples = 0;
  job.shards = 1000000;
  EXPECT_THROW(create_pretraining_files(job, tokenizer, {}, log), InputError);
}
