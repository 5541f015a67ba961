// One training job as the harness drives it: the training stack (harness/train_stack.h: the backend, the model, flat
// parameters, the gradient reducer, LAMB and the training step) and the readers of its config (harness/reader_plan.h);
// then alternate "train until N samples" and "evaluate", while the harness
// (harness/timed_run) decides what to log and when to stop. Keeping the loop's policy out of here lets the same
// session serve `bertperf train`, timed MLPerf runs and tests.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "comm/context.h"
#include "harness/train_config.h"

namespace bertperf {

struct TrainProgress {
  int64_t samples_trained = 0;  // sequences consumed by training so far (all ranks)
  int64_t optimizer_steps = 0;
  double last_loss = 0;         // total loss of the last step, averaged over its micro-batches and ranks
  double learning_rate = 0;     // of the last optimizer step
  double grad_norm = 0;         // the last clip's global norm (rank 0's)
  bool non_finite_loss = false; // a NaN/Inf loss or gradient was seen: the run must abort
  double data_wait_s = 0;       // this rank's time waiting for training batches (model/batch_pipeline.h)
};

struct EvalResult {
  double mlm_accuracy = 0;  // sum w*[argmax == label] / sum w over the eval set
  double mlm_loss = 0;
  int64_t samples = 0;      // eval sequences seen
};

class TrainSession {
 public:
  // `seed` drives initialisation (when no checkpoint), data order and dropout.
  TrainSession(const TrainConfig& config, uint64_t seed, DistContext& dist);
  ~TrainSession();

  // Trains whole optimizer steps until samples_trained >= target_samples, max_steps steps are done, or a loss is
  // not finite. `on_step` (optional) is called once for every optimizer step, for progress output, when the step's
  // record is read (every record_slots steps and at the end: harness/train_step.h), so a few at a time.
  TrainProgress train_until(int64_t target_samples, const std::function<void(const TrainProgress&)>& on_step = {},
                            int64_t max_steps = std::numeric_limits<int64_t>::max());
  EvalResult evaluate();
  // Sequences in the eval file (all ranks' shares), counted at construction; an empty file is refused there.
  int64_t eval_sequences() const;
  const TrainProgress& progress() const;
  // Names of the parameter tensors, for weights_initialization lines.
  std::vector<std::string> tensor_names() const;
  // Checkpoint of the current parameters (HDF5 keyed by TF name) and, in an FP8 run, rank 0's FP8 scaling state,
  // written by rank 0.
  void save_checkpoint(const std::string& path) const;
  // The backend's one-line description.
  std::string backend_description() const;
  // The libraries the backend and the gradient reducer run on, as (name, version).
  std::vector<std::pair<std::string, std::string>> library_versions() const;
  // The gradient reducer's one-line description and the optimizer-state memory on this rank.
  std::string reduction_description() const;
  // Whether the step is captured, and why not where it is not (TrainStep::describe_capture).
  std::string capture_description() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bertperf
