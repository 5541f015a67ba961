// The LAMB optimizer of the MLPerf BERT reference (bert-reference.md sections 4.1 and 4.3) over flat buffers in
// backend memory: master weights, gradients and the two moments are laid out by one TensorTable, the trust ratio is
// taken per table entry (per TF variable), and the update runs as backend ops (ops.h) in two stages:
//   lamb_moments  m, v, and per-tensor |w|^2 and |u|^2 as a segmented reduction over the chunks;
//   lamb_apply    the trust ratio per tensor and the update (and the weight copy, where the backend has one).
// Between the stages the per-tensor sums can be completed across ranks (a sharded update). The learning rate, the
// bias corrections and the clip scale are read from StepScalars in backend memory, so a captured step replays.
//
// Global-norm clipping (GradientClip) and gradient accumulation (GradientAccumulate) are single ops the training
// step (harness/train_step.h) issues itself.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/backend.h"
#include "core/tensor_table.h"
#include "optim/hyperparams.h"

namespace bertperf {

// The chunk list of a flat buffer (ops::Chunks) in backend memory: every tensor cut into slices of at most
// kChunkElements, in table order. Built once per table.
class FlatChunks {
 public:
  static constexpr size_t kChunkElements = size_t{1} << 15;

  FlatChunks(Backend& backend, const TensorTable& table);
  ops::Chunks all() const { return range(0, count_); }
  ops::Chunks range(int first, int count) const;
  int count() const { return count_; }
  // The host copy, for finding a shard's chunk range.
  const std::vector<int64_t>& begins() const { return begin_; }

 private:
  int count_ = 0;
  std::vector<int64_t> begin_;
  DeviceBuffer memory_;
  const int32_t* tensor_ = nullptr;
  const int64_t* begin_device_ = nullptr;
  const int64_t* end_device_ = nullptr;
};

class Lamb {
 public:
  // Moments start at zero, as when the reference starts from the phase-1 checkpoint (optimizer slots are never
  // restored). The table's lamb_excluded flags choose which tensors skip weight decay and the trust ratio.
  Lamb(Backend& backend, const TensorTable& table, const LambHyperparams& hp);

  // The host-written scalars of the update after `updates_done` updates: its learning rate (optim/lr_schedule.h at
  // updates_done), its bias corrections (t = updates_done + 1) and the clip threshold.
  void fill_scalars(ops::StepScalars& scalars, int64_t updates_done) const;

  // One update of `master` (and `weights`, the backend's weight copy, or null) by `grads` * (*grad_scale, or 1
  // when null), over `chunks` (all of them, or a shard). `sum_norms`, when given, is called between the stages
  // with the per-tensor sums (2 * tensors f64 in backend memory) to complete them across ranks.
  template <typename SumNorms>
  void update(void* master, void* weights, const void* grads, const float* grad_scale, ops::StepScalars* scalars,
              ops::Chunks chunks, SumNorms&& sum_norms) {
    moments(master, grads, grad_scale, scalars, chunks);
    sum_norms(norms(), 2 * tensors_);
    apply(master, weights, scalars, chunks);
  }
  void update(void* master, void* weights, const void* grads, const float* grad_scale, ops::StepScalars* scalars,
              ops::Chunks chunks) {
    update(master, weights, grads, grad_scale, scalars, chunks, [](double*, size_t) {});
  }

  // The stages, for callers that interleave communication differently.
  void moments(const void* master, const void* grads, const float* grad_scale, const ops::StepScalars* scalars,
               ops::Chunks chunks);
  void apply(void* master, void* weights, const ops::StepScalars* scalars, ops::Chunks chunks);
  double* norms() const { return static_cast<double*>(norms_.data()); }

  const void* m() const { return m_.data(); }
  const void* v() const { return v_.data(); }
  const LambHyperparams& hyperparams() const { return hp_; }
  const FlatChunks& chunks() const { return chunks_; }

 private:
  Backend& backend_;
  LambHyperparams hp_;
  size_t tensors_;
  FlatChunks chunks_;
  DeviceBuffer m_, v_, norms_, excluded_;
};

}  // namespace bertperf
