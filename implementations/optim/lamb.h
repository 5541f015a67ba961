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
// kChunkElements, in table order. Built once per table. Built for a part [part_begin, part_end) of the buffer, it
// holds the chunks that start inside the part, with offsets from part_begin (a sharded update's own chunks).
class FlatChunks {
 public:
  static constexpr size_t kChunkElements = size_t{1} << 15;

  FlatChunks(Backend& backend, const TensorTable& table, size_t part_begin = 0, size_t part_end = SIZE_MAX);
  ops::Chunks all() const { return range(0, count_); }
  ops::Chunks range(int first, int count) const;
  int count() const { return count_; }
  // The host copy, for finding a shard's chunk range.
  const std::vector<int64_t>& begins() const { return begin_; }
  // Where every chunk of the whole table starts: the cuts a sharded update may split the buffer at.
  static std::vector<int64_t> starts(const TensorTable& table);

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
  // Built for a part [part_begin, part_end) of the flat buffers (a sharded update, ZeRO-1), it keeps moments for
  // that part only and update_part() updates only that part.
  Lamb(Backend& backend, const TensorTable& table, const LambHyperparams& hp, size_t part_begin = 0,
       size_t part_end = SIZE_MAX);

  // The host-written scalars of the update after `updates_done` updates: the count itself, its learning rate
  // (optim/lr_schedule.h at updates_done), its bias corrections (t = updates_done + 1) and the clip threshold.
  void fill_scalars(ops::StepScalars& scalars, int64_t updates_done) const;

  // Queues the same schedule on the device (ops.h: ScheduleStep), from scalars->updates: the learning rate, the bias
  // corrections, and the dropout step updates * dropout_stride + dropout_offset; the step's first op.
  void schedule(ops::StepScalars* scalars, uint32_t dropout_stride, uint32_t dropout_offset);

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

  // The update of this Lamb's part of the full flat buffers `master`, `weights` (or null) and `grads` (all of them
  // unless built for a part), with `sum_norms` as in update(): it completes the part's per-tensor sums over ranks.
  template <typename SumNorms>
  void update_part(void* master, void* weights, const void* grads, const float* grad_scale,
                   ops::StepScalars* scalars, SumNorms&& sum_norms) {
    const size_t f = part_begin_ * dtype_size(backend_.master_dtype());
    const size_t w = part_begin_ * dtype_size(backend_.weight_dtype());
    auto* m = static_cast<unsigned char*>(master) + f;
    moments(m, static_cast<const unsigned char*>(grads) + f, grad_scale, scalars, part_chunks_.all());
    sum_norms(norms(), 2 * tensors_);
    apply(m, weights ? static_cast<unsigned char*>(weights) + w : nullptr, scalars, part_chunks_.all());
  }
  // Bytes of optimizer state (the two moments) this Lamb holds.
  size_t state_bytes() const { return m_.bytes() + v_.bytes(); }
  bool partial() const { return part_begin_ != 0 || part_end_ != total_; }

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
  size_t total_, part_begin_, part_end_;
  FlatChunks chunks_, part_chunks_;
  DeviceBuffer m_, v_, norms_, excluded_;
};

}  // namespace bertperf
