// One timed MLPerf run: the full :::MLLOG event sequence around a training session, from
// cache_clear to run_stop, as the compliance rules of rulesets 2.1.0 and 5.0.0 want it.
//
// Init (untimed): cache_clear, init_start, submission_* keys from the system description, the
// seed (once), every hyperparameter (both opt_lamb_epsilon and the older opt_epsilon), the build's
// commit and the config (when given), model construction, the library versions
// (harness/provenance.h) and one weights_initialization per tensor, init_stop. Then run_start, one epoch
// and one block, and at each eval point tracked_stats (training throughput) and
// eval_start/eval_stop/eval_accuracy with epoch_num = samples trained, until the target is reached
// (status success) or the sample or step limit or a non-finite loss ends the run (status aborted;
// a non-finite loss still gets its evaluation and eval_accuracy, as a diverged run's log would);
// train_samples and eval_samples (the sequences actually evaluated) come before run_stop. A
// progress line goes to stderr only, so it never enters the log.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/context.h"
#include "harness/provenance.h"
#include "harness/system_description.h"
#include "harness/train_config.h"
#include "harness/train_session.h"
#include "mllog/mllog.h"

namespace bertperf {

// What a timed run needs from training. TrainSession provides it (make_train_session); tests
// provide scripted trajectories to exercise the log sequence without training a model.
class TrainingRun {
 public:
  virtual ~TrainingRun() = default;
  virtual std::vector<std::string> tensor_names() const = 0;
  // Whole optimizer steps until `target_samples` sequences or `max_steps` steps (TrainSession::train_until).
  virtual TrainProgress train_until(int64_t target_samples, const std::function<void(const TrainProgress&)>& on_step,
                                    int64_t max_steps) = 0;
  virtual EvalResult evaluate() = 0;
  // Sequences in the eval set; a run refuses a set smaller than the benchmark's eval_samples.
  virtual int64_t eval_sequences() const = 0;
  // The libraries training runs on beyond the host's (harness/provenance.h): the backend's, and NCCL's where the
  // gradients go through it.
  virtual LibraryVersions library_versions() const { return {}; }
};

using TrainingRunFactory = std::function<std::unique_ptr<TrainingRun>(const TrainConfig&, uint64_t seed)>;

// The real thing: a TrainSession on the job's ranks (harness/session_run.cpp).
TrainingRunFactory train_session_factory(DistContext& dist);

// Where a timed run is, for ending its log from another thread (a peer rank's failure, comm/context.h).
struct TimedRunState {
  std::atomic<bool> started{false};   // run_start is logged
  std::atomic<int64_t> samples{0};    // samples trained, as of the last step
  std::atomic<int64_t> evaluated{0};  // sequences in the last evaluation, all ranks
};

struct TimedRunOptions {
  std::optional<uint64_t> seed;  // default: fresh from /dev/urandom (closed-division rule)
  bool progress = true;          // the stderr progress line
  TimedRunState* state = nullptr;  // kept up to date when set
  std::optional<RunProvenance> provenance;  // the build's commit and the config, logged after the header when set
};

// Ends the log of a run cut short where `state` says: after run_start, the closing lines timed_run logs
// (block_stop, epoch_stop, train_samples, eval_samples), then run_stop with status aborted.
void log_run_aborted(mllog::Logger& log, const TrainConfig& config, const TimedRunState& state);

struct TimedRunResult {
  bool success = false;      // the target accuracy was reached
  std::string status;        // "success" or "aborted", as logged in run_stop
  std::string abort_reason;  // empty on success
  uint64_t seed = 0;
  int64_t samples_trained = 0;
  int evaluations = 0;
  double best_accuracy = 0;
  int64_t run_start_ms = 0;
  int64_t run_stop_ms = 0;
};

// A seed from /dev/urandom, below 2^31 so every consumer of the log reads it as a plain int.
uint64_t fresh_seed();

// Evicts the config's data files from the page cache (what an unprivileged process can do toward
// the "flush caches before each run" rule).
void evict_data_from_page_cache(const TrainConfig& config);

// The submission_* keys, the seed and every hyperparameter, as a timed run logs them after
// init_start; `bertperf run-once --dry-run` logs these alone.
void log_run_header(mllog::Logger& log, const TrainConfig& config, const SystemDescription& system, uint64_t seed);

// Runs one timed run, logging through `log` (which drops lines on ranks other than 0). A job of another number of
// ranks than the config's batch.ranks is refused (InputError, check_job_ranks) before anything is logged.
TimedRunResult timed_run(const TrainConfig& config, const SystemDescription& system, mllog::Logger& log,
                         const TimedRunOptions& options, DistContext& dist, const TrainingRunFactory& make_run);

}  // namespace bertperf
