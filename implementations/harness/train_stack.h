// Everything one rank's training step needs, built in the one order that works and owned together: the backend,
// the parameter table, the flat parameter buffers, the gradient reducer, LAMB for the part of the buffers this rank
// updates (which a sharded reducer decides), the model (its activations sized for the larger of the train and eval
// batches) and the training step over them. The training session, `bertperf bench-step`, the probes and the tests
// build their steps here and nowhere else.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/context.h"
#include "comm/reducer.h"
#include "harness/train_config.h"
#include "harness/train_step.h"
#include "model/bert.h"
#include "model/param_buffers.h"
#include "optim/lamb.h"
#include "registry/registry.h"

namespace bertperf {

struct TrainStackSpec {
  BertConfig model;
  BackendSpec backend;         // its "capture" says whether steps are replayed as one captured graph
  LambHyperparams lamb;
  ReductionOptions reduction;  // how gradients are summed over the ranks of the job
  int micro_batches = 1;       // per rank and optimizer step
  ClipMode clip = ClipMode::PER_MICRO_BATCH;
  uint64_t seed = 0;           // the dropout masks
  uint64_t init_seed = 0;      // the initial parameters (bert_init_parameters), unless init_checkpoint names a file
  // Parameters and, for an FP8 run, the FP8 scaling state where the file holds it (a phase-1 or bf16 checkpoint
  // holds none: the scales start afresh); a file holding FP8 state is refused by a run without FP8.
  std::string init_checkpoint;
  BatchCapacity train_capacity;  // of every training batch
  BatchCapacity eval_capacity;   // of every eval batch (none: zero)
};

// The stack a training config describes, with `seed` for dropout and initialisation, and the capacities of its
// readers (harness/reader_plan.h).
TrainStackSpec stack_spec(const TrainConfig& config, uint64_t seed, BatchCapacity train_capacity,
                          BatchCapacity eval_capacity = {});

class TrainStack {
 public:
  // Builds the stack on the backend the spec names, placed by `dist`'s local rank, and sets the parameters.
  TrainStack(const TrainStackSpec& spec, DistContext& dist);
  // The same on a backend the caller built (the op-cost recorder of bench-step --roofline, backends/op_cost.h);
  // spec.backend's "capture" still says whether steps are captured.
  TrainStack(const TrainStackSpec& spec, DistContext& dist, std::unique_ptr<Backend> backend);

  Backend& backend() { return *backend_; }
  const Backend& backend() const { return *backend_; }
  const TensorTable& table() const { return table_; }
  ParamBuffers& params() { return params_; }
  const ParamBuffers& params() const { return params_; }
  GradReducer& reducer() { return *reducer_; }
  const GradReducer& reducer() const { return *reducer_; }
  Lamb& lamb() { return lamb_; }
  const Lamb& lamb() const { return lamb_; }
  BertModel& model() { return model_; }
  const BertModel& model() const { return model_; }
  TrainStep& step() { return step_; }
  const TrainStep& step() const { return step_; }

  // Writes the parameters and, on an FP8 backend, the model's FP8 scaling state to `path` (model/checkpoint.h).
  void save_checkpoint(const std::string& path) const;

 private:
  std::unique_ptr<Backend> backend_;
  TensorTable table_;
  ParamBuffers params_;
  std::unique_ptr<GradReducer> reducer_;
  Lamb lamb_;
  BertModel model_;
  TrainStep step_;
};

}  // namespace bertperf
