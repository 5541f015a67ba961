// One training job (train_session.h): the backend and everything that runs on it, the readers, and the
// cross-rank agreement on each step's statistics.
#include "harness/train_session.h"

#include <cmath>
#include <cstdio>

#include "data/layouts.h"
#include "data/reader.h"
#include "comm/reducer.h"
#include "harness/train_step.h"
#include "model/bert.h"
#include "model/checkpoint.h"
#include "model/param_buffers.h"
#include "optim/lamb.h"
#include "optim/lr_schedule.h"

namespace bertperf {

namespace {

ReaderOptions reader_options(const TrainConfig& c, const DistContext& dist) {
  ReaderOptions o;
  o.rank = dist.rank();
  o.world_size = dist.size();
  o.seq_len = c.seq_len;
  o.max_predictions = c.max_predictions;
  o.vocab_size = c.model.vocab_size;
  o.pad_predictions = false;  // the same loss and gradients, less decoder work
  return o;
}

// The capacity of every batch a reader with these options hands out (data/batch.h).
BatchCapacity capacity_of(const ReaderOptions& o, bool packed) {
  const int rows = o.batch_rows;
  return {rows * o.seq_len, rows * (packed ? o.max_sequences_per_row : 1),
          rows * (packed ? o.packed_max_predictions : o.max_predictions), o.seq_len};
}

BatchCapacity largest(BatchCapacity a, BatchCapacity b) {
  return {std::max(a.tokens, b.tokens), std::max(a.sequences, b.sequences), std::max(a.predictions, b.predictions),
          std::max(a.max_seqlen, b.max_seqlen)};
}

}  // namespace

struct TrainSession::Impl {
  const TrainConfig config;
  DistContext& dist;
  uint64_t seed;
  std::unique_ptr<Backend> backend;
  TensorTable table;
  ReaderOptions train_options, eval_options;
  BatchCapacity train_capacity, eval_capacity;
  ParamBuffers params;
  std::unique_ptr<GradReducer> reducer;  // before lamb: a sharded reducer says which part LAMB keeps moments for
  Lamb lamb;
  BertModel model;
  TrainStep step;
  std::unique_ptr<PretrainingReader> train_reader;
  std::vector<Batch> micro;                // this step's micro-batches
  std::vector<const Batch*> micro_ptrs;
  // On a backend with static shapes (a GPU), the next step's micro-batches are read and staged while this step
  // runs (TrainStep::stage_next); the sets take turns. The CPU reads each step's batches when it starts.
  std::vector<Batch> ahead;
  std::vector<const Batch*> ahead_ptrs;
  bool ahead_ready = false;
  std::vector<Batch> eval_batches;         // read once, on the first evaluation
  bool eval_loaded = false;
  // Eval batches take turns between two stages, so one is packed and uploaded while the other's forward runs.
  std::vector<BatchStage> eval_stages;
  TrainProgress progress;
  int64_t eval_sequences = 0;

  Impl(const TrainConfig& c, uint64_t run_seed, DistContext& d)
      : config(c),
        dist(d),
        seed(agree(run_seed, d)),
        backend(make_backend(checked_backend(c, d), {.local_rank = d.local_rank()})),
        table(bert_parameter_table(c.model)),
        train_options(train_reader_options(c, d, seed)),
        eval_options(eval_reader_options(c, d)),
        train_capacity(capacity_of(train_options, c.packed)),
        eval_capacity(capacity_of(eval_options, false)),
        params(*backend, table),
        reducer(make_grad_reducer(*backend, backend->master_dtype(), d, c.reduction, table.total_elements(),
                                  FlatChunks::starts(table))),
        lamb(*backend, table, c.lamb, reducer->part(table.total_elements()).begin,
             reducer->part(table.total_elements()).end),
        model(*backend, c.model, table, largest(train_capacity, eval_capacity)),
        step(*backend, model, params, lamb, *reducer,
             {.micro_batches = c.grad_accum_steps, .ranks = d.size(), .rank = d.rank(), .seed = seed,
              .clip = c.clip_after_reduction ? ClipMode::AFTER_REDUCTION : ClipMode::PER_MICRO_BATCH,
              .capture = c.backend.capture},
             train_capacity),
        micro(c.grad_accum_steps) {
    FlatTensors host(table);
    if (c.init_checkpoint.empty()) {
      bert_init_parameters(host, c.model, seed);
    } else {
      load_checkpoint(host, c.init_checkpoint);
    }
    params.upload(host);
    for (const Batch& b : micro) micro_ptrs.push_back(&b);
    if (backend->capabilities().static_shapes) {
      ahead.resize(micro.size());
      for (const Batch& b : ahead) ahead_ptrs.push_back(&b);
    }
    // An empty eval set would report accuracy 0 over sequences never evaluated.
    eval_sequences = count_shard(c.eval_file).sequences;
    if (eval_sequences == 0) throw_input(c.eval_file, "the eval file holds no sequences");
  }

  // One seed for the whole job, whatever each rank was handed; checked before anything is built from it.
  static uint64_t agree(uint64_t seed, DistContext& d) {
    if (d.size() > 1) d.broadcast(seed);
    return seed;
  }
  static const BackendSpec& checked_backend(const TrainConfig& c, const DistContext& d) {
    check_memory(c, physical_memory_bytes());  // before the first allocation
    if (d.size() != c.ranks)
      throw_input(c.source, cat("the config asks for ", c.ranks, " ranks (batch.ranks) but this job has ", d.size(),
                                "; launch it with mpirun -np ", c.ranks));
    return c.backend;
  }
  static ReaderOptions train_reader_options(const TrainConfig& c, const DistContext& d, uint64_t seed) {
    ReaderOptions o = reader_options(c, d);
    o.files = c.train_files;
    o.seed = seed;
    o.batch_rows = c.local_batch_size;
    o.pack = c.packed;
    o.balance = c.balanced_batches;
    o.micro_batches = c.grad_accum_steps;
    return o;
  }
  static ReaderOptions eval_reader_options(const TrainConfig& c, const DistContext& d) {
    ReaderOptions o = reader_options(c, d);
    o.files = {c.eval_file};
    o.batch_rows = c.eval_batch_size;
    o.shuffle = false;
    o.repeat = false;
    o.drop_last = false;
    return o;
  }

