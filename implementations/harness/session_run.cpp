// The TrainSession behind a timed run (timed_run.h: make_train_session). Kept in its own file so
// that code exercising the harness with scripted trajectories links without the trainer.
#include "harness/timed_run.h"

namespace bertperf {

namespace {

class SessionRun final : public TrainingRun {
 public:
  SessionRun(const TrainConfig& config, uint64_t seed) : session_(config, seed) {}
  std::vector<std::string> tensor_names() const override { return session_.tensor_names(); }
  TrainProgress train_until(int64_t target_samples,
                            const std::function<void(const TrainProgress&)>& on_step) override {
    return session_.train_until(target_samples, on_step);
  }
  EvalResult evaluate() override { return session_.evaluate(); }

 private:
  TrainSession session_;
};

}  // namespace

std::unique_ptr<TrainingRun> make_train_session(const TrainConfig& config, uint64_t seed) {
  return std::make_unique<SessionRun>(config, seed);
}

}  // namespace bertperf
