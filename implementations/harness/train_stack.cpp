// Everything a training step needs, in its order (train_stack.h).
#include "harness/train_stack.h"

#include <algorithm>
#include <utility>

#include "model/checkpoint.h"

namespace bertperf {

namespace {

BatchCapacity largest(BatchCapacity a, BatchCapacity b) {
  return {std::max(a.tokens, b.tokens), std::max(a.sequences, b.sequences), std::max(a.predictions, b.predictions),
          std::max(a.max_seqlen, b.max_seqlen)};
}

std::unique_ptr<GradReducer> reducer_for(Backend& backend, const TensorTable& table, DistContext& dist,
                                         const ReductionOptions& options) {
  return make_grad_reducer(backend, backend.master_dtype(), dist, options, table.total_elements(),
                           FlatChunks::starts(table));
}

// The FP8 scaling state of `path` into `model`, where the file holds it (see TrainStackSpec::init_checkpoint).
void restore_fp8_state(BertModel& model, const std::string& path) {
  if (!has_fp8_state(path)) return;
  if (model.fp8_state_table().size() == 0)
    throw_input(path,
                "holds the FP8 scaling state of an FP8 run, but this run's backend has no \"precision\": \"fp8\"");
  FlatTensors state(model.fp8_state_table());
  load_fp8_state(state, path);
  model.upload_fp8_state(state);
}

Lamb lamb_for(Backend& backend, const TensorTable& table, const LambHyperparams& hp, const GradReducer& reducer) {
  const FlatRange part = reducer.part(table.total_elements());
  return Lamb(backend, table, hp, part.begin, part.end);
}

}  // namespace

TrainStackSpec stack_spec(const TrainConfig& c, uint64_t seed, BatchCapacity train_capacity,
                          BatchCapacity eval_capacity) {
  TrainStackSpec s;
  s.model = c.model;
  s.backend = c.backend;
  s.lamb = c.lamb;
  s.reduction = c.reduction;
  s.micro_batches = c.grad_accum_steps;
  s.clip = c.clip_after_reduction ? ClipMode::AFTER_REDUCTION : ClipMode::PER_MICRO_BATCH;
  s.seed = seed;
  s.init_seed = seed;
  s.init_checkpoint = c.init_checkpoint;
  s.train_capacity = train_capacity;
  s.eval_capacity = eval_capacity;
  return s;
}

TrainStack::TrainStack(const TrainStackSpec& spec, DistContext& dist)
    : TrainStack(spec, dist, make_backend(spec.backend, {.local_rank = dist.local_rank()})) {}

TrainStack::TrainStack(const TrainStackSpec& spec, DistContext& dist, std::unique_ptr<Backend> backend)
    : backend_(std::move(backend)),
      table_(bert_parameter_table(spec.model)),
      params_(*backend_, table_),
      reducer_(reducer_for(*backend_, table_, dist, spec.reduction)),
      lamb_(lamb_for(*backend_, table_, spec.lamb, *reducer_)),
      model_(*backend_, spec.model, table_, largest(spec.train_capacity, spec.eval_capacity)),
      step_(*backend_, model_, params_, lamb_, *reducer_,
            {.micro_batches = spec.micro_batches, .ranks = dist.size(), .rank = dist.rank(), .seed = spec.seed,
             .clip = spec.clip, .capture = spec.backend.capture,
             .record_slots = spec.backend.record_slots}) {
  FlatTensors host(table_);
  if (spec.init_checkpoint.empty()) {
    bert_init_parameters(host, spec.model, spec.init_seed);
  } else {
    load_checkpoint(host, spec.init_checkpoint);
    restore_fp8_state(model_, spec.init_checkpoint);
  }
  params_.upload(host);
}

void TrainStack::save_checkpoint(const std::string& path) const {
  FlatTensors host(table_), fp8(model_.fp8_state_table());
  params_.download(host);
  model_.download_fp8_state(fp8);
  bertperf::save_checkpoint(host, path, fp8.table().size() ? &fp8 : nullptr);
}

}  // namespace bertperf
