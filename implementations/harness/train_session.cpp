// One training job (train_session.h): the training stack, the readers and their batch pipelines, the steps launched
// ahead of their records, and the records read at the session's log points.
#include "harness/train_session.h"

#include <cmath>
#include <cstdio>

#include "data/layouts.h"
#include "data/reader.h"
#include "harness/reader_plan.h"
#include "model/batch_pipeline.h"
#include "harness/train_stack.h"

namespace bertperf {

struct TrainSession::Impl {
  const TrainConfig config;
  DistContext& dist;
  uint64_t seed;
  ReaderPlan train_data, eval_data;
  TrainStack stack;
  std::unique_ptr<PretrainingReader> train_reader;
  // The reader's batches staged for the step (model/batch_pipeline.h): on an asynchronous backend the next step's
  // are asked for while a step runs, so `ahead` holds them between steps.
  std::unique_ptr<BatchPipeline> train_batches;
  StagedStep current, ahead;
  bool ahead_ready = false;
  // The eval set, read once on the first evaluation; every evaluation stages it through a pipeline of its own.
  std::unique_ptr<CachedSource> eval_set;
  TrainProgress progress;  // as the records read so far say
  // The steps launched and not yet read: their count, and each one's sequences over all ranks (known at launch,
  // from the pipeline's host counts, so the session stops at an exact sample count without waiting for a record).
  int64_t launched_steps = 0, launched_samples = 0;
  std::vector<int64_t> unread_samples;
  int64_t eval_sequences = 0;

  Impl(const TrainConfig& c, uint64_t run_seed, DistContext& d)
      : config(checked(c, d)),
        dist(d),
        seed(agree(run_seed, d)),
        train_data(reader_plan(c, DataSet::TRAIN, d.rank(), d.size(), seed)),
        eval_data(reader_plan(c, DataSet::EVAL, d.rank(), d.size())),
        stack(stack_spec(c, seed, train_data.capacity, eval_data.capacity), d) {
    // An empty eval set would report accuracy 0 over sequences never evaluated.
    eval_sequences = count_shard(c.eval_file).sequences;
    if (eval_sequences == 0) throw_input(c.eval_file, "the eval file holds no sequences");
    unread_samples.reserve(static_cast<size_t>(stack.step().options().record_slots));
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
  BatchPipeline& batches() {
    if (!train_batches) {
      train_reader = std::make_unique<PretrainingReader>(train_data.options);
      train_batches = std::make_unique<BatchPipeline>(stack.backend(), *train_reader, config.grad_accum_steps,
                                                      LossWeighting::MEAN);
    }
    return *train_batches;
  }

  // Launches one optimizer step; reads the records when the ring is full.
  void optimizer_step(const std::function<void(const TrainProgress&)>& on_step) {
    BatchPipeline& pipeline = batches();
    if (ahead_ready) {
      std::swap(current, ahead);
      ahead_ready = false;
    } else if (!pipeline.next(current)) {
      throw_input(config.source, "training data ran out (no batches)");
    }
    TrainStep& step = stack.step();
    step.launch(current, launched_steps);
    // A reader that ran out says so at the next step, as without reading ahead.
    if (pipeline.reads_ahead()) ahead_ready = pipeline.next(ahead);
    // The step's sequences over all ranks: a sum on the host, of what each rank staged (no wait for the device).
    int64_t sequences = current.sequences;
    if (dist.size() > 1) {
      double all = double(sequences);
      dist.allreduce_sum(&all, 1);
      sequences = static_cast<int64_t>(all);
    }
    unread_samples.push_back(sequences);
    launched_steps += 1;
    launched_samples += sequences;
    progress.data_wait_s = pipeline.wait_seconds();
    if (static_cast<int>(unread_samples.size()) == step.options().record_slots) read_records(on_step);
  }

  // The records of the steps launched since the last read, in order, into `progress` (on_step after each). The first
  // step that was not finite ends it: progress stays at the step before it, with that step's loss, and the steps
  // launched after it updated nothing (a record that is not finite halts the updates on the device, ops.h: RecordStep),
  // so the run ends with the parameters of that step, as when every step was read.
  void read_records(const std::function<void(const TrainProgress&)>& on_step) {
    const std::vector<StepStats>& records = stack.step().read();
    BERT_CHECK(records.size() == unread_samples.size(), records.size(), " step records for ", unread_samples.size(),
               " steps launched");
    for (size_t i = 0; i < records.size() && !progress.non_finite_loss; ++i) {
      const StepStats& r = records[i];
      progress.last_loss = (r.loss.mlm_loss + r.loss.nsp_loss) / (double(config.grad_accum_steps) * dist.size());
      progress.grad_norm = r.grad_norm;
      if (!r.finite()) {
        progress.non_finite_loss = true;
        break;
      }
      progress.learning_rate = r.learning_rate;
      progress.optimizer_steps += 1;
      progress.samples_trained += unread_samples[i];
      if (on_step) on_step(progress);
    }
    unread_samples.clear();
  }

  EvalResult evaluate() {
    if (!eval_set) {  // read once per run; every later evaluation only stages and runs
      PretrainingReader eval_reader(eval_data.options);
      eval_set = std::make_unique<CachedSource>(eval_reader);
    }
    eval_set->rewind();
    BatchPipeline pipeline(stack.backend(), *eval_set, 1, LossWeighting::SUM);
    BertModel& model = stack.model();
    model.zero_stats();
    double weight = 0, samples = 0;
    for (StagedStep batch; pipeline.next(batch);) {
      const DeviceBatch& device = *batch.micro[0];
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
  // Steps are launched on the host's sample count; their records are read every record_slots steps and at the end.
  while (m.launched_samples < target_samples && m.launched_steps < max_steps && !m.progress.non_finite_loss)
    m.optimizer_step(on_step);
  m.read_records(on_step);
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

std::string TrainSession::capture_description() const { return impl_->stack.step().describe_capture(); }

std::vector<std::string> TrainSession::tensor_names() const {
  std::vector<std::string> names;
  for (const TensorInfo& t : impl_->stack.table().tensors()) names.push_back(t.name);
  return names;
}

void TrainSession::save_checkpoint(const std::string& path) const {
  if (impl_->dist.is_root()) impl_->stack.save_checkpoint(path);
}

}  // namespace bertperf
