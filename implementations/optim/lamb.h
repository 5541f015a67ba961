// The LAMB optimizer of the MLPerf BERT reference (bert-reference.md sections 4.1 and 4.3), on the
// CPU, over flat buffers: parameters, gradients and the two moments are FlatTensors laid out by one
// TensorTable, and the trust ratio is taken per table entry (per TF variable).
//
// The pieces, in the order a training step uses them:
//   1. GradAccumulator::add   per micro-batch: clip to max_grad_norm, then accumulate g / n;
//      (with one micro-batch per step, clip_by_global_norm on the gradient is the same thing)
//   2. learning_rate          (optim/lr_schedule.h) for the update about to be made;
//   3. Lamb::step             the update.
//
// Work is split into fixed-size chunks of tensors and reduced in chunk order, so norms and updates
// are bit-identical whatever the OpenMP thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor_table.h"
#include "harness/train_config.h"

namespace bertperf {

// The global L2 norm over every tensor of the table (padding between tensors is not counted),
// accumulated in double.
double global_norm(const FlatTensors& grads);

// The reference's tf.clip_by_global_norm: g <- g * max_norm / max(norm, max_norm). Returns the
// norm before clipping. A non-finite norm leaves g untouched, so the caller can see it and abort
// (the reference would turn every gradient into NaN).
double clip_by_global_norm(FlatTensors& grads, double max_norm);

// A slice [begin, end) of one tensor: the unit of parallel work and of partial sums.
struct FlatChunk {
  size_t tensor;
  size_t begin, end;
};

class Lamb {
 public:
  // Moments start at zero and the bias-correction step at 0, as when the reference starts from
  // the phase-1 checkpoint (optimizer slots are never restored).
  Lamb(const TensorTable& table, const LambHyperparams& hp);

  // One update with learning rate `lr` (usually learning_rate(hp, steps_taken())): advances the
  // bias-correction step t, then for every tensor w with gradient g
  //   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2
  //   u = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)  [+ weight_decay * w unless excluded]
  //   r = excluded ? 1 : (|w| > 0 && |u| > 0 ? |w| / |u| : 1)
  //   w = w - r * lr * u
  // where "excluded" is lamb_excluded(name) (LayerNorm, layer_norm and bias variables) and the
  // norms are over the whole tensor, with w taken before the update.
  void step(FlatTensors& params, const FlatTensors& grads, double lr);

  int64_t steps_taken() const { return t_; }
  const FlatTensors& m() const { return m_; }
  const FlatTensors& v() const { return v_; }
  FlatTensors& m() { return m_; }
  FlatTensors& v() { return v_; }
  const LambHyperparams& hyperparams() const { return hp_; }

 private:
  const TensorTable* table_;
  LambHyperparams hp_;
  FlatTensors m_, v_;
  int64_t t_ = 0;
  std::vector<uint8_t> excluded_;  // per tensor
  std::vector<FlatChunk> chunks_;
  // Scratch, sized once: per-chunk partial squared norms and per-tensor trust ratios.
  std::vector<double> w_sq_, u_sq_;
  std::vector<float> ratio_;
};

// Gradient accumulation as the reference's deferred-gradient optimizer: each micro-batch gradient
// is clipped to max_grad_norm on its own, then added as g / n.
class GradAccumulator {
 public:
  GradAccumulator(const TensorTable& table, int micro_batches, double max_grad_norm);

  // Clips `micro` in place and adds micro / n to the sum. Returns the micro-batch's norm before
  // clipping (non-finite: nothing is added, and the caller should abort the run).
  double add(FlatTensors& micro);
  // Whether n micro-batches have been added since the last reset.
  bool ready() const { return added_ == micro_batches_; }
  const FlatTensors& gradient() const { return sum_; }
  // Mutable, for the cross-rank all-reduce of the accumulated sum.
  FlatTensors& gradient() { return sum_; }
  // Zeroes the sum for the next optimizer step.
  void reset();

 private:
  int micro_batches_;
  double max_grad_norm_;
  int added_ = 0;
  FlatTensors sum_;
  // Norm scratch, sized once so a step allocates nothing.
  std::vector<FlatChunk> chunks_;
  std::vector<double> partial_;
};

}  // namespace bertperf
