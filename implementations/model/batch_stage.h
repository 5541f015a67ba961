// A batch in backend memory, and the stage that puts it there: a source (data/batch_source.h) writes the batch
// straight into the stage's pinned block (host(): the one host copy from the file's bytes), the stage adds the loss
// weights the model sums by and uploads the block in one copy (asynchronous on a GPU, so the next batch travels
// while the current step runs). A stage is sized once for the run's capacity and allocates nothing per batch.
// Before its block is handed out again it waits for the event of the upload that read the last batch from it
// (device.h), so two batches staged in a row never tear; a caller that wants the next batch to travel while the
// current one runs keeps two stages and takes turns (model/batch_pipeline.h).
//
// Loss weights. Training (MEAN) uses the reference's per-batch means: mlm_loss_weight = w / (sum w + 1e-5) and
// nsp_loss_weight = 1 / sequences, so the model's summed statistics are the batch's MLM and NSP losses. Eval (SUM)
// uses plain sums (mlm_loss_weight = w, nsp_loss_weight = 1) so batches add up over the eval set. Count weights are
// w for the MLM accuracy and 1 for each real sequence; filler has weight 0 everywhere.
#pragma once

#include <cstdint>
#include <memory>

#include "backends/backend.h"
#include "data/batch.h"

namespace bertperf {

struct DeviceBatch {
  const int32_t* input_ids = nullptr;       // (capacity.tokens)
  const int32_t* segment_ids = nullptr;
  const int32_t* position_ids = nullptr;
  const int32_t* cu_seqlens = nullptr;      // (capacity.sequences + 1)
  const int32_t* cls_positions = nullptr;   // (capacity.sequences): cu_seqlens[s] for a real sequence, 0 for filler
  const int32_t* nsp_labels = nullptr;      // (capacity.sequences)
  const float* nsp_loss_weight = nullptr;
  const float* nsp_count_weight = nullptr;
  const int32_t* mlm_positions = nullptr;   // (capacity.predictions)
  const int32_t* mlm_labels = nullptr;
  const float* mlm_loss_weight = nullptr;
  const float* mlm_count_weight = nullptr;
  // The sizes the ops run at: the batch's real ones, or the capacities on a backend with static shapes.
  int tokens = 0, sequences = 0, predictions = 0;
  int max_seqlen = 0;  // the capacity's (the run's seq_len), on every backend: it numbers attention dropout
  // The real sizes, for the host's counts.
  int real_sequences = 0;
  double mlm_weight = 0;  // sum of the real predictions' weights
};

enum class LossWeighting { MEAN, SUM };

class BatchStage {
 public:
  BatchStage(Backend& backend, BatchCapacity capacity);
  // The pinned block's batch arrays, for a source to fill; waits first for the upload that last read the block.
  BatchView& host();
  // Adds the loss weights to what was written into host() and starts the upload; the returned batch is valid until
  // the block is handed out again. Host checks here are cheap (sizes, not token values: the source checked those).
  const DeviceBatch& upload(LossWeighting weighting);
  // A host batch (of this stage's capacity) copied into host(), then upload().
  const DeviceBatch& stage(const Batch& batch, LossWeighting weighting);
  const DeviceBatch& device() const { return device_; }
  const BatchCapacity& capacity() const { return capacity_; }

 private:
  Backend& backend_;
  BatchCapacity capacity_;
  size_t bytes_ = 0;
  DeviceBuffer host_;    // PINNED
  DeviceBuffer memory_;  // DEVICE
  BatchView view_;       // into host_
  DeviceBatch device_;
  std::unique_ptr<Event> uploaded_;  // recorded after the last upload from host_
  bool in_flight_ = false;
};

}  // namespace bertperf
