// The data reader against shards written by h5py in all three MLPerf layouts
// (tests/golden/reader/, made by scripts/make_reader_golden.py together with the batches a reader
// must produce, computed in Python from the batch contract and the documented shuffle scheme),
// plus rank splitting, packing, and bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "core/hdf5.h"
#include "data/reader.h"
#include "temp_dir.h"

using namespace bertperf;
namespace fs = std::filesystem;

namespace {

const std::string kDir = std::string(BERTPERF_SOURCE_DIR) + "/tests/golden/reader/";

const nlohmann::json& expected() {
  static const nlohmann::json doc = [] {
    std::ifstream in(kDir + "expected.json");
    return nlohmann::json::parse(in);
  }();
  return doc;
}

ReaderOptions base_options(const std::string& file, bool eval) {
  ReaderOptions o;
  o.files = {kDir + file};
  o.batch_rows = expected()["batch_rows"];
  o.seq_len = expected()["seq_len"];
  o.max_predictions = expected()["max_predictions"];
  o.vocab_size = expected()["vocab_size"];
  o.packed_max_predictions = expected()["packed_max_predictions"];
  if (eval) {
    o.shuffle = false;
    o.repeat = false;
    o.drop_last = false;
  } else {
    o.seed = expected()["train_seed"];
  }
  return o;
}

void expect_batch(const Batch& got, const nlohmann::json& want, size_t index) {
  SCOPED_TRACE("batch " + std::to_string(index));
  EXPECT_EQ(got.rows, want["rows"].get<int>());
  EXPECT_EQ(got.seq_len, expected()["seq_len"].get<int>());
  EXPECT_EQ(got.input_ids, want["input_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(got.segment_ids, want["segment_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(got.position_ids, want["position_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(got.seq_id, want["seq_id"].get<std::vector<int32_t>>());
  EXPECT_EQ(got.mlm_positions, want["mlm_positions"].get<std::vector<int32_t>>());
  EXPECT_EQ(got.mlm_labels, want["mlm_labels"].get<std::vector<int32_t>>());
  EXPECT_EQ(got.mlm_weights, want["mlm_weights"].get<std::vector<float>>());
  EXPECT_EQ(got.cls_positions, want["cls_positions"].get<std::vector<int32_t>>());
  EXPECT_EQ(got.nsp_labels, want["nsp_labels"].get<std::vector<int32_t>>());
}

// Reads `count` batches (all, when count < 0 and the reader stops) and compares them.
void expect_batches(PretrainingReader& reader, const nlohmann::json& want, bool expect_end) {
  Batch b;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(reader.next(b)) << "reader stopped early at batch " << i;
    expect_batch(b, want[i], i);
  }
  if (expect_end) {
    EXPECT_FALSE(reader.next(b));
  }
}

// A sequence as (nsp, tokens), for multiset comparisons across ranks and packings.
using SeqKey = std::pair<int, std::vector<int32_t>>;

// The sequences of one batch; nsp_labels follow the sequences in row order, then seq_id order.
void add_sequences(const Batch& b, std::multiset<SeqKey>& out) {
  size_t next_label = 0;
  for (int r = 0; r < b.rows; ++r) {
    std::map<int, std::vector<int32_t>> by_seq;
    for (int t = 0; t < b.seq_len; ++t) {
      if (b.seq_id[r * b.seq_len + t] > 0) by_seq[b.seq_id[r * b.seq_len + t]].push_back(b.input_ids[r * b.seq_len + t]);
    }
    for (auto& [k, tokens] : by_seq) out.insert({b.nsp_labels.at(next_label++), tokens});
  }
  EXPECT_EQ(next_label, b.nsp_labels.size());
}

std::multiset<SeqKey> sequences_of(PretrainingReader& reader) {
  std::multiset<SeqKey> out;
  Batch b;
  while (reader.next(b)) add_sequences(b, out);
  return out;
}

using bertperf::testing::TempDir;

// Builds the reader and drains it; returns the InputError message (empty if none).
std::string input_error(const ReaderOptions& o) {
  try {
    PretrainingReader reader(o);
    Batch b;
    while (reader.next(b)) {
    }
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Reader, EvalPassEqualsContractForEveryLayout) {
  for (const char* file : {"fixed.hdf5", "varlength.hdf5"}) {
    SCOPED_TRACE(file);
    PretrainingReader reader(base_options(file, true));
    EXPECT_FALSE(reader.packed());
    EXPECT_EQ(reader.samples(), 13);
    expect_batches(reader, expected()["eval_unpacked"], true);
  }
  PretrainingReader packed(base_options("packed.hdf5", true));
  EXPECT_TRUE(packed.packed());
  EXPECT_EQ(packed.samples(), 13);
  expect_batches(packed, expected()["eval_packed"], true);
}

TEST(Reader, TrainingShuffleFollowsDocumentedScheme) {
  for (const char* file : {"fixed.hdf5", "varlength.hdf5"}) {
    SCOPED_TRACE(file);
    PretrainingReader reader(base_options(file, false));
    expect_batches(reader, expected()["train_unpacked"], false);
  }
  PretrainingReader packed(base_options("packed.hdf5", false));
  expect_batches(packed, expected()["train_packed"], false);
}

TEST(Reader, PackingKeepsEverySequenceOnce) {
  ReaderOptions o = base_options("varlength.hdf5", true);
  std::multiset<SeqKey> plain;
  {
    PretrainingReader reader(o);
    plain = sequences_of(reader);
  }
  o.pack = true;
  PretrainingReader reader(o);
  EXPECT_TRUE(reader.packed());
  std::multiset<SeqKey> packed;
  Batch b;
  int rows = 0;
  while (reader.next(b)) {
    rows += b.rows;
    EXPECT_EQ(b.predictions(), b.rows * o.packed_max_predictions);
    for (int r = 0; r < b.rows; ++r) {
      const int* sid = b.seq_id.data() + r * b.seq_len;
      const int* pos = b.position_ids.data() + r * b.seq_len;
      EXPECT_LE(*std::max_element(sid, sid + b.seq_len), o.max_sequences_per_row);
      std::map<int, int> seen;
      for (int t = 0; t < b.seq_len; ++t) {
        if (sid[t] == 0) continue;
        // Positions restart at 0 with each sequence, whose first token is its [CLS].
        EXPECT_EQ(pos[t], seen[sid[t]]++);
        if (pos[t] == 0) {
          EXPECT_NE(std::find(b.cls_positions.begin(), b.cls_positions.end(), r * b.seq_len + t), b.cls_positions.end());
        }
      }
    }
    add_sequences(b, packed);
    // Real predictions point inside a sequence.
    for (int m = 0; m < b.predictions(); ++m) {
      if (b.mlm_weights[m] > 0) {
        EXPECT_GT(b.seq_id[b.mlm_positions[m]], 0);
      }
    }
  }
  EXPECT_EQ(packed, plain);
  EXPECT_LT(rows, 13);  // packing actually combined sequences
}

TEST(Reader, RanksSplitShardsOrSamples) {
  // Two files, two ranks: one file each.
  for (int rank = 0; rank < 2; ++rank) {
    ReaderOptions o = base_options("fixed.hdf5", true);
    o.files.push_back(kDir + "varlength.hdf5");
    o.world_size = 2;
    o.rank = rank;
    PretrainingReader reader(o);
    EXPECT_EQ(reader.samples(), 13);
  }
  // One file, three ranks: disjoint samples that together are the whole file (shuffled or not).
  for (bool shuffle : {false, true}) {
    std::multiset<SeqKey> all, whole;
    {
      PretrainingReader reader(base_options("varlength.hdf5", true));
      whole = sequences_of(reader);
    }
    int64_t total = 0;
    for (int rank = 0; rank < 3; ++rank) {
      ReaderOptions o = base_options("varlength.hdf5", true);
      o.world_size = 3;
      o.rank = rank;
      o.shuffle = shuffle;
      o.seed = 11;
      PretrainingReader reader(o);
      EXPECT_EQ(reader.samples(), rank == 0 ? 5 : 4);
      total += reader.samples();
      const auto mine = sequences_of(reader);
      all.insert(mine.begin(), mine.end());
    }
    EXPECT_EQ(total, 13);
    EXPECT_EQ(all, whole);
  }
}

TEST(Reader, StopsCleanlyWhileProducerIsAhead) {
  ReaderOptions o = base_options("varlength.hdf5", false);
  o.batch_rows = 1;
  PretrainingReader reader(o);
  Batch b;
  EXPECT_TRUE(reader.next(b));
  // The destructor must stop the producer blocked on a full queue.
}

TEST(Reader, BadInputIsOneClearErrorNamingTheFile) {
  TempDir dir;
  const auto named = [](const std::string& msg, const std::string& path, const std::string& what) {
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  };
  ReaderOptions o = base_options("varlength.hdf5", true);
  // Missing file, not HDF5, truncated HDF5.
  o.files = {dir / "missing.hdf5"};
  EXPECT_NE(input_error(o).find("missing.hdf5"), std::string::npos);
  std::ofstream(dir / "text.hdf5") << "this is not hdf5\n";
  o.files = {dir / "text.hdf5"};
  EXPECT_NE(input_error(o).find("text.hdf5"), std::string::npos);
  for (const char* name : {"varlength.hdf5", "fixed.hdf5", "packed.hdf5"}) {
    fs::copy_file(kDir + name, dir / (std::string("cut_") + name));
    fs::resize_file(dir / (std::string("cut_") + name), fs::file_size(kDir + name) * 2 / 3);
    o.files = {dir / (std::string("cut_") + name)};
    EXPECT_NE(input_error(o).find(std::string("cut_") + name), std::string::npos) << name;
  }
  // A token id at or above the vocabulary size names the row.
  o = base_options("varlength.hdf5", true);
  o.vocab_size = 50;
  named(input_error(o), "varlength.hdf5", "outside the vocabulary");
  // A sequence longer than seq_len.
  o = base_options("fixed.hdf5", true);
  o.seq_len = 20;
  named(input_error(o), "fixed.hdf5", "longer than");
  // Missing key; wrong dtype; wrong shape; inconsistent packed lengths.
  {
    h5::File f = h5::File::create(dir / "nokey.hdf5");
    f.write("input_ids", std::vector<int16_t>{1, 2}, {1, 2});
    f.commit();
  }
  o.files = {dir / "nokey.hdf5"};
  named(input_error(o), "nokey.hdf5", "segment_ids");
  const auto write_varlength = [&](const std::string& path, bool float_ids, int nsp_rows, int packed_len) {
    h5::File f = h5::File::create(path);
    h5::Vlen<int16_t> ids, pos;
    h5::Vlen<int8_t> seg;
    const int16_t row[] = {1, 5, 2, 7, 2};
    const int8_t segs[] = {0, 0, 0, 1, 1};
    const int16_t p[] = {1};
    for (int r = 0; r < 2; ++r) {
      ids.append(row, 5);
      seg.append(segs, 5);
      pos.append(p, 1);
    }
    if (float_ids) {
      h5::Vlen<float> fids;
      const float frow[] = {1, 5, 2, 7, 2};
      fids.append(frow, 5);
      fids.append(frow, 5);
      f.write_vlen("input_ids", fids);
    } else {
      f.write_vlen("input_ids", ids);
    }
    f.write_vlen("segment_ids", seg);
    f.write_vlen("masked_lm_positions", pos);
    f.write_vlen("masked_lm_ids", pos);
    if (packed_len > 0) {
      h5::Vlen<int16_t> lens, mlens;
      h5::Vlen<int8_t> nsp;
      const int16_t l[] = {static_cast<int16_t>(packed_len)}, ml[] = {1};
      const int8_t n[] = {0};
      for (int r = 0; r < 2; ++r) {
        lens.append(l, 1);
        mlens.append(ml, 1);
        nsp.append(n, 1);
      }
      f.write_vlen("packed_input_len", lens);
      f.write_vlen("packed_masked_lm_len", mlens);
      f.write_vlen("next_sentence_labels", nsp);
    } else {
      f.write("next_sentence_labels", std::vector<int8_t>(nsp_rows, 0), {nsp_rows});
    }
    f.commit();
  };
  o = base_options("varlength.hdf5", true);
  write_varlength(dir / "ok.hdf5", false, 2, 0);
  o.files = {dir / "ok.hdf5"};
  EXPECT_EQ(input_error(o), "");  // the helper's file is valid: the cases below differ in one thing
  write_varlength(dir / "float.hdf5", true, 2, 0);
  o.files = {dir / "float.hdf5"};
  named(input_error(o), "float.hdf5", "input_ids");
  write_varlength(dir / "shape.hdf5", false, 3, 0);
  o.files = {dir / "shape.hdf5"};
  named(input_error(o), "shape.hdf5", "next_sentence_labels");
  write_varlength(dir / "packed_ok.hdf5", false, 0, 5);
  o.files = {dir / "packed_ok.hdf5"};
  EXPECT_EQ(input_error(o), "");
  write_varlength(dir / "packed_bad.hdf5", false, 0, 4);
  o.files = {dir / "packed_bad.hdf5"};
  named(input_error(o), "packed_bad.hdf5", "packed_input_len");
  // Bad options.
  o = base_options("varlength.hdf5", true);
  o.batch_rows = 0;
  EXPECT_THROW(PretrainingReader{o}, InputError);
  o = base_options("varlength.hdf5", true);
  o.rank = 2;
  EXPECT_THROW(PretrainingReader{o}, InputError);
}
