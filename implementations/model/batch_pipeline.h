// The batches of a step on their way from a source (data/batch_source.h) into backend memory: the pipeline owns
// the staging (model/batch_stage.h: two sets of a step's micro-batches, taking turns, so a captured step knows its
// buffers by set) and the read-ahead. The source writes each batch straight into a stage's pinned block; the stage
// adds the loss weights and uploads it.
//
// Read-ahead follows the backend's asynchrony (Capabilities::asynchronous): on an asynchronous backend (a GPU,
// cpu-async) a thread fills the other set's pinned blocks while a step runs, and the caller asks for the next
// step's batches after launching a step, so their uploads are queued behind the running step
// (harness/train_session.cpp). On a synchronous backend the batches are read when asked for, on the caller's
// thread (its cores are the step's). Either way the time next() spends waiting for the source is counted: a
// training run logs it (0 when the read-ahead keeps up).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/backend.h"
#include "data/batch_source.h"
#include "model/batch_stage.h"

namespace bertperf {

// One step's micro-batches in backend memory, from staging set `set`.
struct StagedStep {
  int set = 0;
  std::vector<const DeviceBatch*> micro;
  int64_t sequences = 0;  // real sequences, summed over the micro-batches
};

class BatchPipeline {
 public:
  BatchPipeline(Backend& backend, BatchSource& source, int micro_batches, LossWeighting weighting);
  ~BatchPipeline();
  BatchPipeline(const BatchPipeline&) = delete;
  BatchPipeline& operator=(const BatchPipeline&) = delete;

  // The next step's micro-batches, their uploads started; false when the source ran out before a whole step (the
  // end of a pass that does not repeat). Errors of the source are thrown from here. The batches of a set stay valid
  // until the set is handed out again, two calls later.
  bool next(StagedStep& out);
  // Whether batches are read ahead on a thread (an asynchronous backend).
  bool reads_ahead() const;
  // Seconds next() has waited for the source in all.
  double wait_seconds() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bertperf
