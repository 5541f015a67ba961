// One optimizer step: the unit the timed run, `bertperf bench-step` and the tests all run, and the unit a GPU
// backend captures once and replays. It stages the step's micro-batches, runs forward and backward on each,
// reduces gradients across ranks, clips, and updates with LAMB, with every step-varying scalar (learning rate,
// bias corrections, dropout step, clip scale) in backend memory, and reads the step's statistics back once.
//
// Clipping follows the reference's gradient accumulation by default (PER_MICRO_BATCH): every micro-batch gradient,
// on every rank, is clipped to max_grad_norm on its own and added as g / (micro-batches x ranks); the sum is then
// reduced over ranks. So W ranks with n micro-batches each make the same update as one rank with n x W
// micro-batches. AFTER_REDUCTION (what NVIDIA does when it overlaps communication with the backward) sums the
// unclipped gradients, reduces them as the last micro-batch's backward makes each layer ready, and clips the sum.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/backend.h"
#include "data/batch.h"
#include "dist/reducer.h"
#include "model/batch_stage.h"
#include "model/bert.h"
#include "model/param_buffers.h"
#include "optim/lamb.h"

namespace bertperf {

enum class ClipMode { PER_MICRO_BATCH, AFTER_REDUCTION };

struct StepOptions {
  int micro_batches = 1;  // per rank
  int ranks = 1;
  int rank = 0;
  uint64_t seed = 0;      // dropout seed
  ClipMode clip = ClipMode::PER_MICRO_BATCH;
};

// What one step did on this rank (the caller sums it over ranks).
struct StepStats {
  LossStats loss;          // summed over this rank's micro-batches
  int64_t sequences = 0;   // real sequences trained on
  double grad_norm = 0;    // the last clip's norm (of the last micro-batch, or of the reduced sum)
  int nonfinite = 0;       // clips that saw a non-finite norm (the update was skipped)
};

class TrainStep {
 public:
  TrainStep(Backend& backend, BertModel& model, ParamBuffers& params, Lamb& lamb, GradReducer& reducer,
            const StepOptions& options, BatchCapacity capacity);
  ~TrainStep();

  // One optimizer step on `micro` (micro_batches host batches, this rank's), as update number updates_done + 1.
  // Allocates nothing after the first call.
  StepStats run(const std::vector<const Batch*>& micro, int64_t updates_done);

 private:
  Backend& backend_;
  BertModel& model_;
  ParamBuffers& params_;
  Lamb& lamb_;
  GradReducer& reducer_;
  StepOptions options_;
  std::vector<BatchStage> stages_;
  DeviceBuffer scalars_;        // ops::StepScalars, DEVICE
  DeviceBuffer host_scalars_;   // ops::StepScalars, PINNED
  DeviceBuffer accumulator_;    // flat F, only with PER_MICRO_BATCH and micro_batches x ranks > 1
  GradientsReady on_ready_;
  int first_part_chunk_ = 0, part_chunks_ = 0;  // this rank's chunks of a sharded update
};

}  // namespace bertperf
