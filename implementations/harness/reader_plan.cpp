// The readers of a training job (reader_plan.h).
#include "harness/reader_plan.h"

#include "core/errors.h"

namespace bertperf {

ReaderOptions reader_options(const TrainConfig& c, DataSet set, int rank, int world, uint64_t seed) {
  ReaderOptions o;
  o.rank = rank;
  o.world_size = world;
  o.seq_len = c.seq_len;
  o.max_predictions = c.max_predictions;
  o.vocab_size = c.model.vocab_size;
  o.pad_predictions = false;  // the same loss and gradients, less decoder work
  if (set == DataSet::TRAIN) {
    o.files = c.train_files;
    o.seed = seed;
    o.batch_rows = c.local_batch_size;
    o.pack = c.packed;
    o.balance = c.balanced_batches;
    o.micro_batches = c.grad_accum_steps;
  } else {
    o.files = {c.eval_file};
    o.batch_rows = c.eval_batch_size;
    o.shuffle = false;
    o.repeat = false;
    o.drop_last = false;
  }
  return o;
}

BatchCapacity train_capacity(const TrainConfig& c) {
  return batch_shape(reader_options(c, DataSet::TRAIN, 0, 1), c.packed).capacity;
}

BatchCapacity eval_capacity(const TrainConfig& c) {
  return batch_shape(reader_options(c, DataSet::EVAL, 0, 1), c.packed).capacity;
}

ReaderPlan reader_plan(const TrainConfig& c, DataSet set, int rank, int world, uint64_t seed) {
  const ReaderOptions o = reader_options(c, set, rank, world, seed);
  std::vector<ShardLayout> layouts;
  for (const std::string& path : o.files) {
    layouts.push_back(detect_layout(path));
    if (set == DataSet::TRAIN && layouts.back() == ShardLayout::PACKED && !c.packed)
      throw_input(c.source + ": data", cat("field 'packed' is false, but the train file ", path,
                                           " holds packed rows (the packed layout): set \"packed\": true"));
  }
  return {o, batch_shape(o, layouts).capacity};
}

}  // namespace bertperf
