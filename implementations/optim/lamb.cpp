// LAMB over flat buffers through backend ops (lamb.h).
#include "optim/lamb.h"

#include <algorithm>
#include <cmath>

#include "core/errors.h"
#include "optim/lr_schedule.h"

namespace bertperf {

std::vector<int64_t> FlatChunks::starts(const TensorTable& table) {
  std::vector<int64_t> begins;
  for (size_t t = 0; t < table.size(); ++t)
    for (size_t b = 0; b < table[t].numel; b += kChunkElements) begins.push_back(static_cast<int64_t>(table[t].offset + b));
  return begins;
}

FlatChunks::FlatChunks(Backend& backend, const TensorTable& table, size_t part_begin, size_t part_end) {
  std::vector<int32_t> tensor;
  std::vector<int64_t> end;
  const auto base_offset = static_cast<int64_t>(part_begin);
  for (size_t t = 0; t < table.size(); ++t)
    for (size_t b = 0; b < table[t].numel; b += kChunkElements) {
      const size_t at = table[t].offset + b, stop = table[t].offset + std::min(b + kChunkElements, table[t].numel);
      BERT_CHECK((at >= part_begin || stop <= part_begin) && (at >= part_end || stop <= part_end),
                 "a part [", part_begin, ", ", part_end, ") of the flat buffer cuts the chunk [", at, ", ", stop, ")");
      if (at < part_begin || at >= part_end) continue;
      tensor.push_back(static_cast<int32_t>(t));
      begin_.push_back(static_cast<int64_t>(at) - base_offset);
      end.push_back(static_cast<int64_t>(stop) - base_offset);
    }
  count_ = static_cast<int>(tensor.size());
  const size_t n = tensor.size();
  const size_t tensor_bytes = align_up(n * sizeof(int32_t)), range_bytes = align_up(n * sizeof(int64_t));
  memory_ = DeviceBuffer(backend, std::max<size_t>(1, tensor_bytes + 2 * range_bytes));
  auto* base = static_cast<unsigned char*>(memory_.data());
  backend.upload(base, tensor.data(), n * sizeof(int32_t));
  backend.upload(base + tensor_bytes, begin_.data(), n * sizeof(int64_t));
  backend.upload(base + tensor_bytes + range_bytes, end.data(), n * sizeof(int64_t));
  backend.synchronize();  // the host vectors go away
  tensor_ = reinterpret_cast<const int32_t*>(base);
  begin_device_ = reinterpret_cast<const int64_t*>(base + tensor_bytes);
  end_device_ = reinterpret_cast<const int64_t*>(base + tensor_bytes + range_bytes);
}

ops::Chunks FlatChunks::range(int first, int count) const {
  BERT_CHECK(first >= 0 && count >= 0 && first + count <= count_, "chunk range ", first, "+", count, " outside ",
             count_, " chunks");
  return {tensor_, begin_device_, end_device_, first, count};
}

Lamb::Lamb(Backend& backend, const TensorTable& table, const LambHyperparams& hp, size_t part_begin,
           size_t part_end)
    : backend_(backend),
      hp_(hp),
      tensors_(table.size()),
      total_(table.total_elements()),
      part_begin_(std::min(part_begin, total_)),
      part_end_(std::min(part_end, total_)),
      chunks_(backend, table),
      part_chunks_(backend, table, part_begin_, part_end_) {
  BERT_CHECK(part_begin_ <= part_end_, "LAMB part [", part_begin, ", ", part_end, ") is empty or reversed");
  BERT_CHECK(hp.beta1 >= 0 && hp.beta1 < 1 && hp.beta2 >= 0 && hp.beta2 < 1, "LAMB betas must be in [0, 1), got ",
             hp.beta1, " and ", hp.beta2);
  BERT_CHECK(hp.epsilon > 0, "LAMB epsilon must be positive, got ", hp.epsilon);
  BERT_CHECK(hp.max_grad_norm > 0, "max_grad_norm must be positive, got ", hp.max_grad_norm);
  // A part's moments are indexed from the part's start (its chunks' offsets are); at least one element each.
  const size_t bytes = std::max<size_t>(1, part_end_ - part_begin_) * dtype_size(backend.master_dtype());
  m_ = DeviceBuffer(backend, bytes);
  v_ = DeviceBuffer(backend, bytes);
  norms_ = DeviceBuffer(backend, 2 * tensors_ * sizeof(double));
  excluded_ = DeviceBuffer(backend, tensors_);
  std::vector<uint8_t> excluded(tensors_);
  for (size_t t = 0; t < tensors_; ++t) excluded[t] = table[t].lamb_excluded;
  backend.upload(excluded_.data(), excluded.data(), tensors_);
  backend.synchronize();
}

void Lamb::fill_scalars(ops::StepScalars& s, int64_t updates_done) const {
  const kmath::StepScheduleValues v = kmath::step_schedule_at(step_schedule(hp_), updates_done);
  s.learning_rate = static_cast<float>(v.learning_rate);
  s.inv_bias_correction1 = static_cast<float>(v.inv_bias_correction1);
  s.inv_bias_correction2 = static_cast<float>(v.inv_bias_correction2);
  s.max_grad_norm = static_cast<float>(hp_.max_grad_norm);
  s.updates = updates_done;
}

void Lamb::schedule(ops::StepScalars* scalars, uint32_t dropout_stride, uint32_t dropout_offset) {
  backend_.schedule_step({scalars, step_schedule(hp_), dropout_stride, dropout_offset});
}

void Lamb::moments(const void* master, const void* grads, const float* grad_scale, const ops::StepScalars* scalars,
                   ops::Chunks chunks) {
  backend_.fill_zero(norms_.data(), norms_.bytes());
  // 1 - beta formed in double, as the reference does with its Python-float betas.
  backend_.lamb_moments({.m = m_.data(), .v = v_.data(), .norms = norms(), .grads = grads, .master = master,
                         .excluded = excluded_.as<uint8_t>(), .grad_scale = grad_scale, .scalars = scalars,
                         .chunks = chunks, .beta1 = static_cast<float>(hp_.beta1),
                         .beta2 = static_cast<float>(hp_.beta2), .epsilon = static_cast<float>(hp_.epsilon),
                         .weight_decay = static_cast<float>(hp_.weight_decay),
                         .one_minus_beta1 = static_cast<float>(1.0 - hp_.beta1),
                         .one_minus_beta2 = static_cast<float>(1.0 - hp_.beta2)});
}

void Lamb::apply(void* master, void* weights, const ops::StepScalars* scalars, ops::Chunks chunks) {
  backend_.lamb_apply({.master = master, .weights = weights, .m = m_.data(), .v = v_.data(), .norms = norms(),
                       .excluded = excluded_.as<uint8_t>(), .scalars = scalars, .chunks = chunks,
                       .epsilon = static_cast<float>(hp_.epsilon),
                       .weight_decay = static_cast<float>(hp_.weight_decay)});
}

}  // namespace bertperf
