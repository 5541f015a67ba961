// The data reader against shards written by h5py in all three MLPerf layouts
// (tests/golden/reader/, made by scripts/make_reader_golden.py together with the compacted batches a
// reader must produce, computed in Python from the batch contract, the batch layout and the
// documented shuffle scheme), plus the batch form itself (capacities, filler, the same batches from
// every layout), rank splitting, packing, and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/errors.h"
#include "core/hdf5.h"
#include "data/layouts.h"
#include "data/reader.h"
#include "data/shard_index.h"
#include "synthetic_data.h"
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
  o.max_sequences_per_row = expected()["max_sequences_per_row"];
  if (eval) {
    o.shuffle = false;
    o.repeat = false;
    o.drop_last = false;
  } else {
    o.seed = expected()["train_seed"];
  }
  return o;
}

// The form data/batch.h promises for any batch: every array at its capacity, offsets that start at 0 and cover
// the real tokens with sequences of 1 to max_seqlen tokens, positions counting from 0 in each sequence, real
// predictions inside the real tokens, and filler (0, weight 0, offsets repeating `tokens`) past the real content.
void expect_batch_form(const Batch& b) {
  const BatchCapacity& c = b.capacity;
  ASSERT_EQ(b.input_ids.size(), size_t(c.tokens));
  ASSERT_EQ(b.segment_ids.size(), size_t(c.tokens));
  ASSERT_EQ(b.position_ids.size(), size_t(c.tokens));
  ASSERT_EQ(b.cu_seqlens.size(), size_t(c.sequences) + 1);
  ASSERT_EQ(b.nsp_labels.size(), size_t(c.sequences));
  ASSERT_EQ(b.mlm_positions.size(), size_t(c.predictions));
  ASSERT_EQ(b.mlm_labels.size(), size_t(c.predictions));
  ASSERT_EQ(b.mlm_weights.size(), size_t(c.predictions));
  ASSERT_GE(b.sequences, 1);
  ASSERT_LE(b.sequences, c.sequences);
  ASSERT_LE(b.tokens, c.tokens);
  ASSERT_GE(b.predictions, 1);
  ASSERT_LE(b.predictions, c.predictions);
  EXPECT_EQ(b.cu_seqlens[0], 0);
  EXPECT_EQ(b.cu_seqlens[b.sequences], b.tokens);
  for (int s = 0; s < b.sequences; ++s) {
    const int len = b.cu_seqlens[s + 1] - b.cu_seqlens[s];
    EXPECT_TRUE(len >= 1 && len <= c.max_seqlen) << "sequence " << s << " has " << len << " tokens";
    for (int j = 0; j < len; ++j) EXPECT_EQ(b.position_ids[b.cu_seqlens[s] + j], j) << "sequence " << s;
  }
  for (int m = 0; m < b.predictions; ++m) {
    EXPECT_TRUE(b.mlm_positions[m] >= 0 && b.mlm_positions[m] < b.tokens) << "slot " << m;
    EXPECT_TRUE(b.mlm_weights[m] == 1.0f || (b.mlm_weights[m] == 0.0f && b.mlm_labels[m] == 0)) << "slot " << m;
  }
  for (int t = b.tokens; t < c.tokens; ++t)
    EXPECT_TRUE(b.input_ids[t] == 0 && b.segment_ids[t] == 0 && b.position_ids[t] == 0) << "filler token " << t;
  for (int s = b.sequences; s < c.sequences; ++s) {
    EXPECT_EQ(b.cu_seqlens[s + 1], b.tokens) << "filler sequence " << s;
    EXPECT_EQ(b.nsp_labels[s], 0) << "filler sequence " << s;
  }
  for (int m = b.predictions; m < c.predictions; ++m)
    EXPECT_TRUE(b.mlm_positions[m] == 0 && b.mlm_labels[m] == 0 && b.mlm_weights[m] == 0.0f) << "filler slot " << m;
}

BatchCapacity capacity_of(const nlohmann::json& c) {
  return {c["tokens"].get<int>(), c["sequences"].get<int>(), c["predictions"].get<int>(), c["max_seqlen"].get<int>()};
}

