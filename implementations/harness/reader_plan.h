// The data plan of a training job, from its config and its files: the one place where reader options and the
// capacity of their batches (which sizes the model, the schedule's sample count and the memory estimate) are derived. The training session, the probes and the tests
// build their readers from it.
#pragma once

#include <cstdint>

#include "data/reader.h"
#include "harness/train_config.h"

namespace bertperf {

enum class DataSet { TRAIN, EVAL };

struct ReaderPlan {
  ReaderOptions options;
  BatchCapacity capacity;  // of every batch a reader built from `options` hands out (data/reader.h batch_shape)
};

// The reader of `set` for rank `rank` of `world`, with run seed `seed`:
//   TRAIN  local_batch_size rows per batch, shuffled from the seed, packed as data.packed says, balanced when
//          distributed.balanced_batches says so; grad_accum_steps batches per step;
//   EVAL   eval_batch_size rows per batch, the file in order, one pass, the last (smaller) batch kept.
// Both hand out only real masked-LM predictions (ReaderOptions::pad_predictions off). The layouts of the files decide
// the rest, as the reader itself decides (batch_shape): a packed eval file is read as packed rows; packed train
// shards under "packed": false are an InputError naming the config's data.packed and the file (the config's
// packing also sets the schedule's sample count and the memory estimate, which are fixed before any file is read).
// Opens each file of the set for its layout (its keys, no data).
ReaderPlan reader_plan(const TrainConfig& config, DataSet set, int rank, int world, uint64_t seed = 0);
// The options alone, without opening a file.
ReaderOptions reader_options(const TrainConfig& config, DataSet set, int rank, int world, uint64_t seed = 0);

// The capacity of every training and eval batch as the config's packing says, before any file is read: the
// schedule's sample count and the memory estimate (harness/train_config.h) take them from here. The training one is
// exact (packed train shards need "packed": true); a packed eval file under "packed": false holds more sequences.
BatchCapacity train_capacity(const TrainConfig& config);
BatchCapacity eval_capacity(const TrainConfig& config);

}  // namespace bertperf
