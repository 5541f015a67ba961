// One training job (train_session.h): the training stack, the readers, and the cross-rank agreement on each step's
// statistics.
#include "harness/train_session.h"

#include <cmath>
#include <cstdio>

#include "data/layouts.h"
#include "data/reader.h"
#include "harness/reader_plan.h"
#include "harness/train_stack.h"
#include "model/checkpoint.h"
#include "optim/lr_schedule.h"

namespace bertperf {

struct TrainSession::Impl {
  const TrainConfig config;
  DistContext& dist;
  uint64_t seed;
  ReaderPlan train_data, eval_data;
  TrainStack stack;
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
      : config(checked(c, d)),
        dist(d),
        seed(agree(run_seed, d)),
        train_data(reader_plan(c, DataSet::TRAIN, d.rank(), d.size(), seed)),
        eval_data(reader_plan(c, DataSet::EVAL, d.rank(), d.size())),
        stack(stack_spec(c, seed, train_data.capacity, eval_data.capacity), d),
        micro(c.grad_accum_steps) {
    for (const Batch& b : micro) micro_ptrs.push_back(&b);
    if (stack.backend().capabilities().static_shapes) {
      ahead.resize(micro.size());
      for (const Batch& b : ahead) ahead_ptrs.push_back(&b);
    }
    // An empty eval set would report accuracy 0 over sequences never evaluated.
    eval_sequences = count_shard(c.eval_file).sequences;
    if (eval_sequences == 0) throw_input(c.eval_file, "the eval file holds no sequences");
  }

  // Checked before anything is built: the memory the config needs, and the job's size.
  static const TrainConfig& checked(const TrainConfig& c, const DistContext& d) {
    check_memory(c, physical_memory_bytes());  // before the first allocation
    check_job_ranks(c, d.size());
    return c;
  }
  // One seed for the whole job, whatever each rank was handed; checked before anything is built from it.
  static uint64_t agree(uint64_t seed, DistContext& d) {
    if (d.size() > 1) d.broadcast(seed);
    return seed;
  }

  // The MLPerf clock must start before any data is touched, so the reader opens its shards on the first training
  // step, after the harness has logged run_start.
  PretrainingReader& reader() {
    if (!train_reader) train_reader = std::make_unique<PretrainingReader>(train_data.options);
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
    TrainStep& step = stack.step();
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
      PretrainingReader eval_reader(eval_data.options);
      for (Batch b; eval_reader.next(b);) eval_batches.push_back(std::move(b));
      eval_stages.reserve(2);
      for (int k = 0; k < 2; ++k) eval_stages.emplace_back(stack.backend(), eval_data.capacity);
      eval_loaded = true;
    }
    BertModel& model = stack.model();
    model.zero_stats();
    double weight = 0, samples = 0;
    for (size_t k = 0; k < eval_batches.size(); ++k) {
      const DeviceBatch& device = eval_stages[k % 2].stage(eval_batches[k], LossWeighting::SUM);
      model.forward(device, stack.params().weights(), false, nullptr, 0);
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
std::string TrainSession::backend_description() const { return impl_->stack.backend().describe(); }

std::vector<std::pair<std::string, std::string>> TrainSession::library_versions() const {
  const TrainStack& stack = impl_->stack;
  auto versions = stack.backend().library_versions();
  for (auto& v : stack.reducer().library_versions()) versions.push_back(std::move(v));
  return versions;
}

std::string TrainSession::reduction_description() const {
  const TrainStack& stack = impl_->stack;
  const size_t full = 2 * stack.table().total_elements() * dtype_size(stack.backend().master_dtype());
  char line[128];
  std::snprintf(line, sizeof line, "; LAMB state %.2f MiB on this rank (%.2f MiB unsharded)",
                static_cast<double>(stack.lamb().state_bytes()) / 1048576.0, static_cast<double>(full) / 1048576.0);
  return stack.reducer().describe() + line;
}

std::vector<std::string> TrainSession::tensor_names() const {
  std::vector<std::string> names;
  for (const TensorInfo& t : impl_->stack.table().tensors()) names.push_back(t.name);
  return names;
}

void TrainSession::save_checkpoint(const std::string& path) const {
  FlatTensors host(impl_->stack.table());
  impl_->stack.params().download(host);
  if (impl_->dist.is_root()) bertperf::save_checkpoint(host, path);
}

}  // namespace bertperf
