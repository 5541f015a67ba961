// One optimizer step: the unit the timed run, `bertperf bench-step` and the tests all run, and the unit a GPU backend
// captures once and replays. It stages the step's micro-batches, runs forward and backward on each, reduces gradients
// across ranks, clips, and updates with LAMB, with every step-varying scalar (learning rate, bias corrections, dropout
// step, clip scale) in backend memory, and files its statistics in a ring that the host reads when it wants them.
//
// Clipping follows the reference's gradient accumulation by default (PER_MICRO_BATCH): every micro-batch gradient, on
// every rank, is clipped to max_grad_norm on its own and added as g / (micro-batches x ranks); the sum is then reduced
// over ranks. So W ranks with n micro-batches each make the same update as one rank with n x W micro-batches.
// AFTER_REDUCTION (what NVIDIA does when it overlaps communication with the backward) sums the unclipped gradients,
// reduces them as the last micro-batch's backward makes each layer ready, and clips the sum.
//
// On a backend that can capture (Capabilities::capture: a CUDA graph, or cpu-async's recorded queue), the step's ops,
// from the schedule through the LAMB update to the record, are recorded once and replayed: the first step runs
// them eagerly (libraries plan their kernels at a shape's first call), the second and third capture them, one graph per
// set of staging buffers. Only the uploads of the batches stay outside. With several ranks the reducer's collectives
// are captured with the step where its transport allows (GradReducer::not_capturable: NCCL; MPI queued on cpu-async's
// queue), and every step stays eager where it does not (describe_capture says why); StepOptions::capture false keeps
// every step eager.
//
// No host wait in a step. The device keeps the count of steps made (StepScalars::updates): the step's first op
// (schedule_step) takes its learning rate, bias corrections and dropout step from it, so the host uploads the scalars
// only at a run's first step and where a caller resumes at another count. Before the update the step sums its loss
// statistics and non-finite count across ranks (the reducer's sum, captured with the step; an update any rank found
// not finite is skipped on every rank), and its last op files them with the step's gradient norm, count and learning
// rate in slot `updates % record_slots` of a ring in backend memory (ops.h: RecordStep),
// advancing the count. launch() waits for nothing; read() downloads the ring with one wait and hands back the records
// of the steps launched since the last read, so the host waits once per read, at its log points, and a step that was
// not finite is seen at the next read, at most record_slots steps later; the steps after it update nothing meanwhile
// (the record halts the updates until the scalars are uploaded again), so the parameters are that step's. A caller that
// reads less often is made to wait once every record_slots steps (launch() reads for it and keeps the records until its
// read).
//
// A step's batches come staged in backend memory from the batch pipeline (model/batch_pipeline.h), in two sets of
// buffers used in turn (a captured step is one graph per set): on an asynchronous backend the caller asks the pipeline
// for the next step's batches after launch(), so their copy is queued behind this step while the device still works on
// it (the copy into a set's device memory runs after the step that last read it, in the backend's order).
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
  int record_slots = 16;  // the ring of step records (see above): the most steps between two reads without a wait
};

// What one step did, from its record: the loss statistics summed over its micro-batches and over the ranks.
struct StepStats {
  LossStats loss;
  double grad_norm = 0;    // the last clip's norm (of this rank's last micro-batch, or of the reduced sum)
  float learning_rate = 0; // the step's, as the device scheduled it
  int64_t updates = 0;     // the step's count (updates made before it)
  int nonfinite = 0;       // > 0: a clip saw a non-finite norm, or the loss is not finite (the update was skipped)
  bool finite() const { return nonfinite == 0; }
};

class TrainStep {
 public:
  TrainStep(Backend& backend, BertModel& model, ParamBuffers& params, Lamb& lamb, GradReducer& reducer,
            const StepOptions& options);
  ~TrainStep();

  // Issues one optimizer step on `batches` (micro_batches staged batches, this rank's) as step number updates_done + 1,
  // and waits for nothing (the batches' staging set must not be refilled before the device has read it:
  // model/batch_pipeline.h). The scalars are uploaded only where updates_done is not the count the device holds (the
  // first step, a resume). Allocates nothing after the first call (the capture of the second and third steps aside).
  void launch(const StagedStep& batches, int64_t updates_done);
  // The records of the steps launched since the last read, oldest first: one wait for the device. Records kept for a
  // caller that lets the ring fill (launch() reads it) stay until this read: one that reads less often than every
  // 2 x record_slots steps makes their list grow.
  const std::vector<StepStats>& read();
  // launch() and read(): the step's record.
  StepStats run(const StagedStep& batches, int64_t updates_done);

  const StepOptions& options() const { return options_; }
  // Whether steps are being replayed from a captured graph (false before the capture, and where it is off).
  bool captured() const { return graphs_[0] != nullptr; }
  // For logs: "captured from the second step ..." or "eager: " and why not.
  std::string describe_capture() const;

 private:
  // The step's ops, from its schedule to its record, on the batches of staging set `set`.
  void issue(int set);
  // Downloads the ring and appends the records of the unread steps to read_.
  void collect();

  Backend& backend_;
  BertModel& model_;
  ParamBuffers& params_;
  Lamb& lamb_;
  GradReducer& reducer_;
  StepOptions options_;
  std::vector<const DeviceBatch*> batches_[2];  // each staging set's micro-batches, as last launched
  int64_t steps_launched_ = 0;
  int64_t device_updates_ = -1;  // the count the device holds after the launched steps (-1: nothing uploaded yet)
  int unread_ = 0;               // steps launched since the ring was last downloaded
  std::vector<StepStats> read_;  // records downloaded and not yet handed out by read()
  std::vector<StepStats> handed_;
  bool can_capture_ = false;
  std::string not_captured_;  // why steps stay eager (empty where they are captured)
  std::unique_ptr<CapturedOps> graphs_[2];
  DeviceBuffer scalars_;        // ops::StepScalars, DEVICE
  DeviceBuffer host_scalars_;   // ops::StepScalars, PINNED
  DeviceBuffer sums_;           // (ops::kRecordSums) f64, DEVICE: the step's sums before and after the cross-rank sum
  DeviceBuffer ring_;           // (record_slots) ops::StepRecord, DEVICE
  DeviceBuffer host_ring_;      // the same, PINNED
  DeviceBuffer accumulator_;    // flat F, only with PER_MICRO_BATCH and micro_batches x ranks > 1
  GradientsReady on_ready_;
  int first_part_chunk_ = 0, part_chunks_ = 0;  // this rank's chunks of a sharded update
};

}  // namespace bertperf
