// One optimizer step (train_step.h).
#include "harness/train_step.h"

#include <algorithm>
#include <cmath>

#include "core/errors.h"

namespace bertperf {

TrainStep::TrainStep(Backend& backend, BertModel& model, ParamBuffers& params, Lamb& lamb, GradReducer& reducer,
                     const StepOptions& options)
    : backend_(backend), model_(model), params_(params), lamb_(lamb), reducer_(reducer), options_(options) {
  BERT_CHECK(options.micro_batches > 0 && options.ranks > 0 && options.rank >= 0 && options.rank < options.ranks,
             "a training step needs micro_batches > 0 and a rank inside its world");
  BERT_CHECK(options.record_slots > 0, "a training step needs a ring of at least one record");
  scalars_ = DeviceBuffer(backend, sizeof(ops::StepScalars));
  host_scalars_ = DeviceBuffer(backend, sizeof(ops::StepScalars), MemoryKind::PINNED);
  sums_ = DeviceBuffer(backend, ops::kRecordSums * sizeof(double));
  ring_ = DeviceBuffer(backend, options.record_slots * sizeof(ops::StepRecord));
  host_ring_ = DeviceBuffer(backend, options.record_slots * sizeof(ops::StepRecord), MemoryKind::PINNED);
  read_.reserve(2 * static_cast<size_t>(options.record_slots));  // so that no step allocates
  handed_.reserve(read_.capacity());
  const int parts = options.micro_batches * options.ranks;
  if (options.clip == ClipMode::PER_MICRO_BATCH && parts > 1)
    accumulator_ = DeviceBuffer(backend, params.elements() * dtype_size(backend.master_dtype()));
  on_ready_ = [this](size_t begin, size_t end) { reducer_.ready(params_.grads(), begin, end); };
  for (auto& v : batches_) v.reserve(options.micro_batches);  // so that no step allocates
  // Captured where the backend can and every collective of the step is held by the capture (the reducer's).
  not_captured_ = !options.capture                    ? "capture is off in the config"
                  : !backend.capabilities().capture ? "the backend cannot capture"
                                                    : reducer.not_capturable();
  can_capture_ = not_captured_.empty();
  // A sharded reducer: this rank clips and updates the chunks of its part of the buffer.
  const FlatRange part = reducer.part(params.elements());
  const std::vector<int64_t>& begins = lamb.chunks().begins();
  for (int c = 0; c < static_cast<int>(begins.size()); ++c) {
    const auto at = static_cast<size_t>(begins[c]);
    if (at < part.begin || at >= part.end) continue;
    if (part_chunks_ == 0) first_part_chunk_ = c;
    ++part_chunks_;
  }
  BERT_CHECK(!reducer.sharded() || lamb.partial() || reducer.parts().size() == 1,
             "a sharded reducer needs a LAMB built for this rank's part");
}

TrainStep::~TrainStep() = default;

StepStats TrainStep::run(const StagedStep& batches, int64_t updates_done) {
  launch(batches, updates_done);
  return read().back();
}

void TrainStep::launch(const StagedStep& batches, int64_t updates_done) {
  const int n = options_.micro_batches;
  BERT_CHECK(static_cast<int>(batches.micro.size()) == n && (batches.set == 0 || batches.set == 1), "a step of ", n,
             " micro-batches was handed ", batches.micro.size());
  BERT_CHECK(updates_done >= 0, "a step's count cannot be negative, got ", updates_done);
  const int set = batches.set;
  // A set's graph was captured on its batches: a set keeps its buffers (model/batch_pipeline.h).
  BERT_CHECK(!graphs_[set] || batches_[set] == batches.micro, "a captured step was handed other buffers for its set");
  batches_[set].assign(batches.micro.begin(), batches.micro.end());

  // The ring holds record_slots steps: a caller that has not read them is made to wait here, once in so many steps.
  if (unread_ == options_.record_slots) collect();
  if (updates_done != device_updates_) {
    // The first step, or a count other than the device's: the scalars from the host. The ring's slots are numbered
    // by the count, so unread records are read first; that read, or the one after the last launch, also waited for
    // the last upload from the pinned scalars.
    if (unread_ > 0) collect();
    auto& host = *host_scalars_.as<ops::StepScalars>();
    host = ops::StepScalars{};
    host.dropout.seed = options_.seed;
    lamb_.fill_scalars(host, updates_done);
    backend_.upload(scalars_.data(), &host, sizeof host);
    device_updates_ = updates_done;
  }

  // The first step runs eagerly (every op at its shape once); each set is captured at its first step after that.
  if (can_capture_ && steps_launched_ > 0 && !graphs_[set]) {
    graphs_[set] = backend_.capture([this, set] { issue(set); });
    if (!graphs_[set]) {  // this backend cannot: eager from now on
      can_capture_ = false;
      not_captured_ = "the backend declined the capture";
    }
  }
  if (graphs_[set]) {
    graphs_[set]->replay();
  } else {
    issue(set);
  }
  ++steps_launched_;
  ++device_updates_;
  ++unread_;
}

const std::vector<StepStats>& TrainStep::read() {
  if (unread_ > 0) collect();
  handed_.clear();
  handed_.swap(read_);
  return handed_;
}

void TrainStep::collect() {
  const int K = options_.record_slots;
  backend_.download(host_ring_.data(), ring_.data(), K * sizeof(ops::StepRecord));
  backend_.synchronize();  // the steps and the download have run
  const auto* ring = host_ring_.as<ops::StepRecord>();
  for (int64_t u = device_updates_ - unread_; u < device_updates_; ++u) {
    const ops::StepRecord& r = ring[u % K];
    BERT_CHECK(r.updates == u, "the record of step ", u + 1, " holds step ", r.updates + 1);
    StepStats out;
    out.loss = {r.mlm_loss, r.mlm_correct, r.nsp_loss, r.nsp_correct};
    out.grad_norm = std::sqrt(r.grad_norm_sq);
    out.learning_rate = r.learning_rate;
    out.updates = r.updates;
    out.nonfinite = r.nonfinite > 0 ? std::max(1, static_cast<int>(std::min(r.nonfinite, 1e9))) : 0;
    read_.push_back(out);
  }
  unread_ = 0;
}

std::string TrainStep::describe_capture() const {
  if (!can_capture_) return "eager: " + not_captured_;
  return options_.ranks > 1 ? "captured from the second step, the reducer's collectives included"
                            : "captured from the second step";
}

void TrainStep::issue(int set) {
  const int n = options_.micro_batches, W = options_.ranks;
  auto* scalars = scalars_.as<ops::StepScalars>();
  const void* weights = params_.weights();
  void* grads = params_.grads();
  const size_t grad_bytes = params_.elements() * dtype_size(backend_.master_dtype());
  const ops::Chunks all = lamb_.chunks().all();
  const void* update_grads = grads;
  // The step's schedule from the count in the scalars. The dropout step of micro-batch m on this rank is
  // updates * n * W + m * W + rank, so a micro-batch draws the same masks whether it runs as one of n on one rank or
  // on one of n ranks.
  lamb_.schedule(scalars, static_cast<uint32_t>(n * W), static_cast<uint32_t>(options_.rank));
  model_.zero_stats();
  const float* grad_scale = &scalars->clip_scale;

  if (options_.clip == ClipMode::PER_MICRO_BATCH) {
    for (int m = 0; m < n; ++m) {
      const DeviceBatch& batch = *batches_[set][m];
      model_.forward(batch, weights, true, &scalars->dropout, static_cast<uint32_t>(m * W));
      backend_.fill_zero(grads, grad_bytes);
      model_.backward(batch, weights, grads, 1.0f);
      backend_.gradient_clip({.scalars = scalars, .partial = nullptr, .grads = grads, .chunks = all});
      if (accumulator_.data()) {
        if (m == 0) backend_.fill_zero(accumulator_.data(), grad_bytes);
        backend_.gradient_accumulate({.sum = accumulator_.data(), .grads = grads, .scalars = scalars, .chunks = all,
                                      .scale = 1.0f / static_cast<float>(n * W)});
      }
    }
    if (accumulator_.data()) {
      update_grads = accumulator_.data();
      grad_scale = nullptr;  // each micro-batch was clipped on its way in
    }
    reducer_.finish(const_cast<void*>(update_grads), params_.elements());
  } else {
    backend_.fill_zero(grads, grad_bytes);
    static const GradientsReady no_hook;
    for (int m = 0; m < n; ++m) {
      const DeviceBatch& batch = *batches_[set][m];
      model_.forward(batch, weights, true, &scalars->dropout, static_cast<uint32_t>(m * W));
      model_.backward(batch, weights, grads, 1.0f / static_cast<float>(n * W),
                      m + 1 == n ? on_ready_ : no_hook);
    }
    reducer_.finish(grads, params_.elements());
    if (reducer_.sharded()) {
      // Only this rank's part holds the sum: its share of the squared norm, summed over ranks, finishes the clip.
      backend_.gradient_clip({.scalars = scalars, .partial = &scalars->grad_norm_sq, .grads = grads,
                              .chunks = lamb_.chunks().range(first_part_chunk_, part_chunks_)});
      reducer_.sum(&scalars->grad_norm_sq, 1);
      backend_.gradient_clip_finish({.scalars = scalars});
    } else {
      backend_.gradient_clip({.scalars = scalars, .partial = nullptr, .grads = grads, .chunks = all});
    }
  }
  // The step's sums across ranks (its loss statistics and non-finite count), before the update, with the count back in
  // the scalars: an update that any rank found not finite is skipped on every rank, as one rank running every rank's
  // micro-batches would skip it.
  auto* sums = sums_.as<double>();
  backend_.copy(sums, model_.stats(), 4 * sizeof(double));
  backend_.copy(sums + 4, &scalars->nonfinite, sizeof(double));
  reducer_.sum(sums, ops::kRecordSums);
  backend_.copy(&scalars->nonfinite, sums + 4, sizeof(double));
  const bool sharded = reducer_.sharded();
  lamb_.update_part(params_.master(), params_.weight_copy(), update_grads, grad_scale, scalars,
                    [&](double* norms, size_t count) {
                      if (sharded) reducer_.sum(norms, count);
                    });
  if (sharded) {
    reducer_.gather(params_.master(), backend_.master_dtype());
    if (params_.weight_copy()) reducer_.gather(params_.weight_copy(), backend_.weight_dtype());
  }
  // The step's record, filed in the ring.
  backend_.record_step({scalars, sums, ring_.as<ops::StepRecord>(), options_.record_slots});
}

}  // namespace bertperf
