// The training-data reader: MLPerf HDF5 shards (fixed-length, variable-length or packed layouts,
// data/layouts.h) turned into Batches for the model. Shards are split across ranks, samples
// shuffled per epoch from the run seed, and the next batch is read on a background thread while
// the current one trains.
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
// the batches one rank with W x n micro-batches gets. Every rank reads every file (I/O grows
// with the ranks), and drop_last is required.
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

#include "data/batch.h"
#include "data/layouts.h"

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
  int max_sequences_per_row = 3;
  int packed_max_predictions = 80;  // slots per packed row: >= 0.15*512 + 3 halves, rounded up
  int prefetch = 2;          // batches prepared ahead
  bool balance = false;      // balanced batches (above)
  int micro_batches = 1;     // batches per optimizer step on each rank (with balance)
  // Every row gets exactly its max_predictions (or packed_max_predictions) masked-LM slots, the
  // empty ones with weight 0, as the reference's fixed-size tensors have. Off, only real
  // predictions are emitted (at least one slot per batch): weight-0 slots change neither the
  // loss, nor a gradient, nor the accuracy, and in short-sequence data they are half of the
  // slots, so half of the decoder's work over the whole vocabulary.
  bool pad_predictions = true;
};

class PretrainingReader {
 public:
  // Opens every file this rank reads and checks its layout; bad files throw InputError here.
  explicit PretrainingReader(ReaderOptions options);
  ~PretrainingReader();
  // Fills `batch` and returns true, or returns false at the end of a non-repeating pass. Errors
  // found while reading (a damaged shard, a bad record) are thrown from here.
  bool next(Batch& batch);
  // Total samples over this rank's shards (sequences, also for packed rows; in sample mode with
  // packed files, those of epoch 0's assignment).
  int64_t samples() const;
  // Whether batches hold packed rows (a packed file, or `pack`), and the fixed sizes of every batch this reader
  // hands out: its batch_shape().
  bool packed() const;
  BatchCapacity capacity() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What every batch of a reader with options `o` holds, known before the reader is built: whether its rows are packed
// (a packed file keeps its packing; `pack` packs unpacked sequences; packed and unpacked files in one list are an
// InputError) and its fixed capacity (above). `layouts` are those of o.files, in order; without them each file is
// opened for its layout (its keys, not its data). The reader decides with this function too.
struct BatchShape {
  bool packed = false;
  BatchCapacity capacity;
};
BatchShape batch_shape(const ReaderOptions& o, const std::vector<ShardLayout>& layouts);
BatchShape batch_shape(const ReaderOptions& o);

// The mixing function of the shuffle scheme above.
uint64_t splitmix64(uint64_t x);

}  // namespace bertperf
