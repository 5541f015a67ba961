// The length index of a shard, and reading single rows of a shard through it: what lets a rank deal out balanced
// batches from the lengths of a step's whole global batch while it reads the bytes of its own rows only.
//
// The index of SHARD is an HDF5 file beside it, SHARD.lengths, written by `bertperf data` with the shards it makes
// (or by `bertperf data --index SHARD...` for shards made elsewhere), else built on the shard's first open and
// cached there (kept in memory for the run, and said once on stderr, where that folder cannot be written). It
// holds, per row: real tokens, masked-LM predictions and sequences (a packed row's), and where the row's values of
// every dataset of the layout lie in the shard (core/hdf5.h ValuePlaces); the shard's largest token id and label
// (a run's vocabulary is checked against them at open); and the shard's size and modification time when it was
// written. Building it reads the whole shard once and checks every record as the reader always
// has (data/layouts.h), so a bad shard is one InputError before training starts.
//
// Opening checks the index is its shard's: a shard whose size changed since is an InputError ("changed after its
// index was written"); one whose modification time alone changed (a copy) is indexed anew in memory and compared,
// and refused where the two disagree. Reading a row checks again what it can see at no extra cost (the size HDF5
// stored before each vlen row's values, a fixed row's mask around its length, a packed row's lengths against the
// index), and every value as the reader always has, so no batch is built from rows the index does not describe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/batch.h"
#include "data/layouts.h"

namespace bertperf {

class ShardIndex {
 public:
  // The shard's index (above): read from SHARD.lengths after checking it, or built and cached.
  static std::shared_ptr<const ShardIndex> open(const std::string& shard);
  // Builds the index of `shard` from the shard and writes it beside it, replacing any (what `bertperf data` does).
  static void write(const std::string& shard);
  // The index built from the shard, written nowhere.
  static std::shared_ptr<ShardIndex> build(const std::string& shard);
  static std::string path_of(const std::string& shard);  // SHARD.lengths

  const std::string& shard() const { return shard_; }
  ShardLayout layout() const { return layout_; }
  size_t rows() const { return tokens_.size(); }
  int64_t sequences() const { return sequences_; }
  int tokens(size_t row) const { return tokens_[row]; }
  int predictions(size_t row) const { return predictions_[row]; }
  int row_sequences(size_t row) const { return row_sequences_[row]; }
  // The largest token id and masked-LM label in the shard, each with the first row that holds it: a run checks its
  // vocabulary against them when it opens the shard, before any row is read.
  struct Largest {
    int64_t value = -1, row = -1;
  };
  Largest largest_token() const { return largest_token_; }
  Largest largest_label() const { return largest_label_; }
  // Bytes of the index read to open it (its lengths).
  uint64_t bytes() const { return bytes_; }

  struct Column;  // one dataset of the layout (shard_index.cpp)
  ~ShardIndex();

 private:
  friend class ShardRows;
  ShardIndex();
  static std::shared_ptr<ShardIndex> read(const std::string& shard, const std::string& index_path);
  void save(const std::string& index_path) const;
  bool same_rows(const ShardIndex& other) const;

  std::string shard_;
  ShardLayout layout_ = ShardLayout::VARLENGTH;
  int64_t sequences_ = 0;
  uint64_t shard_bytes_ = 0;
  int64_t shard_mtime_ns_ = 0;
  std::vector<int16_t> tokens_, predictions_;
  std::vector<int8_t> row_sequences_;
  Largest largest_token_, largest_label_;
  std::vector<Column> columns_;
  bool direct_ = false;            // every column lies where plain reads find it
  std::vector<int64_t> places_;    // in memory (a fresh index): rows x vlen columns, row-major
  std::string places_file_;        // or in the index file (one read per row): at places_offset_
  uint64_t places_offset_ = 0;
  uint64_t bytes_ = 0;
};

// Reads single rows of one shard through its index, straight into a batch (data/batch.h BatchWriter: the file's
// bytes widened into the caller's memory, one copy); counts the bytes it reads, the shard's and the index's. One
// object per shard and thread.
class ShardRows {
 public:
  struct Limits {
    int32_t vocab_size = 0;   // token ids and labels below it (0: unchecked)
    int max_predictions = 0;  // masked-LM predictions per sequence (0: unchecked)
  };
  ShardRows(std::shared_ptr<const ShardIndex> index, Limits limits);
  ~ShardRows();
  ShardRows(const ShardRows&) = delete;
  ShardRows& operator=(const ShardRows&) = delete;

  // Adds row `row`'s sequences to `out` (a packed row's in their order), checked (above), without ending the batch's
  // row (a row the reader packs is several of the shard's); an InputError naming the shard and the row when
  // anything disagrees.
  void read(size_t row, BatchWriter& out);
  const ShardIndex& index() const { return *index_; }
  uint64_t shard_bytes_read() const { return shard_bytes_read_; }
  uint64_t value_bytes_read() const { return value_bytes_read_; }  // of the rows' values (their own bytes)
  uint64_t index_bytes_read() const { return index_bytes_read_; }

 private:
  // `count` values of column c (ShardIndex::Column) of `row` from its element `first` into dst.
  void column(size_t c, size_t row, size_t first, size_t count, int32_t* dst);

  struct Impl;
  std::shared_ptr<const ShardIndex> index_;
  Limits limits_;
  std::unique_ptr<Impl> impl_;
  uint64_t shard_bytes_read_ = 0, value_bytes_read_ = 0, index_bytes_read_ = 0;
};

}  // namespace bertperf
