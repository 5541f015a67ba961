// A small BERT with BERT-large's head size (64, cuDNN's fused attention) and one forward and backward of it on any
// backend, for the tests that compare whole steps across backends (test_gpu_step: CUDA against the CPU;
// test_gradient_agreement: the CPU in fp32 against fp64, for the comparison rule itself). Its batches are packed
// rows of variable-length sequences with filler past them, so every layout case of a real batch is in them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "data/batch_source.h"
#include "harness/train_stack.h"
#include "registry/registry.h"
#include "tiny_bert.h"

namespace bertperf {

inline BertConfig small_config(float dropout) {
  return testing::tiny_bert({.vocab = 1000, .hidden = 256, .heads = 4, .intermediate = 1024, .positions = 128,
                             .dropout = dropout});
}

// `rows` packed rows of 128 tokens, 1 to 3 sequences of random lengths each, about 15% predictions (a synthetic
// source's batch, data/batch_source.h); a few padding tokens in some rows, and filler after them.
inline Batch packed_batch(int rows, int V, uint32_t seed) {
  constexpr int S = 128, kMaxPerRow = 3, kMaxPredictions = 20;
  std::mt19937 rng(seed);
  Packing packing;
  for (int r = 0; r < rows; ++r) {
    const int k = 1 + int(rng() % kMaxPerRow);
    int left = S - int(rng() % 9);
    packing.emplace_back();
    for (int q = 0; q < k; ++q) {
      const int len = q + 1 == k ? left : std::max(8, int(rng() % (left - 8 * (k - q - 1))));
      left -= len;
      packing.back().push_back({len, std::max(1, std::min(kMaxPredictions / k, int(0.15 * len)))});
    }
  }
  SyntheticSource source({true, {rows * S, rows * kMaxPerRow, rows * kMaxPredictions, S}}, {packing}, V, seed);
  Batch b;
  source.next(b);
  return b;
}

// A training stack of one rank for the small BERT on `backend`, from the parameters of seed 7 with dropout seed 5 and
// LAMB at learning rate 1e-3 over 100 steps, sized for `capacity`.
inline TrainStack small_stack(const BackendSpec& backend, const BertConfig& config, BatchCapacity capacity,
                              bool capture = true) {
  static const std::unique_ptr<DistContext> one_rank = DistContext::single();
  TrainStackSpec spec;
  spec.model = config;
  spec.backend = backend;
  spec.backend.capture = capture;
  spec.lamb.learning_rate = 1e-3;
  spec.lamb.train_steps = 100;
  spec.seed = 5;
  spec.init_seed = 7;
  spec.train_capacity = capacity;
  return TrainStack(spec, *one_rank);
}

struct Gradients {
  std::string backend;  // its description
  double loss = 0;
  std::unique_ptr<FlatTensors> grads;
};

// One forward and backward (dropout as the config says) on `backend` from the parameters of seed 7.
inline Gradients forward_backward(const BackendSpec& backend, const BertConfig& config, const Batch& batch) {
  TrainStack stack = small_stack(backend, config, batch.capacity);
  ParamBuffers& params = stack.params();
  BertModel& model = stack.model();
  BatchStage stage(stack.backend(), batch.capacity);
  const DeviceBatch& device = stage.stage(batch, LossWeighting::MEAN);
  model.zero_stats();
  model.forward(device, params.weights(), true, nullptr, 0);
  stack.backend().fill_zero(params.grads(), params.elements() * dtype_size(stack.backend().master_dtype()));
  model.backward(device, params.weights(), params.grads(), 1.0f);
  Gradients out;
  out.backend = stack.backend().describe();
  const LossStats s = model.read_stats();
  out.loss = s.mlm_loss + s.nsp_loss;
  out.grads = std::make_unique<FlatTensors>(stack.table());
  params.download_grads(*out.grads);
  return out;
}

}  // namespace bertperf
