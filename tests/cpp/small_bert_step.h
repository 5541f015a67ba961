// A small BERT with BERT-large's head size (64, cuDNN's fused attention) and one forward and backward of it on any
// backend, for the tests that compare whole steps across backends (test_gpu_step: CUDA against the CPU;
// test_gradient_agreement: the CPU in fp32 against fp64, for the comparison rule itself). Its batches are packed
// rows of variable-length sequences with filler past them, so every layout case of a real batch is in them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>

#include "backends/backend.h"
#include "data/batch.h"
#include "model/batch_stage.h"
#include "model/bert.h"
#include "model/bert_params.h"
#include "model/param_buffers.h"

namespace bertperf {

inline BertConfig small_config(float dropout) {
  BertConfig c;
  c.vocab_size = 1000;
  c.hidden_size = 256;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;  // head size 64, as BERT-large
  c.intermediate_size = 1024;
  c.max_position_embeddings = 128;
  c.hidden_dropout_prob = dropout;
  c.attention_probs_dropout_prob = dropout;
  return c;
}

// `rows` packed rows of 128 tokens, 1 to 3 sequences of random lengths each, 15% predictions; filler after them.
inline Batch packed_batch(int rows, int V, uint32_t seed) {
  constexpr int S = 128, kMaxPerRow = 3, kMaxPredictions = 20;
  std::mt19937 rng(seed);
  Batch b;
  b.capacity = {rows * S, rows * kMaxPerRow, rows * kMaxPredictions, S};
  for (int r = 0; r < rows; ++r) {
    const int k = 1 + int(rng() % kMaxPerRow);
    int left = S - int(rng() % 9);  // a few padding tokens in some rows
    for (int q = 0; q < k; ++q) {
      const int len = q + 1 == k ? left : std::max(8, int(rng() % (left - 8 * (k - q - 1))));
      left -= len;
      const int first = b.tokens;
      b.cu_seqlens.push_back(first);
      for (int t = 0; t < len; ++t) {
        b.input_ids.push_back(5 + int(rng() % (V - 5)));
        b.segment_ids.push_back(t >= len / 2);
        b.position_ids.push_back(t);
      }
      const int predictions = std::max(1, std::min(kMaxPredictions / k, int(0.15 * len)));
      for (int p = 0; p < predictions; ++p) {
        b.mlm_positions.push_back(first + 1 + int(rng() % (len - 1)));
        b.mlm_labels.push_back(5 + int(rng() % (V - 5)));
        b.mlm_weights.push_back(1.0f);
      }
      b.nsp_labels.push_back(int(rng() % 2));
      b.tokens += len;
      b.sequences += 1;
    }
  }
  fill_to_capacity(b);
  return b;
}

struct Gradients {
  double loss = 0;
  std::unique_ptr<FlatTensors> grads;
};

// One forward and backward (dropout as the config says) on `backend` from the parameters of seed 7.
inline Gradients forward_backward(Backend& backend, const BertConfig& config, const TensorTable& table,
                                  const Batch& batch) {
  FlatTensors init(table);
  bert_init_parameters(init, config, 7);
  ParamBuffers params(backend, table);
  params.upload(init);
  BertModel model(backend, config, table, batch.capacity);
  BatchStage stage(backend, batch.capacity);
  const DeviceBatch& device = stage.stage(batch, LossWeighting::MEAN);
  model.zero_stats();
  model.forward(device, params.weights(), true, nullptr, 0);
  backend.fill_zero(params.grads(), params.elements() * dtype_size(backend.master_dtype()));
  model.backward(device, params.weights(), params.grads(), 1.0f);
  Gradients out;
  const LossStats s = model.read_stats();
  out.loss = s.mlm_loss + s.nsp_loss;
  out.grads = std::make_unique<FlatTensors>(table);
  params.download_grads(*out.grads);
  return out;
}

}  // namespace bertperf
