// The training-data reader: MLPerf HDF5 shards (fixed-length, variable-length or packed layouts)
// turned into Batches for the model. Shards are split across ranks, samples shuffled per epoch from
// the run seed, and the next batch is read on a background thread while the current one trains.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/batch.h"

namespace bertperf {

struct ReaderOptions {
  std::vector<std::string> files;
  int rank = 0;
  int world_size = 1;
  uint64_t seed = 0;
  int batch_rows = 0;        // rows per batch on this rank
  int seq_len = 512;         // S: rows are padded to this
  int max_predictions = 76;  // masked-LM slots per sequence
  bool shuffle = true;       // false for eval: the file order, exactly
  bool repeat = true;        // false for eval: stop after one pass
  bool drop_last = true;     // false for eval: the last, smaller batch is kept
};

class PretrainingReader {
 public:
  explicit PretrainingReader(ReaderOptions options);
  ~PretrainingReader();
  // Fills `batch` and returns true, or returns false at the end of a non-repeating pass.
  bool next(Batch& batch);
  // Total samples over this rank's shards (sequences, also for packed rows).
  int64_t samples() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bertperf
