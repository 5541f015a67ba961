// The TrainSession behind a timed run (timed_run.h: train_session_factory). Kept in its own file so
// that code exercising the harness with scripted trajectories links without the trainer.
#include "harness/timed_run.h"

#ifdef BERTPERF_HAVE_NCCL
#include "backends/cuda/nccl/nccl_comm.h"
#endif

namespace bertperf {

namespace {

class SessionRun final : public TrainingRun {
 public:
  SessionRun(const TrainConfig& config, uint64_t seed, DistContext& dist)
      : config_(config), ranks_(dist.size()), session_(config, seed, dist) {}
  // The session keeps its backend to itself (train_session.h), so a second backend of the same kind, made for the
  // moment, names the libraries; NCCL carries the gradients of a device backend across ranks (dist/reducer.h).
  LibraryVersions library_versions() const override {
    LibraryVersions versions = make_backend(config_.backend)->library_versions();
#ifdef BERTPERF_HAVE_NCCL
    if (config_.backend.name == "cuda" && ranks_ > 1) {
      std::string nccl = cuda::NcclComm::version();  // "NCCL 2.28.9"
      if (nccl.rfind("NCCL ", 0) == 0) nccl = nccl.substr(5);
      versions.emplace_back("NCCL", nccl);
    }
#endif
    return versions;
  }
  std::vector<std::string> tensor_names() const override { return session_.tensor_names(); }
  TrainProgress train_until(int64_t target_samples, const std::function<void(const TrainProgress&)>& on_step,
                            int64_t max_steps) override {
    return session_.train_until(target_samples, on_step, max_steps);
  }
  EvalResult evaluate() override { return session_.evaluate(); }
  int64_t eval_sequences() const override { return session_.eval_sequences(); }

 private:
  TrainConfig config_;
  int ranks_;
  TrainSession session_;
};

}  // namespace

TrainingRunFactory train_session_factory(DistContext& dist) {
  return [&dist](const TrainConfig& config, uint64_t seed) -> std::unique_ptr<TrainingRun> {
    return std::make_unique<SessionRun>(config, seed, dist);
  };
}

}  // namespace bertperf
