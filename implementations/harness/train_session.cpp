// One training job (train_session.h): model, flat parameters, LAMB, the readers and the
// data-parallel gradient exchange.
//
// Data parallelism follows the reference's gradient accumulation: every micro-batch gradient, on
// every rank, is clipped to max_grad_norm on its own and added as g / (micro-batches x ranks); the
// sums are then all-reduced. So W ranks with n micro-batches each compute the same update as one
// rank with n x W micro-batches, and the clip-before-all-reduce order is the one MLPerf allows.
#include "harness/train_session.h"

#include <cmath>

#include "core/threading.h"
#include "data/reader.h"
#include "dist/communicator.h"
#include "model/bert.h"
#include "model/checkpoint.h"
#include "optim/lamb.h"
#include "optim/lr_schedule.h"

namespace bertperf {

namespace {

BatchShape model_shape(const TrainConfig& c, const ReaderOptions& train) {
  const int rows = std::max(c.local_batch_size, c.eval_batch_size);
  const int per_row_predictions = c.packed ? std::max(train.packed_max_predictions, c.max_predictions) : c.max_predictions;
  const int per_row_sequences = c.packed ? train.max_sequences_per_row : 1;
  return {rows, c.seq_len, rows * per_row_predictions, rows * per_row_sequences};
}

}  // namespace

struct TrainSession::Impl {
  const TrainConfig config;
  Communicator& comm = Communicator::world();
  uint64_t seed;
  TensorTable table;
  FlatTensors params, grads;
  Lamb lamb;
  GradAccumulator accumulator;
  ReaderOptions train_options;
  std::unique_ptr<PretrainingReader> train_reader;
  std::unique_ptr<BertModel> model;
  Batch batch;
  TrainProgress progress;

  Impl(const TrainConfig& c, uint64_t run_seed)
      : config(c),
        seed(run_seed),
        table(bert_parameter_table(c.model)),
        params(table),
        grads(table),
        lamb(table, c.lamb),
        accumulator(table, c.grad_accum_steps * Communicator::world().size(), c.lamb.max_grad_norm) {
    if (comm.size() != c.ranks)
      throw_input(c.source, cat("the config asks for ", c.ranks, " ranks (batch.ranks) but this job has ",
                                comm.size(), "; launch it with mpirun -np ", c.ranks));
    comm.broadcast(seed);  // one seed for the whole job, whatever each rank was handed
    set_cpu_threads(c.threads);

    if (c.init_checkpoint.empty()) {
      bert_init_parameters(params, c.model, seed);
    } else {
      load_checkpoint(params, c.init_checkpoint);
    }

    train_options.files = c.train_files;
    train_options.rank = comm.rank();
    train_options.world_size = comm.size();
    train_options.seed = seed;
    train_options.batch_rows = c.local_batch_size;
    train_options.seq_len = c.seq_len;
    train_options.max_predictions = c.max_predictions;
    train_options.vocab_size = c.model.vocab_size;
    train_options.pack = c.packed;
    train_options.pad_predictions = false;  // the same loss and gradients, less decoder work
    model = std::make_unique<BertModel>(c.model, model_shape(c, train_options));
  }

  // The MLPerf clock must start before any data is touched, so the reader opens its shards on the
  // first training step, after the harness has logged run_start.
  PretrainingReader& reader() {
    if (!train_reader) train_reader = std::make_unique<PretrainingReader>(train_options);
    return *train_reader;
  }

  // Global index of a micro-batch: the same micro-batch gets the same dropout masks whether it
  // runs as one of n micro-batches on one rank or on one of n ranks.
  uint32_t micro_batch_index(int micro) const {
    const int64_t per_step = int64_t(config.grad_accum_steps) * comm.size();
    return static_cast<uint32_t>(progress.optimizer_steps * per_step + int64_t(micro) * comm.size() + comm.rank());
  }

  void optimizer_step() {
    accumulator.reset();
    // Summed over ranks in one all-reduce: sequences, loss, micro-batches with a non-finite loss
    // or gradient.
    double status[3] = {0, 0, 0};
    for (int micro = 0; micro < config.grad_accum_steps; ++micro) {
      if (!reader().next(batch)) throw_input(config.source, "training data ran out (no batches)");
      const BertOutputs out = model->forward(params, batch, true, seed, micro_batch_index(micro));
      status[0] += batch.sequences();
      status[1] += out.total_loss;
      grads.zero();
      model->backward(params, grads, batch);
      const bool finite = std::isfinite(out.total_loss) && std::isfinite(accumulator.add(grads));
      status[2] += finite ? 0.0 : 1.0;
    }
    comm.allreduce_sum(status, 3);
    progress.last_loss = status[1] / (double(config.grad_accum_steps) * comm.size());
    if (status[2] > 0) {
      progress.non_finite_loss = true;
      return;
    }
    comm.allreduce_sum(accumulator.gradient().data(), accumulator.gradient().size());
    progress.learning_rate = learning_rate(config.lamb, lamb.steps_taken());
    lamb.step(params, accumulator.gradient(), progress.learning_rate);
    progress.optimizer_steps += 1;
    progress.samples_trained += static_cast<int64_t>(status[0]);
  }

  EvalResult evaluate() {
    ReaderOptions options;
    options.files = {config.eval_file};
    options.rank = comm.rank();
    options.world_size = comm.size();
    options.batch_rows = config.eval_batch_size;
    options.seq_len = config.seq_len;
    options.max_predictions = config.max_predictions;
    options.vocab_size = config.model.vocab_size;
    options.shuffle = false;
    options.repeat = false;
    options.drop_last = false;
    options.pad_predictions = false;
    PretrainingReader reader(options);
    Batch eval_batch;
    double sums[4] = {0, 0, 0, 0};  // correct, weight, weighted loss, samples
    while (reader.next(eval_batch)) {
      const BertOutputs out = model->forward(params, eval_batch, false, seed, 0);
      sums[0] += out.mlm_correct;
      sums[1] += out.mlm_weight;
      sums[2] += double(out.mlm_loss) * (out.mlm_weight + 1e-5);
      sums[3] += eval_batch.sequences();
    }
    comm.allreduce_sum(sums, 4);
    EvalResult r;
    r.mlm_accuracy = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
    r.mlm_loss = sums[1] > 0 ? sums[2] / sums[1] : 0.0;
    r.samples = static_cast<int64_t>(sums[3]);
    return r;
  }
};

TrainSession::TrainSession(const TrainConfig& config, uint64_t seed) : impl_(std::make_unique<Impl>(config, seed)) {}
TrainSession::~TrainSession() = default;

TrainProgress TrainSession::train_until(int64_t target_samples,
                                        const std::function<void(const TrainProgress&)>& on_step) {
  while (impl_->progress.samples_trained < target_samples && !impl_->progress.non_finite_loss) {
    impl_->optimizer_step();
    if (on_step && !impl_->progress.non_finite_loss) on_step(impl_->progress);
  }
  return impl_->progress;
}

EvalResult TrainSession::evaluate() { return impl_->evaluate(); }
const TrainProgress& TrainSession::progress() const { return impl_->progress; }

std::vector<std::string> TrainSession::tensor_names() const {
  std::vector<std::string> names;
  for (const TensorInfo& t : impl_->table.tensors()) names.push_back(t.name);
  return names;
}

void TrainSession::save_checkpoint(const std::string& path) const {
  if (impl_->comm.is_root()) bertperf::save_checkpoint(impl_->params, path);
}

}  // namespace bertperf
