// The BERT pretraining model, written once against the op vocabulary (backends/ops.h) and run on the backend it
// is handed: embeddings, post-LN encoder layers with a fused QKV projection and variable-length attention, the
// pooler and NSP head on each sequence's [CLS], and the MLM head at the masked positions only (decoder tied to the
// word embeddings, plus output bias). Loss = MLM (the reference's weighting sum(w * loss) / (sum(w) + 1e-5)) + NSP
// (mean over sequences); the weights come with the batch (model/batch_stage.h), so the model only sums.
//
// The model owns its activations (one arena in backend memory, sized at construction for the largest batch) and
// its loss statistics; it does not own parameters: forward and backward take the flat weight buffer (W) and the
// flat gradient buffer (F) laid out by the parameter table. Nothing is allocated in forward or backward.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "backends/backend.h"
#include "core/buffer.h"
#include "data/batch.h"
#include "model/batch_stage.h"
#include "model/bert_config.h"
#include "model/bert_params.h"

namespace bertperf {

// The loss statistics the forward passes accumulate (model stats() in backend memory, read with read_stats()).
struct LossStats {
  double mlm_loss = 0;     // sum over rows of mlm_loss_weight * loss
  double mlm_correct = 0;  // sum over rows of mlm_count_weight * [argmax == label]
  double nsp_loss = 0;
  double nsp_correct = 0;
};

// Called by the backward as the gradients of a flat element range [begin, end) become final (the heads, then each
// encoder layer from the last, then the embeddings), so a reducer can start on them while the backward goes on.
using GradientsReady = std::function<void(size_t begin, size_t end)>;

class BertModel {
 public:
  BertModel(Backend& backend, const BertConfig& config, const TensorTable& table, BatchCapacity capacity);
  ~BertModel();
  BertModel(const BertModel&) = delete;
  BertModel& operator=(const BertModel&) = delete;

  // Runs the forward pass, keeps what the backward needs, and adds the batch's loss statistics to stats().
  // `training` turns dropout on, with masks keyed by (counter->seed, counter->step + step_offset, site).
  void forward(const DeviceBatch& batch, const void* weights, bool training, const ops::DropoutCounter* counter,
               uint32_t step_offset);
  // Accumulates loss_scale * d(loss)/d(params) of the last forward into grads. `ready` (optional) hears of every
  // range of grads as it becomes final.
  void backward(const DeviceBatch& batch, const void* weights, void* grads, float loss_scale,
                const GradientsReady& ready = {});

  double* stats();            // (4) f64 in backend memory: the LossStats fields in order
  void zero_stats();
  LossStats read_stats();     // one download

  // The last forward's MLM logits, (predictions, mlm_logits_stride()) A, for tests.
  const void* mlm_logits() const;
  int mlm_logits_stride() const;
  const void* nsp_logits() const;  // (sequences, 2) A
  size_t arena_bytes() const;

  // The FP8 scaling state (every encoder GEMM's operand scales and their amax history: ops.h GemmPrecision), laid
  // out by fp8_state_table(): "fp8/scale" [layers, 4 GEMMs (QKV, attention output, FFN up, FFN down), 3 operands
  // (input, weight, gradient)] and "fp8/amax_history" [H, layers, 4, 3]. The table is empty where the backend has no
  // FP8 recipe. Checkpoints carry it (model/checkpoint.h), so a resumed FP8 run quantizes as the interrupted one.
  const TensorTable& fp8_state_table() const { return fp8_table_; }
  void download_fp8_state(FlatTensors& host) const;
  void upload_fp8_state(const FlatTensors& host);
  const BertConfig& config() const { return config_; }
  Backend& backend() const { return backend_; }

 private:
  struct Activations;
  Backend& backend_;
  BertConfig config_;
  BatchCapacity capacity_;
  BertOffsets offsets_;
  size_t table_elements_;
  TensorTable fp8_table_;
  DeviceBuffer arena_memory_;
  std::unique_ptr<Activations> acts_;
  // Dropout of the last forward, reused by its backward.
  bool training_ = false;
  const ops::DropoutCounter* counter_ = nullptr;
  uint32_t step_offset_ = 0;
};

}  // namespace bertperf
