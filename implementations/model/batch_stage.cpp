// Staging a batch into backend memory (batch_stage.h).
#include "model/batch_stage.h"

#include "core/buffer.h"
#include "core/errors.h"

namespace bertperf {

namespace {

// The block's layout: every array at an aligned offset, in this order.
struct Layout {
  size_t input_ids, segment_ids, position_ids, cu_seqlens, cls_positions, nsp_labels, nsp_loss_weight,
      nsp_count_weight, mlm_positions, mlm_labels, mlm_loss_weight, mlm_count_weight, bytes;

  explicit Layout(const BatchCapacity& c) {
    size_t at = 0;
    auto take = [&at](size_t count) {
      const size_t here = at;
      at = align_up(at + count * 4);  // every element here is 4 bytes
      return here;
    };
    const size_t T = c.tokens, Q = c.sequences, M = c.predictions;
    input_ids = take(T);
    segment_ids = take(T);
    position_ids = take(T);
    cu_seqlens = take(Q + 1);
    cls_positions = take(Q);
    nsp_labels = take(Q);
    nsp_loss_weight = take(Q);
    nsp_count_weight = take(Q);
    mlm_positions = take(M);
    mlm_labels = take(M);
    mlm_loss_weight = take(M);
    mlm_count_weight = take(M);
    bytes = at;
  }
};

template <typename T>
T* at(const DeviceBuffer& block, size_t offset) {
  return reinterpret_cast<T*>(static_cast<unsigned char*>(block.data()) + offset);
}

}  // namespace

BatchStage::BatchStage(Backend& backend, BatchCapacity capacity) : backend_(backend), capacity_(capacity) {
  BERT_CHECK(capacity.tokens > 0 && capacity.sequences > 0 && capacity.predictions > 0 && capacity.max_seqlen > 0,
             "a batch stage needs a positive capacity");
  const Layout l(capacity);
  bytes_ = l.bytes;
  host_ = DeviceBuffer(backend, bytes_, MemoryKind::PINNED);
  memory_ = DeviceBuffer(backend, bytes_, MemoryKind::DEVICE);
  device_.input_ids = at<int32_t>(memory_, l.input_ids);
  device_.segment_ids = at<int32_t>(memory_, l.segment_ids);
  device_.position_ids = at<int32_t>(memory_, l.position_ids);
  device_.cu_seqlens = at<int32_t>(memory_, l.cu_seqlens);
  device_.cls_positions = at<int32_t>(memory_, l.cls_positions);
  device_.nsp_labels = at<int32_t>(memory_, l.nsp_labels);
  device_.nsp_loss_weight = at<float>(memory_, l.nsp_loss_weight);
  device_.nsp_count_weight = at<float>(memory_, l.nsp_count_weight);
  device_.mlm_positions = at<int32_t>(memory_, l.mlm_positions);
  device_.mlm_labels = at<int32_t>(memory_, l.mlm_labels);
  device_.mlm_loss_weight = at<float>(memory_, l.mlm_loss_weight);
  device_.mlm_count_weight = at<float>(memory_, l.mlm_count_weight);
  device_.max_seqlen = capacity.max_seqlen;
  view_.capacity = capacity;
  view_.input_ids = at<int32_t>(host_, l.input_ids);
  view_.segment_ids = at<int32_t>(host_, l.segment_ids);
  view_.position_ids = at<int32_t>(host_, l.position_ids);
  view_.cu_seqlens = at<int32_t>(host_, l.cu_seqlens);
  view_.nsp_labels = at<int32_t>(host_, l.nsp_labels);
  view_.mlm_positions = at<int32_t>(host_, l.mlm_positions);
  view_.mlm_labels = at<int32_t>(host_, l.mlm_labels);
  // The source's 0/1 weights are the count weights the model reads.
  view_.mlm_weights = at<float>(host_, l.mlm_count_weight);
  uploaded_ = backend.make_event();
}

BatchView& BatchStage::host() {
  // On an asynchronous backend the last upload from host_ may not have run yet: it must read the last batch first.
  // A synchronous backend's upload has run when it returns.
  if (in_flight_ && backend_.capabilities().asynchronous) backend_.host_wait(*uploaded_);
  in_flight_ = false;
  return view_;
}

const DeviceBatch& BatchStage::stage(const Batch& b, LossWeighting weighting) {
  copy_into(b, host());
  return upload(weighting);
}

const DeviceBatch& BatchStage::upload(LossWeighting weighting) {
  const BatchCapacity& c = capacity_;
  const BatchView& b = view_;
  const size_t Q = c.sequences, M = c.predictions;
  BERT_CHECK(b.sequences > 0 && b.sequences <= int(Q) && b.predictions > 0 && b.predictions <= int(M) &&
                 b.tokens == b.cu_seqlens[b.sequences],
             "batch of ", b.sequences, " sequences and ", b.predictions, " predictions is inconsistent");
  const Layout l(c);
  // The reference's weighting (batch_stage.h): the +1e-5 keeps an all-padding batch finite.
  double weight_sum = 0;
  for (int i = 0; i < b.predictions; ++i) weight_sum += b.mlm_weights[i];
  const bool mean = weighting == LossWeighting::MEAN;
  float* mlm_loss = at<float>(host_, l.mlm_loss_weight);
  const float* mlm_count = b.mlm_weights;
  for (size_t i = 0; i < M; ++i) {
    const double w = mlm_count[i];
    mlm_loss[i] = static_cast<float>(mean ? w / (weight_sum + 1e-5) : w);
  }
  int32_t* cls = at<int32_t>(host_, l.cls_positions);
  float* nsp_loss = at<float>(host_, l.nsp_loss_weight);
  float* nsp_count = at<float>(host_, l.nsp_count_weight);
  for (size_t s = 0; s < Q; ++s) {
    const bool real = s < size_t(b.sequences);
    cls[s] = real ? b.cu_seqlens[s] : 0;
    nsp_loss[s] = real ? (mean ? 1.0f / static_cast<float>(b.sequences) : 1.0f) : 0.0f;
    nsp_count[s] = real ? 1.0f : 0.0f;
  }
  backend_.upload(memory_.data(), host_.data(), bytes_);
  backend_.record(*uploaded_);
  in_flight_ = true;

  const bool full = backend_.capabilities().static_shapes;
  device_.tokens = full ? c.tokens : b.tokens;
  device_.sequences = full ? c.sequences : b.sequences;
  device_.predictions = full ? c.predictions : b.predictions;
  device_.real_sequences = b.sequences;
  device_.mlm_weight = weight_sum;
  return device_;
}

}  // namespace bertperf
