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
//
// On a backend that can capture (Capabilities::capture: a CUDA graph, or cpu-async's recorded queue), the step's
// ops, from the forward of the first micro-batch to the LAMB update, are recorded once and replayed: the first step
// runs them eagerly (libraries plan their kernels at a shape's first call), the second and third capture them, one
// graph per set of staging buffers. Only the uploads (batches, scalars) and the download of the statistics stay
// outside. With several ranks the reducer's collectives are captured with the step where its transport allows
// (GradReducer::not_capturable: NCCL; MPI queued on cpu-async's queue), and every step stays eager where it does not
// (describe_capture says why); StepOptions::capture false keeps every step eager.
//
// A step's batches come staged in backend memory from the batch pipeline (model/batch_pipeline.h), in two sets of
// buffers used in turn (a captured step is one graph per set): on an asynchronous backend the caller asks the
// pipeline for the next step's batches between launch() and finish(), so their copy is queued while the device
// still works on this step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "comm/reducer.h"
#include "model/batch_pipeline.h"
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
  bool capture = true;    // replay a captured step where the backend can (see above)
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
            const StepOptions& options);
  ~TrainStep();

  // One optimizer step on `batches` (micro_batches staged batches, this rank's), as update number updates_done + 1.
  // Allocates nothing after the first call (the capture of the second and third steps aside).
  StepStats run(const StagedStep& batches, int64_t updates_done);

  // run() in parts: launch() issues the step; finish() waits for it and reads its statistics. launch() must be
  // followed by finish() before the next launch(); the batches must stay staged until then.
  void launch(const StagedStep& batches, int64_t updates_done);
  StepStats finish();

  // Whether steps are being replayed from a captured graph (false before the capture, and where it is off).
  bool captured() const { return graphs_[0] != nullptr; }
  // For logs: "captured from the second step ..." or "eager: " and why not.
  std::string describe_capture() const;

 private:
  // The step's ops, from the first forward to the LAMB update, on the batches of staging set `set`.
  void issue(int set);

  Backend& backend_;
  BertModel& model_;
  ParamBuffers& params_;
  Lamb& lamb_;
  GradReducer& reducer_;
  StepOptions options_;
  std::vector<const DeviceBatch*> batches_[2];  // each staging set's micro-batches, as last launched
  bool in_flight_ = false;
  int64_t steps_launched_ = 0;
  bool can_capture_ = false;
  std::string not_captured_;  // why steps stay eager (empty where they are captured)
  std::unique_ptr<CapturedOps> graphs_[2];
  StepStats pending_;
  DeviceBuffer scalars_;        // ops::StepScalars, DEVICE
  DeviceBuffer host_scalars_;   // ops::StepScalars, PINNED
  DeviceBuffer accumulator_;    // flat F, only with PER_MICRO_BATCH and micro_batches x ranks > 1
  GradientsReady on_ready_;
  int first_part_chunk_ = 0, part_chunks_ = 0;  // this rank's chunks of a sharded update
};

}  // namespace bertperf
