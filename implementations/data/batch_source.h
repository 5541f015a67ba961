// Where every batch comes from: a BatchSource knows the shape of the batches it hands out when it is built, and
// writes the next one into memory the caller owns (a BatchView: a pinned block, model/batch_stage.h, or a Batch's
// vectors). Three sources make every batch of the project: the HDF5 reader (data/reader.h), the synthetic source
// (below: the step benchmark's and the tests' batches) and the cached source (an
// eval set read once, below).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "data/batch.h"

namespace bertperf {

// What every batch of a source holds: whether its rows are packed, and its fixed capacity.
struct BatchShape {
  bool packed = false;
  BatchCapacity capacity;
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual BatchShape shape() const = 0;
  // Sequences in one pass over the source (its share of them on this rank).
  virtual int64_t samples() const = 0;
  // Writes the next batch into `out` (of shape().capacity, its earlier contents overwritten) and returns true, or
  // returns false at the end of a pass that does not repeat. Bad data is an InputError from here.
  virtual bool next(BatchView& out) = 0;
  // The next batch into a Batch, its vectors sized to the capacity.
  bool next(Batch& batch);
};

// Batches of random tokens in given packings (the step benchmark's MLPerf shapes, the tests' batches): batch k has
// the rows packings[k % P] (each row its sequences' shapes, end to end) and draws its token ids, masked-LM labels
// (from [5, vocab)), its masked-LM positions (`predictions` distinct positions after a sequence's first token, in
// order) and next-sentence labels from mt19937(seed + k % P); segment B is a sequence's second half. One pass is
// the P packings; the source repeats them when asked.
struct SequenceShape {
  int length = 0;
  int predictions = 0;
};
using Packing = std::vector<std::vector<SequenceShape>>;  // rows of sequences

class SyntheticSource : public BatchSource {
 public:
  SyntheticSource(BatchShape shape, std::vector<Packing> packings, int vocab, uint32_t seed, bool repeat = true);
  using BatchSource::next;
  bool next(BatchView& out) override;
  BatchShape shape() const override { return shape_; }
  int64_t samples() const override;

 private:
  BatchShape shape_;
  std::vector<Packing> packings_;
  int vocab_;
  uint32_t seed_;
  bool repeat_;
  size_t next_ = 0;
};

// Batches held in memory, handed out in order, one pass at a time: an eval set read once from its reader and
// evaluated again and again (rewind() starts the next pass), or given batches (tests), repeated when asked.
class CachedSource : public BatchSource {
 public:
  // One whole pass of `source` (which must end).
  explicit CachedSource(BatchSource& source, bool repeat = false);
  CachedSource(BatchShape shape, std::vector<Batch> batches, bool repeat = false);
  using BatchSource::next;
  bool next(BatchView& out) override;
  BatchShape shape() const override { return shape_; }
  int64_t samples() const override { return samples_; }
  void rewind() { next_ = 0; }
  size_t size() const { return batches_.size(); }

 private:
  BatchShape shape_;
  std::vector<Batch> batches_;
  int64_t samples_ = 0;
  bool repeat_ = false;
  size_t next_ = 0;
};

}  // namespace bertperf
