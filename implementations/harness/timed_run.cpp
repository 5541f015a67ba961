// One timed MLPerf run and its :::MLLOG event sequence (timed_run.h).
#include "harness/timed_run.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "core/errors.h"

namespace bertperf {

using mllog::Value;

uint64_t fresh_seed() {
  std::ifstream in("/dev/urandom", std::ios::binary);
  uint32_t raw = 0;
  in.read(reinterpret_cast<char*>(&raw), sizeof(raw));
  BERT_CHECK(in.good(), "cannot read /dev/urandom for the run seed");
  return raw & 0x7FFFFFFFu;
}

void evict_data_from_page_cache(const TrainConfig& config) {
  std::vector<std::string> files = config.train_files;
  files.push_back(config.eval_file);
  if (!config.init_checkpoint.empty()) files.push_back(config.init_checkpoint);
  for (const auto& file : files) {
    const int fd = ::open(file.c_str(), O_RDONLY);
    if (fd < 0) continue;  // the session reports missing data with a proper message
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(seconds);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", (long long)(s / 3600), (long long)(s / 60 % 60));
  else
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
  return buf;
}

// The stderr progress line: rewritten in place on a terminal, one line every few seconds when
// stderr is a file (so a redirected stderr stays readable).
class ProgressLine {
 public:
  ProgressLine(bool enabled, int64_t max_samples)
      : enabled_(enabled), max_samples_(max_samples), tty_(::isatty(STDERR_FILENO)) {}

  void update(const TrainProgress& p, double accuracy, double samples_per_second, bool force = false) {
    if (!enabled_) return;
    const double now = seconds_since(start_);
    if (!force && now - last_print_ < (tty_ ? 0.5 : 10.0)) return;
    last_print_ = now;
    const double eta = samples_per_second > 0 ? double(max_samples_ - p.samples_trained) / samples_per_second : -1;
    char acc[32] = "-";
    if (accuracy >= 0) std::snprintf(acc, sizeof(acc), "%.4f", accuracy);
    std::fprintf(stderr, "%s[bertperf] samples %lld/%lld  loss %.4f  mlm_acc %s  %.1f samples/s  ETA(max) %s%s",
                 tty_ ? "\r" : "", (long long)p.samples_trained, (long long)max_samples_, p.last_loss, acc,
                 samples_per_second, format_duration(eta).c_str(), tty_ ? "\x1b[K" : "\n");
    std::fflush(stderr);
    dirty_ = tty_;
  }
  void finish() {
    if (enabled_ && dirty_) std::fputc('\n', stderr);
    dirty_ = false;
  }

 private:
  bool enabled_;
  int64_t max_samples_;
  bool tty_;
  bool dirty_ = false;
  Clock::time_point start_ = Clock::now();
  double last_print_ = -1e9;
};

void log_hyperparameters(mllog::Logger& log, const TrainConfig& c) {
  const LambHyperparams& h = c.lamb;
  log.event("global_batch_size", c.global_batch_size());
  log.event("d_batch_size", c.local_batch_size);
  log.event("gradient_accumulation_steps", c.grad_accum_steps);
  log.event("max_sequence_length", c.seq_len);
  log.event("max_predictions_per_seq", c.max_predictions);
  log.event("opt_name", "lamb");
  log.event("opt_base_learning_rate", h.learning_rate);
  // Both spellings of the LAMB epsilon: rulesets up to 2.0.0 (and 2.1.0 as tagged) read
  // opt_epsilon, later ones opt_lamb_epsilon.
  log.event("opt_lamb_epsilon", h.epsilon);
  log.event("opt_epsilon", h.epsilon);
  log.event("opt_learning_rate_training_steps", h.train_steps);
  log.event("opt_learning_rate_warmup_steps", h.warmup_steps);
  log.event("num_warmup_steps", h.warmup_steps);
  log.event("start_warmup_step", h.start_warmup_step);
  log.event("opt_lamb_beta_1", h.beta1);
  log.event("opt_lamb_beta_2", h.beta2);
  log.event("opt_lamb_weight_decay_rate", h.weight_decay);
  log.event("opt_lamb_learning_rate_decay_poly_power", h.poly_power);
  log.event("opt_gradient_clip_norm", h.max_grad_norm);
  log.event("max_samples", c.max_samples);
}

}  // namespace

void log_run_aborted(mllog::Logger& log, const TrainConfig& config, const TimedRunState& state) {
  if (state.started) {
    const int64_t samples = state.samples, evaluated = state.evaluated;
    log.end("block_stop", nullptr, {{"first_epoch_num", 1}});
    log.end("epoch_stop", nullptr, {{"epoch_num", samples}});
    log.event("train_samples", samples);
    log.event("eval_samples", evaluated > 0 ? evaluated : config.eval_samples);
  }
  log.end("run_stop", nullptr, {{"status", "aborted"}});
}

void log_run_header(mllog::Logger& log, const TrainConfig& config, const SystemDescription& system, uint64_t seed) {
  log.event("submission_benchmark", config.submission_benchmark);
  log.event("submission_org", system.submitter);
  log.event("submission_division", config.division.empty() ? system.division : config.division);
  log.event("submission_status", system.log_status());
  log.event("submission_platform", system.system_name);
  log.event("seed", seed);
  log_hyperparameters(log, config);
}

TimedRunResult timed_run(const TrainConfig& config, const SystemDescription& system, mllog::Logger& log,
                         const TimedRunOptions& options, DistContext& world, const TrainingRunFactory& make_run) {
  check_job_ranks(config, world.size());  // before the first line of the log
  TimedRunResult result;

  evict_data_from_page_cache(config);
  log.event("cache_clear", true);
  log.start("init_start");
  // Every rank trains with rank 0's seed (allowed: one seed per run, shared across processes).
  uint64_t seed = options.seed ? *options.seed : fresh_seed();
  world.broadcast(seed);
  result.seed = seed;
  log_run_header(log, config, system, seed);
  if (options.provenance) log_provenance(log, *options.provenance);

  std::unique_ptr<TrainingRun> run = make_run(config, seed);
  if (log.enabled()) {
    LibraryVersions versions = host_library_versions();
    for (auto& version : run->library_versions()) versions.push_back(std::move(version));
    log_library_versions(log, versions);
  }
  // A result claims the benchmark's eval set: a smaller one is refused before the clock starts.
  const int64_t eval_sequences = run->eval_sequences();
  if (eval_sequences < config.eval_samples)
    throw_input(config.eval_file, cat("the eval file holds ", eval_sequences, " sequences; benchmark '",
                                      config.benchmark, "' evaluates on ", config.eval_samples));
  for (const auto& name : run->tensor_names()) log.event("weights_initialization", nullptr, {{"tensor", name}});
  world.barrier();
  log.end("init_stop");

  // ---- timed region ----
  result.run_start_ms = mllog::now_ms();
  log.start("run_start");
  if (options.state) options.state->started = true;
  // BERT has no epochs; as NVIDIA's logs, one epoch and one block span the run, and epoch_stop
  // carries the samples trained (BERT's "epoch" unit).
  log.start("epoch_start", nullptr, {{"epoch_num", 0}});
  log.start("block_start", nullptr, {{"first_epoch_num", 1}, {"epoch_count", 1}});

  const int64_t gbs = config.global_batch_size();
  ProgressLine progress(options.progress && world.is_root(), config.max_samples);
  double last_accuracy = -1;
  auto interval_start = Clock::now();
  int64_t interval_start_samples = 0;
  double interval_start_wait = 0;  // the run's time waiting for training batches so far (rank 0's)
  auto on_step = [&](const TrainProgress& p) {
    if (options.state) options.state->samples = p.samples_trained;
    const double rate = double(p.samples_trained - interval_start_samples) / std::max(1e-9, seconds_since(interval_start));
    progress.update(p, last_accuracy, rate);
  };

  const int64_t max_steps = config.max_steps > 0 ? config.max_steps : std::numeric_limits<int64_t>::max();
  int64_t samples = 0;
  int64_t evaluated = 0;  // sequences in the last evaluation, all ranks
  for (int64_t k = 1;; ++k) {
    const int64_t target = std::min(eval_point_samples(k, config.eval_interval_samples, gbs), config.max_samples);
    const TrainProgress p = run->train_until(target, on_step, max_steps);
    samples = p.samples_trained;
    // A diverged run is still evaluated where it stopped and logs its eval_accuracy, so its log
    // fails the checkers on convergence only, as a real diverged MLPerf run's does.
    const bool diverged = p.non_finite_loss || !std::isfinite(p.last_loss);
    const double train_seconds = seconds_since(interval_start);
    const double throughput = double(samples - interval_start_samples) / std::max(1e-9, train_seconds);
    if (diverged) {
      result.abort_reason = cat("non-finite training loss at ", samples, " samples");
    } else {
      // Beside the interval's throughput, the seconds of it rank 0 waited for training batches (0 when the
      // pipeline keeps up; model/batch_pipeline.h).
      log.event("tracked_stats", {{"throughput", throughput}, {"data_wait_s", p.data_wait_s - interval_start_wait}},
                {{"epoch_num", samples}});
    }
    log.start("eval_start", samples, {{"epoch_num", samples}});
    const EvalResult eval = run->evaluate();
    log.end("eval_stop", samples, {{"epoch_num", samples}});
    ++result.evaluations;
    evaluated = eval.samples;
    if (options.state) options.state->evaluated = evaluated;
    log.event("eval_accuracy", eval.mlm_accuracy, {{"epoch_num", samples}});
    if (diverged) break;
    if (!std::isfinite(eval.mlm_accuracy)) {
      result.abort_reason = cat("non-finite eval accuracy at ", samples, " samples");
      break;
    }
    last_accuracy = eval.mlm_accuracy;
    result.best_accuracy = std::max(result.best_accuracy, eval.mlm_accuracy);
    progress.update(p, last_accuracy, throughput, /*force=*/true);
    if (eval.mlm_accuracy >= config.target_accuracy) {
      result.success = true;
      break;
    }
    if (samples >= config.max_samples || p.optimizer_steps >= max_steps) {
      result.abort_reason = samples >= config.max_samples
                                ? cat("target accuracy ", config.target_accuracy, " not reached within max_samples ",
                                      config.max_samples, " (best ", result.best_accuracy, ")")
                                : cat("target accuracy ", config.target_accuracy, " not reached within ", max_steps,
                                      " optimizer steps (train_steps; best ", result.best_accuracy, ")");
      break;
    }
    interval_start = Clock::now();
    interval_start_samples = samples;
    interval_start_wait = p.data_wait_s;
  }
  progress.finish();

  result.samples_trained = samples;
  result.status = result.success ? "success" : "aborted";
  log.end("block_stop", nullptr, {{"first_epoch_num", 1}});
  log.end("epoch_stop", nullptr, {{"epoch_num", samples}});
  log.event("train_samples", samples);
  // The number actually evaluated: a benchmark's result needs its whole eval set (10,000 for BERT),
  // and a log must not claim it when the eval file held something else.
  const int64_t eval_samples = evaluated > 0 ? evaluated : config.eval_samples;
  if (evaluated > 0 && evaluated != config.eval_samples && world.is_root())
    std::fprintf(stderr, "[bertperf] warning: evaluated %lld samples per eval, the benchmark wants %lld\n",
                 (long long)evaluated, (long long)config.eval_samples);
  log.event("eval_samples", eval_samples);
  result.run_stop_ms = mllog::now_ms();
  log.end("run_stop", nullptr, {{"status", result.status}});
  return result;
}

}  // namespace bertperf