  // The MLPerf clock must start before any data is touched, so the reader opens its shards on the first training
  // step, after the harness has logged run_start.
  PretrainingReader& reader() {
    if (!train_reader) train_reader = std::make_unique<PretrainingReader>(train_options);
    return *train_reader;
  }

  void optimizer_step() {
    if (ahead_ready) {
      std::swap(micro, ahead);  // vector swaps keep the elements where they are, so the pointer lists swap too
      std::swap(micro_ptrs, ahead_ptrs);
      ahead_ready = false;
    } else {
      for (Batch& b : micro)
        if (!reader().next(b)) throw_input(config.source, "training data ran out (no batches)");
    }
    step.launch(micro_ptrs, progress.optimizer_steps);
    if (!ahead.empty()) {
      bool all = true;
      for (Batch& b : ahead) all = all && reader().next(b);
      if (all) step.stage_next(ahead_ptrs);
      ahead_ready = all;  // a reader that ran out says so at the next step, as without reading ahead
    }
    const StepStats s = step.finish();
    // Summed over ranks in one all-reduce: sequences, loss, and whether anything was not finite.
    const double loss = s.loss.mlm_loss + s.loss.nsp_loss;
    double status[3] = {double(s.sequences), loss, (std::isfinite(loss) && s.nonfinite == 0) ? 0.0 : 1.0};
    dist.allreduce_sum(status, 3);
    progress.last_loss = status[1] / (double(config.grad_accum_steps) * dist.size());
    progress.grad_norm = s.grad_norm;
    if (status[2] > 0) {
      progress.non_finite_loss = true;
      return;
    }
    progress.learning_rate = learning_rate(config.lamb, progress.optimizer_steps);
    progress.optimizer_steps += 1;
    progress.samples_trained += static_cast<int64_t>(status[0]);
  }

  EvalResult evaluate() {
    if (!eval_loaded) {
      // Read once per run; every later evaluation only stages and runs.
      PretrainingReader eval_reader(eval_options);
      for (Batch b; eval_reader.next(b);) eval_batches.push_back(std::move(b));
      eval_stages.reserve(2);
      for (int k = 0; k < 2; ++k) eval_stages.emplace_back(*backend, eval_capacity);
      eval_loaded = true;
    }
    model.zero_stats();
    double weight = 0, samples = 0;
    for (size_t k = 0; k < eval_batches.size(); ++k) {
      const DeviceBatch& device = eval_stages[k % 2].stage(eval_batches[k], LossWeighting::SUM);
      model.forward(device, params.weights(), false, nullptr, 0);
      weight += device.mlm_weight;
      samples += device.real_sequences;
    }
    const LossStats stats = model.read_stats();
    double sums[4] = {stats.mlm_correct, weight, stats.mlm_loss, samples};
    dist.allreduce_sum(sums, 4);
    EvalResult r;
    r.mlm_accuracy = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
    r.mlm_loss = sums[1] > 0 ? sums[2] / sums[1] : 0.0;
    r.samples = static_cast<int64_t>(sums[3]);
    return r;
  }
};

TrainSession::TrainSession(const TrainConfig& config, uint64_t seed, DistContext& dist)
    : impl_(std::make_unique<Impl>(config, seed, dist)) {}
TrainSession::~TrainSession() = default;

TrainProgress TrainSession::train_until(int64_t target_samples,
                                        const std::function<void(const TrainProgress&)>& on_step, int64_t max_steps) {
  Impl& m = *impl_;
  while (m.progress.samples_trained < target_samples && m.progress.optimizer_steps < max_steps &&
         !m.progress.non_finite_loss) {
    m.optimizer_step();
    if (on_step && !m.progress.non_finite_loss) on_step(m.progress);
  }
  return m.progress;
}

EvalResult TrainSession::evaluate() { return impl_->evaluate(); }
int64_t TrainSession::eval_sequences() const { return impl_->eval_sequences; }
const TrainProgress& TrainSession::progress() const { return impl_->progress; }
std::string TrainSession::backend_description() const { return impl_->backend->describe(); }

std::vector<std::pair<std::string, std::string>> TrainSession::library_versions() const {
  auto versions = impl_->backend->library_versions();
  for (auto& v : impl_->reducer->library_versions()) versions.push_back(std::move(v));
  return versions;
}

std::string TrainSession::reduction_description() const {
  const Impl& m = *impl_;
  const size_t full = 2 * m.table.total_elements() * dtype_size(m.backend->master_dtype());
  char line[128];
  std::snprintf(line, sizeof line, "; LAMB state %.2f MiB on this rank (%.2f MiB unsharded)",
                static_cast<double>(m.lamb.state_bytes()) / 1048576.0, static_cast<double>(full) / 1048576.0);
  return m.reducer->describe() + line;
}

std::vector<std::string> TrainSession::tensor_names() const {
  std::vector<std::string> names;
  for (const TensorInfo& t : impl_->table.tensors()) names.push_back(t.name);
  return names;
}

void TrainSession::save_checkpoint(const std::string& path) const {
  FlatTensors host(impl_->table);
  impl_->params.download(host);
  if (impl_->dist.is_root()) bertperf::save_checkpoint(host, path);
}

}  // namespace bertperf
