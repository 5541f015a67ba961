// The training-data reader: MLPerf HDF5 shards (fixed-length, variable-length or packed layouts,
// data/layouts.h) turned into batches for the model, the BatchSource (data/batch_source.h) of training and eval.
// Shards are split across ranks and samples shuffled per epoch from the run seed. The reader plans from each
// shard's length index (data/shard_index.h: per row, its tokens, predictions and sequences) and reads the bytes of
// the rows it hands out only, straight into the caller's batch; it reads on the caller's thread (the batch
// pipeline, model/batch_pipeline.h, reads ahead).
//
// Split across ranks: with at least as many files as ranks, rank r owns files r, r+W, r+2W, ... (in
// the order given); with fewer files, every rank reads every file and takes rows r, r+W, ... of
// their concatenation (after the common per-epoch shuffle when shuffling).
//
// Deterministic shuffle (shuffle = true), reproducible in Python with random.Random:
//   epoch_key(e)    = splitmix64(seed + e)
//   shard order     = Random(epoch_key(e)).shuffle(owned files)           (shard mode)
//   rows of shard i = Random(splitmix64(epoch_key(e) + i + 1)).shuffle(rows), i = the file's
//                     position in `files`                                 (shard mode)
//   all rows        = Random(epoch_key(e)).shuffle(rows of all files)     (sample mode)
// where splitmix64 is Steele et al.'s finalizer of x + 0x9e3779b97f4a7c15 and Random is CPython's
// (data/python_random.h). Batches run across shard boundaries; the end of an epoch drops an
// incomplete batch when drop_last is set.
//
// Packing: rows of a packed file keep the file's packing. With `pack` set, unpacked sequences are
// packed after the shuffle, per shard, into rows of at most `max_sequences_per_row` sequences and
// seq_len tokens, greedily: each sequence goes into the first of the last 64 open rows where its
// tokens and predictions fit, else opens a new row; rows are emitted in the order they were opened.
// Packed batches have `packed_max_predictions` masked-LM slots per row.
//
// Balanced batches (`balance`, for training): every rank reads all files as a world of one would
// (same order, same shuffle), in global batches of world_size x micro_batches x batch_rows rows
// (the rows of one optimizer step), and keeps its share. The step's rows are sorted by real tokens
// (most first, ties in read order) and dealt in rounds of B = world_size x micro_batches: each
// round's longest row goes to the batch with the fewest tokens so far, the next to the next fewest
// (ties: lowest batch index). Batch j = m x world_size + rank is this rank's m-th of the step, its
// rows in read order (the numbering of the training step's dropout, harness/train_step.h). Every batch gets batch_rows rows, and the real tokens of any two
// batches of a step differ by at most one longest row; W ranks with n micro-batches get exactly
// the batches one rank with W x n micro-batches gets. Every rank reads the length index of every
// row of a step and the bytes of its own rows only, and drop_last is required.
//
// Batches (data/batch.h): a batch's rows give their sequences end to end in row order (a packed
// row's sequences in their order), with capacity batch_rows x seq_len tokens, batch_rows x
// (max_sequences_per_row when packed, else 1) sequences and batch_rows x (packed_max_predictions
// when packed, else max_predictions) masked-LM slots. Slots follow the sequences' own order; with
// pad_predictions each row's real predictions are followed by its empty slots (weight 0, label 0,
// pointing at the row's first token) up to the row's slot count; without it only the real ones
// (and at least one slot per batch: weight 0 at the last row's first token). Past the real content
// every array is filler, as data/batch.h says.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/batch_source.h"
#include "data/layouts.h"
#include "data/packing.h"

namespace bertperf {

struct ReaderOptions {
  std::vector<std::string> files;
  int rank = 0;
  int world_size = 1;
  uint64_t seed = 0;
  int batch_rows = 0;        // rows per batch on this rank
  int seq_len = 512;         // S: the most tokens of a row
  int max_predictions = 76;  // masked-LM slots per sequence
  bool shuffle = true;       // false for eval: the file order, exactly
  bool repeat = true;        // false for eval: stop after one pass
  bool drop_last = true;     // false for eval: the last, smaller batch is kept
  int vocab_size = 30522;    // token ids and labels must be below this (0: unchecked)
  bool pack = false;         // pack unpacked sequences into rows (see above)
  int max_sequences_per_row = kPackedRow.max_sequences;    // data/packing.h
  int packed_max_predictions = kPackedRow.max_predictions;  // masked-LM slots per packed row
  bool balance = false;      // balanced batches (above)
  int micro_batches = 1;     // batches per optimizer step on each rank (with balance)
  // Every row gets exactly its max_predictions (or packed_max_predictions) masked-LM slots, the
  // empty ones with weight 0, as the reference's fixed-size tensors have. Off, only real
  // predictions are emitted (at least one slot per batch): weight-0 slots change neither the
  // loss, nor a gradient, nor the accuracy, and in short-sequence data they are half of the
  // slots, so half of the decoder's work over the whole vocabulary.
  bool pad_predictions = true;
};

// What a reader has read: the bytes of its rows from the shards, and of the length indexes (their lengths and the
// places of the rows it read).
struct ReadStats {
  uint64_t shard_bytes = 0;
  uint64_t value_bytes = 0;  // of the values the rows hold (what a read of exactly them would read)
  uint64_t index_bytes = 0;
  int64_t rows = 0;  // rows handed out
};

class PretrainingReader : public BatchSource {
 public:
  // Opens every file this rank reads and its length index (building it where there is none), and checks both and
  // the rows' lengths against the options; bad files throw InputError here.
  explicit PretrainingReader(ReaderOptions options);
  ~PretrainingReader() override;
  using BatchSource::next;
  // Fills `batch` and returns true, or returns false at the end of a non-repeating pass. Errors found while reading
  // (a damaged shard, a bad record, a shard that changed under its index) are thrown from here.
  bool next(BatchView& batch) override;
  // Total samples over this rank's shards (sequences, also for packed rows; in sample mode with packed files, those
  // of epoch 0's assignment).
  int64_t samples() const override;
  // Whether batches hold packed rows (a packed file, or `pack`), and the fixed sizes of every batch: batch_shape().
  BatchShape shape() const override;
  bool packed() const { return shape().packed; }
  BatchCapacity capacity() const { return shape().capacity; }
  ReadStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What every batch of a reader with options `o` holds, known before the reader is built: whether its rows are packed
// (a packed file keeps its packing; `pack` packs unpacked sequences; packed and unpacked files in one list are an
// InputError) and its fixed capacity (above). `layouts` are those of o.files, in order; without them each file is
// opened for its layout (its keys, not its data). The reader decides with this function too.
BatchShape batch_shape(const ReaderOptions& o, const std::vector<ShardLayout>& layouts);
BatchShape batch_shape(const ReaderOptions& o);
// The shape when the rows are packed or not (`o.pack` aside): what a config's batches hold before a file is read.
BatchShape batch_shape(const ReaderOptions& o, bool packed);

// The mixing function of the shuffle scheme above.
uint64_t splitmix64(uint64_t x);

}  // namespace bertperf
