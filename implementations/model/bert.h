// The BERT pretraining model, written once against the op vocabulary (backends/ops.h): embeddings,
// post-LN encoder layers, pooler, the MLM head at the masked positions only (decoder tied to the
// word embeddings, plus output bias) and the NSP head. loss = MLM (the reference's weighting
// sum(w * loss) / (sum(w) + 1e-5)) + NSP (mean over sequences).
//
// Activations live in one arena sized at construction for the largest batch the model will see;
// forward and backward allocate nothing.
#pragma once

#include <cstdint>
#include <memory>

#include "core/buffer.h"
#include "model/batch.h"
#include "model/bert_config.h"
#include "model/bert_params.h"

namespace bertperf {

// Largest batch a model instance must handle; fixes the arena size.
struct BatchShape {
  int rows = 0;            // B
  int seq_len = 0;         // S
  int predictions = 0;     // M, masked-LM slots in the whole batch
  int sequences = 0;       // NSP entries in the whole batch (B, or more when packed)
};

struct BertOutputs {
  float mlm_loss = 0;
  float nsp_loss = 0;
  float total_loss = 0;
  // Masked-LM accuracy parts: sum of w * [argmax == label] and sum of w.
  double mlm_correct = 0;
  double mlm_weight = 0;
  double nsp_correct = 0;
};

class BertModel {
 public:
  BertModel(const BertConfig& config, BatchShape max_shape);
  ~BertModel();
  BertModel(const BertModel&) = delete;
  BertModel& operator=(const BertModel&) = delete;

  // Runs the forward pass and keeps what the backward needs. `training` turns dropout on, with
  // masks keyed by (dropout_seed, step, site).
  BertOutputs forward(const FlatTensors& params, const Batch& batch, bool training, uint64_t dropout_seed,
                      uint32_t step);
  // Accumulates d(total_loss)/d(params) of the last forward into grads (same table as params).
  void backward(const FlatTensors& params, FlatTensors& grads, const Batch& batch);

  // The last forward's logits: MLM (M, V) and NSP (num_sequences, 2).
  const float* mlm_logits() const;
  const float* nsp_logits() const;
  size_t arena_bytes() const;
  const BertConfig& config() const { return config_; }

 private:
  struct Activations;
  BertConfig config_;
  BatchShape max_shape_;
  Arena arena_;
  std::unique_ptr<Activations> acts_;
  // Views of the last parameter and gradient buffers: looking tensors up by name allocates, so a
  // view is rebuilt only when a different buffer is passed, and steps after the first allocate
  // nothing.
  const BertView<const float>& params_view(const FlatTensors& params);
  const BertView<float>& grads_view(FlatTensors& grads);
  BertView<const float> params_view_;
  const float* params_view_base_ = nullptr;
  BertView<float> grads_view_;
  float* grads_view_base_ = nullptr;
  // Dropout state of the last forward, reused by its backward.
  bool training_ = false;
  uint64_t dropout_seed_ = 0;
  uint32_t step_ = 0;
};

}  // namespace bertperf