void expect_capacity(const BatchCapacity& got, const BatchCapacity& want) {
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.sequences, want.sequences);
  EXPECT_EQ(got.predictions, want.predictions);
  EXPECT_EQ(got.max_seqlen, want.max_seqlen);
}

void expect_batch(const Batch& got, const nlohmann::json& want, size_t index) {
  SCOPED_TRACE("batch " + std::to_string(index));
  expect_batch_form(got);
  expect_capacity(got.capacity, capacity_of(want["capacity"]));
  EXPECT_EQ(got.tokens, want["tokens"].get<int>());
  EXPECT_EQ(got.sequences, want["sequences"].get<int>());
  EXPECT_EQ(got.predictions, want["predictions"].get<int>());
  EXPECT_EQ(got.input_ids, want["input_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(got.segment_ids, want["segment_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(got.position_ids, want["position_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(got.cu_seqlens, want["cu_seqlens"].get<std::vector<int32_t>>());
  EXPECT_EQ(got.nsp_labels, want["nsp_labels"].get<std::vector<int32_t>>());
  EXPECT_EQ(got.mlm_positions, want["mlm_positions"].get<std::vector<int32_t>>());
  EXPECT_EQ(got.mlm_labels, want["mlm_labels"].get<std::vector<int32_t>>());
  EXPECT_EQ(got.mlm_weights, want["mlm_weights"].get<std::vector<float>>());
}

// Reads want.size() batches and compares them; with expect_end, the reader must stop there.
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

// Every batch of a pass; each is checked for the batch form.
std::vector<Batch> all_batches(PretrainingReader& reader) {
  std::vector<Batch> out;
  Batch b;
  while (reader.next(b)) {
    expect_batch_form(b);
    out.push_back(std::move(b));
  }
  return out;
}

// A sequence as (nsp, tokens), for multiset comparisons across ranks and packings.
using SeqKey = std::pair<int, std::vector<int32_t>>;

void add_sequences(const Batch& b, std::multiset<SeqKey>& out) {
  for (int s = 0; s < b.sequences; ++s)
    out.insert({b.nsp_labels[s], std::vector<int32_t>(b.input_ids.begin() + b.cu_seqlens[s],
                                                      b.input_ids.begin() + b.cu_seqlens[s + 1])});
}

std::multiset<SeqKey> sequences_of(PretrainingReader& reader) {
  std::multiset<SeqKey> out;
  for (const Batch& b : all_batches(reader)) add_sequences(b, out);
  return out;
}

// The real content of a batch (the parts before the filler), which does not depend on how the sequences were
// grouped into rows when the reader emits real predictions only.
struct Content {
  int tokens, sequences, predictions;
  std::vector<int32_t> input_ids, segment_ids, position_ids, cu_seqlens, nsp_labels, mlm_positions, mlm_labels;
  std::vector<float> mlm_weights;
  bool operator==(const Content&) const = default;
};

Content content(const Batch& b) {
  const auto head = [](const auto& v, int n) { return std::vector<typename std::decay_t<decltype(v)>::value_type>(v.begin(), v.begin() + n); };
  return {b.tokens, b.sequences, b.predictions,
          head(b.input_ids, b.tokens), head(b.segment_ids, b.tokens), head(b.position_ids, b.tokens),
          head(b.cu_seqlens, b.sequences + 1), head(b.nsp_labels, b.sequences),
          head(b.mlm_positions, b.predictions), head(b.mlm_labels, b.predictions), head(b.mlm_weights, b.predictions)};
}

void expect_same_batches(const std::vector<Batch>& a, const std::vector<Batch>& b, bool with_capacity) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE("batch " + std::to_string(i));
    EXPECT_TRUE(content(a[i]) == content(b[i]));
    if (with_capacity) {
      expect_capacity(a[i].capacity, b[i].capacity);
      EXPECT_EQ(a[i].input_ids, b[i].input_ids);  // the filler too
      EXPECT_EQ(a[i].cu_seqlens, b[i].cu_seqlens);
      EXPECT_EQ(a[i].mlm_positions, b[i].mlm_positions);
      EXPECT_EQ(a[i].mlm_weights, b[i].mlm_weights);
    }
  }
}

using bertperf::testing::TempDir;
using bertperf::testing::synthetic_sequences;

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

TEST(Reader, CapacitiesFollowRowsAndLayout) {
  const int rows = expected()["batch_rows"], S = expected()["seq_len"];
  const int P = expected()["max_predictions"], packed_P = expected()["packed_max_predictions"];
  struct Case {
    const char* file;
    bool pack;
    int per_row;
    BatchCapacity want;
  };
  for (const Case& c : {Case{"fixed.hdf5", false, 3, {rows * S, rows, rows * P, S}},
                        Case{"varlength.hdf5", false, 3, {rows * S, rows, rows * P, S}},
                        Case{"packed.hdf5", false, 3, {rows * S, rows * 3, rows * packed_P, S}},
                        Case{"packed.hdf5", false, 5, {rows * S, rows * 5, rows * packed_P, S}},
                        Case{"varlength.hdf5", true, 2, {rows * S, rows * 2, rows * packed_P, S}}}) {
    SCOPED_TRACE(std::string(c.file) + (c.pack ? " packed by the reader" : "") + ", per row " + std::to_string(c.per_row));
    ReaderOptions o = base_options(c.file, true);
    o.pack = c.pack;
    o.max_sequences_per_row = c.per_row;
    // Known before a reader is built (what sizes a model), from the files' layouts alone.
    const BatchShape shape = batch_shape(o);
    EXPECT_EQ(shape.packed, c.pack || std::string(c.file) == "packed.hdf5");
    expect_capacity(shape.capacity, c.want);
    PretrainingReader reader(o);
    expect_capacity(reader.capacity(), c.want);
    // Every batch has it, the last and smaller one of the pass too.
    const auto batches = all_batches(reader);
    ASSERT_GE(batches.size(), 2u);
    for (const Batch& b : batches) expect_capacity(b.capacity, c.want);
  }
  // Packed and unpacked files in one list: refused before a reader is built, as by the reader.
  ReaderOptions mixed = base_options("packed.hdf5", true);
  mixed.files.push_back(base_options("varlength.hdf5", true).files[0]);
  EXPECT_THROW(batch_shape(mixed), InputError);
  EXPECT_NE(input_error(mixed).find("mixed"), std::string::npos);
}

TEST(Reader, WithoutPaddedPredictionsOnlyRealSlots) {
  // The contract's batches with every weight-0 slot taken out, the filler after the real slots.
  for (const auto& [file, key] : {std::pair{"varlength.hdf5", "eval_unpacked"}, std::pair{"packed.hdf5", "eval_packed"}}) {
    SCOPED_TRACE(file);
    ReaderOptions o = base_options(file, true);
    o.pad_predictions = false;
    PretrainingReader reader(o);
    const auto batches = all_batches(reader);
    const nlohmann::json& want = expected()[key];
    ASSERT_EQ(batches.size(), want.size());
    for (size_t i = 0; i < batches.size(); ++i) {
      SCOPED_TRACE("batch " + std::to_string(i));
      const Batch& b = batches[i];
      expect_capacity(b.capacity, capacity_of(want[i]["capacity"]));
      EXPECT_EQ(b.input_ids, want[i]["input_ids"].get<std::vector<int32_t>>());
      EXPECT_EQ(b.cu_seqlens, want[i]["cu_seqlens"].get<std::vector<int32_t>>());
      std::vector<int32_t> pos(b.capacity.predictions, 0), lab(b.capacity.predictions, 0);
      std::vector<float> weight(b.capacity.predictions, 0.0f);
      int real = 0;
      for (size_t m = 0; m < want[i]["mlm_weights"].size(); ++m) {
        if (want[i]["mlm_weights"][m].get<float>() == 0.0f) continue;
        pos[real] = want[i]["mlm_positions"][m];
        lab[real] = want[i]["mlm_labels"][m];
        weight[real++] = 1.0f;
      }
      EXPECT_EQ(b.predictions, real);
      EXPECT_EQ(b.mlm_positions, pos);
      EXPECT_EQ(b.mlm_labels, lab);
      EXPECT_EQ(b.mlm_weights, weight);
    }
  }
}

TEST(Reader, BatchWithoutPredictionsKeepsOneEmptySlot) {
  // Sequences with nothing masked: without padded predictions the batch still has one slot, weight 0, at the
  // last row's first token.
  TempDir dir;
  SequenceStore s = synthetic_sequences(5, 32, 64, 5, 3);
  s.mlm_positions.clear();
  s.mlm_ids.clear();
  s.mlm_offsets.assign(s.size() + 1, 0);
  write_varlength(dir / "unmasked.hdf5", s);
  ReaderOptions o;
  o.files = {dir / "unmasked.hdf5"};
  o.batch_rows = 2;
  o.seq_len = 32;
  o.max_predictions = 5;
  o.vocab_size = 64;
  o.shuffle = o.repeat = o.drop_last = false;
  o.pad_predictions = false;
  PretrainingReader reader(o);
  const auto batches = all_batches(reader);
  ASSERT_EQ(batches.size(), 3u);
  for (const Batch& b : batches) {
    EXPECT_EQ(b.predictions, 1);
    EXPECT_EQ(b.mlm_positions[0], b.cu_seqlens[b.sequences - 1]);
    EXPECT_EQ(b.mlm_weights[0], 0.0f);
    EXPECT_EQ(b.mlm_labels[0], 0);
  }
}

TEST(Reader, EveryLayoutGivesTheSameBatches) {
  // The same sequences written as fixed-length, variable-length and packed (two per row) files.
  TempDir dir;
  const int S = 64, P = 5;
  const SequenceStore seqs = synthetic_sequences(22, 32, 64, P, 5);
  write_fixed(dir / "same.fixed.hdf5", seqs, S, P);
  write_varlength(dir / "same.varlength.hdf5", seqs);
  write_packed(dir / "same.packed.hdf5", seqs, S, {2, 2 * P});  // consecutive pairs: every pair fits a row
  const auto read = [&](const char* layout, int rows, bool pad, bool eval) {
    ReaderOptions o;
    o.files = {dir / (std::string("same.") + layout + ".hdf5")};
    o.batch_rows = rows;
    o.seq_len = S;
    o.max_predictions = P;
    o.packed_max_predictions = 2 * P;
    o.vocab_size = 64;
    o.pad_predictions = pad;
    o.seed = 3;
    if (eval) o.shuffle = o.repeat = o.drop_last = false;
    PretrainingReader reader(o);
    std::vector<Batch> out = all_batches(reader);  // eval: the whole pass
    return out;
  };
  const auto first = [](PretrainingReader& reader, int n) {
    std::vector<Batch> out(n);
    for (Batch& b : out) EXPECT_TRUE(reader.next(b));
    return out;
  };
  // Fixed and variable-length files: identical batches, filler and all, padded slots or not.
  for (bool pad : {true, false}) {
    SCOPED_TRACE(pad ? "padded predictions" : "real predictions");
    const auto fixed = read("fixed", 4, pad, true);
    ASSERT_EQ(fixed.size(), 6u);
    expect_same_batches(fixed, read("varlength", 4, pad, true), true);
  }
  // In training order too (one file, so the same shuffle of the same rows).
  {
    ReaderOptions o;
    o.batch_rows = 3;
    o.seq_len = S;
    o.max_predictions = P;
    o.vocab_size = 64;
    o.seed = 9;
    o.files = {dir / "same.fixed.hdf5"};
    PretrainingReader fixed(o);
    o.files = {dir / "same.varlength.hdf5"};
    PretrainingReader varlength(o);
    expect_same_batches(first(fixed, 10), first(varlength, 10), true);
  }
  // A packed file of two sequences per row, B rows a batch, against 2B unpacked rows: the same sequences,
  // offsets and real predictions in the same order (the capacities follow the rows, so they differ).
  const auto packed = read("packed", 2, false, true);
  ASSERT_EQ(packed.size(), 6u);
  expect_same_batches(packed, read("varlength", 4, false, true), false);
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
  const int P = o.packed_max_predictions;
  const int cls = expected()["cls_id"];
  int rows = 0;
  for (const Batch& b : all_batches(reader)) {
    // Each row has its P slots: its real predictions, then empty ones at its first token. So slot k*P lies in
    // row k's first sequence (every golden sequence has a prediction), which recovers the rows.
    ASSERT_EQ(b.predictions % P, 0);
    const int batch_rows = b.predictions / P;
    ASSERT_LE(batch_rows, o.batch_rows);
    rows += batch_rows;
    const auto sequence_of = [&](int token) {
      return int(std::upper_bound(b.cu_seqlens.begin(), b.cu_seqlens.begin() + b.sequences + 1, token) - b.cu_seqlens.begin()) - 1;
    };
    std::vector<int> row_start(batch_rows + 1, b.sequences);
    for (int k = 0; k < batch_rows; ++k) row_start[k] = sequence_of(b.mlm_positions[k * P]);
    EXPECT_EQ(row_start[0], 0);
    for (int k = 0; k < batch_rows; ++k) {
      SCOPED_TRACE("row " + std::to_string(k));
      const int first = row_start[k], end = row_start[k + 1];
      ASSERT_LT(first, end);
      EXPECT_LE(end - first, o.max_sequences_per_row);
      EXPECT_LE(b.cu_seqlens[end] - b.cu_seqlens[first], o.seq_len);
      for (int m = k * P; m < (k + 1) * P; ++m) {
        if (b.mlm_weights[m] > 0) {
          // A real prediction lies in one of the row's sequences, never on its [CLS].
          const int seq = sequence_of(b.mlm_positions[m]);
          EXPECT_TRUE(seq >= first && seq < end) << "slot " << m;
          EXPECT_NE(b.mlm_positions[m], b.cu_seqlens[seq]) << "slot " << m;
        } else {
          EXPECT_EQ(b.mlm_positions[m], b.cu_seqlens[first]) << "slot " << m;
        }
      }
    }
    for (int s = 0; s < b.sequences; ++s) EXPECT_EQ(b.input_ids[b.cu_seqlens[s]], cls) << "sequence " << s;
    add_sequences(b, packed);
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
  // A packed row with more sequences than a batch has room for per row.
  o = base_options("packed.hdf5", true);
  o.max_sequences_per_row = 2;
  named(input_error(o), "packed.hdf5", "max_sequences_per_row");
  // Bad options.
  o = base_options("varlength.hdf5", true);
  o.batch_rows = 0;
  EXPECT_THROW(PretrainingReader{o}, InputError);
  o = base_options("varlength.hdf5", true);
  o.rank = 2;
  EXPECT_THROW(PretrainingReader{o}, InputError);
}

// Balanced batches (reader.h) on variable-length and packed data, against a world of one reading the same files
// with a step's rows in one batch: each step's sequences land on exactly one rank; the real tokens of a step's
// batches differ by at most one longest row; ranks x micro-batches are interchangeable; reruns agree.
TEST(Reader, BalancedBatchesDealEachStepOnce) {
  TempDir dir("bertperf_balance");
  std::vector<std::string> files;
  for (uint32_t f = 0; f < 3; ++f) {
    files.push_back(dir / ("shard_" + std::to_string(f) + ".hdf5"));
    write_varlength(files.back(), synthetic_sequences(45, 32, 64, 5, 100 + f));
  }
  const int rows = 3;
  auto options = [&](bool pack, int world, int rank, int micro, bool balance) {
    ReaderOptions o;
    o.files = files;
    o.seq_len = 32;
    o.max_predictions = 5;
    o.vocab_size = 64;
    o.seed = 17;
    o.repeat = false;
    o.pack = pack;
    o.packed_max_predictions = 12;
    o.batch_rows = balance ? rows : rows * world * micro;
    o.world_size = balance ? world : 1;
    o.rank = balance ? rank : 0;
    o.micro_batches = micro;
    o.balance = balance;
    return o;
  };
  for (bool pack : {false, true}) {
    for (const auto& [W, n] : {std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}, std::pair{3, 1}}) {
      SCOPED_TRACE(cat(pack ? "packed" : "variable-length", ", ", W, " ranks x ", n, " micro-batches"));
      std::vector<Batch> global;  // one per step
      {
        PretrainingReader reader(options(pack, W, 0, n, false));
        global = all_batches(reader);
      }
      ASSERT_GE(global.size(), 3u);
      // batches[j] for j = m x W + rank: the order a step's micro-batches have in one rank's stream.
      std::vector<std::vector<Batch>> per_rank(W);
      for (int r = 0; r < W; ++r) {
        PretrainingReader reader(options(pack, W, r, n, true));
        per_rank[r] = all_batches(reader);
        ASSERT_EQ(per_rank[r].size(), global.size() * n);
        PretrainingReader again(options(pack, W, r, n, true));
        expect_same_batches(per_rank[r], all_batches(again), true);
      }
      size_t worst = 0, worst_in_order = 0;
      for (size_t step = 0; step < global.size(); ++step) {
        if (!pack) {  // the same step cut into W x n batches in read order, for comparison
          const Batch& g = global[step];
          int most = 0, least = INT32_MAX;
          for (int j = 0; j < W * n; ++j) {
            const int tokens = g.cu_seqlens[(j + 1) * rows] - g.cu_seqlens[j * rows];
            most = std::max(most, tokens);
            least = std::min(least, tokens);
          }
          worst_in_order = std::max(worst_in_order, size_t(most - least));
        }
        std::multiset<SeqKey> want, got;
        add_sequences(global[step], want);
        int longest = 0;  // the longest row: a sequence, or a packed row (at most seq_len)
        for (int s = 0; s < global[step].sequences; ++s)
          longest = std::max(longest, global[step].cu_seqlens[s + 1] - global[step].cu_seqlens[s]);
        if (pack) longest = 32;
        int most = 0, least = INT32_MAX;
        for (int r = 0; r < W; ++r) {
          int rank_tokens = 0;
          for (int m = 0; m < n; ++m) {
            const Batch& b = per_rank[r][step * n + m];
            add_sequences(b, got);
            most = std::max(most, b.tokens);
            least = std::min(least, b.tokens);
            rank_tokens += b.tokens;
          }
          EXPECT_GT(rank_tokens, 0);
        }
        EXPECT_EQ(got, want) << "step " << step;
        EXPECT_LE(most - least, longest) << "step " << step;
        worst = std::max(worst, size_t(most - least));
      }
      std::cout << (pack ? "packed" : "variable-length") << ", " << W << "x" << n << ": largest spread " << worst
                << " tokens over " << global.size() << " steps";
      if (!pack) std::cout << " (" << worst_in_order << " cut in read order)";
      std::cout << "\n";
      if (!pack) {
        EXPECT_LT(worst, worst_in_order);
      }
    }
  }
  // The same step's batches whether they are W ranks' single micro-batches or one rank's W micro-batches.
  for (bool pack : {false, true}) {
    PretrainingReader one(options(pack, 1, 0, 2, true));
    const std::vector<Batch> serial = all_batches(one);
    for (int r = 0; r < 2; ++r) {
      PretrainingReader rank(options(pack, 2, r, 1, true));
      const std::vector<Batch> mine = all_batches(rank);
      ASSERT_EQ(serial.size(), 2 * mine.size());
      std::vector<Batch> expected;
      for (size_t step = 0; step < mine.size(); ++step) expected.push_back(serial[2 * step + r]);
      expect_same_batches(mine, expected, true);
    }
  }
}

// The batches of every rank over three epochs, for fixed, variable-length and packed files and sequences the
// reader packs, at 1, 2, 8 and 64 ranks (shard mode, and sample mode where files are fewer than ranks), with and
// without balanced batches: the same bits as the reader before the length index gave (tests/golden/reader/
// batches_by_rank.json holds a digest of each case's batches, every rank's in turn, written by this test at that
// reader with BERTPERF_WRITE_READER_DIGESTS=FILE).
namespace {

uint64_t fnv1a(uint64_t h, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

uint64_t digest(uint64_t h, const Batch& b) {
  const int counts[3] = {b.tokens, b.sequences, b.predictions};
  h = fnv1a(h, counts, sizeof counts);
  for (const auto* v : {&b.input_ids, &b.segment_ids, &b.position_ids, &b.cu_seqlens, &b.nsp_labels,
                        &b.mlm_positions, &b.mlm_labels})
    h = fnv1a(h, v->data(), v->size() * 4);
  return fnv1a(h, b.mlm_weights.data(), b.mlm_weights.size() * 4);
}

}  // namespace

TEST(Reader, SameBatchesAtEveryRankCountAsBeforeTheLengthIndex) {
  TempDir dir("bertperf_ranks");
  // Five files per layout: sequences of 16 to 32 tokens (synthetic_data.h), packed two or three to a row of 64.
  std::map<std::string, std::vector<std::string>> files;
  for (uint32_t f = 0; f < 5; ++f) {
    const SequenceStore s = synthetic_sequences(240, 32, 64, 5, 300 + f);
    const std::string name = "part_" + std::to_string(f);
    files["fixed"].push_back(dir / (name + ".fixed.hdf5"));
    write_fixed(files["fixed"].back(), s, 32, 5);
    files["varlength"].push_back(dir / (name + ".varlength.hdf5"));
    write_varlength(files["varlength"].back(), s);
    files["packed"].push_back(dir / (name + ".packed.hdf5"));
    write_packed(files["packed"].back(), s, 64, {3, 12});
  }
  const char* write_to = std::getenv("BERTPERF_WRITE_READER_DIGESTS");
  nlohmann::json want, got = nlohmann::json::object();
  if (!write_to) {
    std::ifstream in(kDir + "batches_by_rank.json");
    want = nlohmann::json::parse(in);
  }
  for (const std::string data : {"fixed", "varlength", "packed", "varlength packed by the reader"}) {
    for (int W : {1, 2, 8, 64}) {
      for (bool balance : {false, true}) {
        const std::string name = cat(data, ", ", W, " ranks", balance ? ", balanced" : "");
        SCOPED_TRACE(name);
        const auto options = [&](int rank, bool repeat) {
          ReaderOptions o;
          o.files = files[data.substr(0, data.find(' '))];
          o.rank = rank;
          o.world_size = W;
          o.seed = 23;
          o.batch_rows = 2;
          o.seq_len = data == "fixed" || data == "varlength" ? 32 : 64;
          o.max_predictions = 5;
          o.vocab_size = 64;
          o.pack = data.find("by the reader") != std::string::npos;
          o.max_sequences_per_row = 3;
          o.packed_max_predictions = 12;
          o.balance = balance;
          o.micro_batches = balance && W < 64 ? 2 : 1;
          o.pad_predictions = W == 1 || W == 8;
          o.repeat = repeat;
          return o;
        };
        uint64_t h = 0xcbf29ce484222325ull;
        int64_t batches = 0;
        for (int rank = 0; rank < W; ++rank) {
          int64_t epoch = 0;  // the batches of one epoch, then three epochs' worth
          {
            PretrainingReader one_pass(options(rank, false));
            for (Batch b; one_pass.next(b);) ++epoch;
          }
          ASSERT_GT(epoch, 0) << "rank " << rank;
          PretrainingReader reader(options(rank, true));
          Batch b;
          for (int64_t k = 0; k < 3 * epoch; ++k) {
            ASSERT_TRUE(reader.next(b));
            h = digest(h, b);
          }
          batches += 3 * epoch;
        }
        got[name] = {{"batches", batches}, {"digest", cat(std::hex, h)}};
        if (!write_to) {
          ASSERT_TRUE(want.contains(name));
          EXPECT_EQ(got[name], want[name]);
        }
      }
    }
  }
  if (write_to) std::ofstream(write_to) << got.dump(1) << "\n";
}

// A shard's length index (data/shard_index.h) must be its shard's: a shard rewritten since its index was written, an
// index copied from another shard, and an index whose lengths were changed are each one InputError naming the
// shard, before a batch holds a row the index does not describe; a copy of shard and index (a new modification time,
// the same bytes) reads as the original.
TEST(Reader, LengthIndexMustBeItsShards) {
  TempDir dir("bertperf_index");
  const SequenceStore a = synthetic_sequences(30, 32, 64, 5, 41), b = synthetic_sequences(30, 32, 64, 5, 42);
  ReaderOptions o;
  o.batch_rows = 4;
  o.seq_len = 64;
  o.max_predictions = 5;
  o.vocab_size = 64;
  o.packed_max_predictions = 12;
  o.shuffle = o.repeat = o.drop_last = false;
  const auto batches_of = [&](const std::string& path) {
    o.files = {path};
    PretrainingReader reader(o);
    return all_batches(reader);
  };
  const auto expect_refused = [&](const std::string& path, const std::string& what) {
    o.files = {path};
    const std::string message = input_error(o);
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(what), std::string::npos) << message;
  };
  for (const std::string layout : {"fixed", "varlength", "packed"}) {
    SCOPED_TRACE(layout);
    const std::string shard = dir / (layout + ".hdf5"), index = ShardIndex::path_of(shard);
    const auto write = [&](const SequenceStore& s) {
      if (layout == "fixed") write_fixed(shard, s, 32, 5);
      if (layout == "varlength") write_varlength(shard, s);
      if (layout == "packed") write_packed(shard, s, 64, {3, 12});
    };
    write(a);
    ShardIndex::write(shard);
    const std::vector<Batch> want = batches_of(shard);
    // A copy of both (new modification times): the same batches.
    fs::copy_file(shard, dir / "copy.hdf5", fs::copy_options::overwrite_existing);
    fs::copy_file(index, dir / "copy.hdf5.lengths", fs::copy_options::overwrite_existing);
    fs::last_write_time(dir / "copy.hdf5", fs::last_write_time(shard) + std::chrono::seconds(5));
    expect_same_batches(batches_of(dir / "copy.hdf5"), want, true);
    // The shard rewritten under its index, with other rows.
    const auto index_bytes = fs::file_size(index);
    fs::copy_file(index, dir / "saved.lengths", fs::copy_options::overwrite_existing);
    write(b);
    fs::copy_file(dir / "saved.lengths", index, fs::copy_options::overwrite_existing);
    ASSERT_EQ(fs::file_size(index), index_bytes);
    expect_refused(shard, "changed after its length index");
    // Another shard's index beside it.
    write(a);
    fs::copy_file(dir / "saved.lengths", index, fs::copy_options::overwrite_existing);
    fs::copy_file(dir / "copy.hdf5.lengths", dir / "other.hdf5.lengths", fs::copy_options::overwrite_existing);
    write_varlength(dir / "other.hdf5", synthetic_sequences(7, 32, 64, 5, 43));
    expect_refused(dir / "other.hdf5", "changed after its length index");
    fs::remove(dir / "other.hdf5.lengths");
    // An index whose lengths say otherwise, its shard's size and time kept: found when the row is read.
    ShardIndex::write(shard);
    {
      const h5::File in = h5::File::open(index);
      h5::File out = h5::File::create(dir / "tampered.lengths");
      for (const std::string& key : in.datasets()) {
        std::vector<int64_t> values = in.read<int64_t>(key);
        if (key == "tokens") values[3] -= 1;
        const h5::DatasetInfo info = in.info(key);
        if (info.type == h5::ElementType::I8) {
          out.write(key, std::vector<int8_t>(values.begin(), values.end()), info.shape);
        } else if (info.type == h5::ElementType::I16) {
          out.write(key, std::vector<int16_t>(values.begin(), values.end()), info.shape);
        } else {
          out.write(key, values, info.shape);
        }
      }
      for (const char* name : {"format", "layout"}) out.set_attr("", name, in.attr_string("", name));
      for (const char* name : {"shard_bytes", "shard_mtime_ns", "sequences", "direct", "largest_token",
                               "largest_token_row", "largest_label", "largest_label_row"})
        out.set_attr("", name, in.attr_int("", name));
      out.commit();
    }
    fs::rename(dir / "tampered.lengths", index);
    expect_refused(shard, "row 3: ");
    expect_refused(shard, "disagree");
    // Nothing of it trained on: the batches before the bad row's come out, the bad row's does not.
    o.files = {shard};
    PretrainingReader reader(o);
    Batch batch;
    EXPECT_THROW(
        {
          while (reader.next(batch)) {
          }
        },
        InputError);
    fs::remove(index);
    expect_same_batches(batches_of(shard), want, true);  // rebuilt from the shard
  }
}
