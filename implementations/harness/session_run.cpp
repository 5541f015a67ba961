// The TrainSession behind a timed run (timed_run.h: train_session_factory). Kept in its own file so
// that code exercising the harness with scripted trajectories links without the trainer.
#include "harness/timed_run.h"

namespace bertperf {

namespace {

class SessionRun final : public TrainingRun {
 public:
  SessionRun(const TrainConfig& config, uint64_t seed, DistContext& dist)
      : session_(config, seed, dist) {}
  LibraryVersions library_versions() const override { return session_.library_versions(); }
  std::vector<std::string> tensor_names() const override { return session_.tensor_names(); }
  TrainProgress train_until(int64_t target_samples, const std::function<void(const TrainProgress&)>& on_step,
                            int64_t max_steps) override {
    return session_.train_until(target_samples, on_step, max_steps);
  }
  EvalResult evaluate() override { return session_.evaluate(); }
  int64_t eval_sequences() const override { return session_.eval_sequences(); }

 private:
  TrainSession session_;
};

}  // namespace

TrainingRunFactory train_session_factory(DistContext& dist) {
  return [&dist](const TrainConfig& config, uint64_t seed) -> std::unique_ptr<TrainingRun> {
    return std::make_unique<SessionRun>(config, seed, dist);
  };
}

}  // namespace bertperf
