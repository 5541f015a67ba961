// One training job as the harness drives it: build the model and optimizer, then alternate
// "train until N samples" and "evaluate", while the harness (harness/timed_run) decides what to log
// and when to stop. Keeping the loop's policy out of here lets the same session serve `bertperf
// train`, timed MLPerf runs and tests.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "harness/train_config.h"

namespace bertperf {

struct TrainProgress {
  int64_t samples_trained = 0;  // sequences consumed by training so far (all ranks)
  int64_t optimizer_steps = 0;
  double last_loss = 0;         // total loss of the last micro-batch
  double learning_rate = 0;     // of the last optimizer step
  bool non_finite_loss = false; // a NaN/Inf loss was seen: the run must abort
};

struct EvalResult {
  double mlm_accuracy = 0;  // sum w*[argmax == label] / sum w over the eval set
  double mlm_loss = 0;
  int64_t samples = 0;      // eval sequences seen
};

class TrainSession {
 public:
  // `seed` drives initialisation (when no checkpoint), data order and dropout.
  TrainSession(const TrainConfig& config, uint64_t seed);
  ~TrainSession();

  // Trains whole optimizer steps until samples_trained >= target_samples (or a non-finite loss).
  // `on_step` (optional) is called after every optimizer step, for progress output.
  TrainProgress train_until(int64_t target_samples,
                            const std::function<void(const TrainProgress&)>& on_step = {});
  EvalResult evaluate();
  const TrainProgress& progress() const;
  // Names of the parameter tensors, for weights_initialization lines.
  std::vector<std::string> tensor_names() const;
  // Checkpoint of the current parameters (HDF5 keyed by TF name).
  void save_checkpoint(const std::string& path) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bertperf
