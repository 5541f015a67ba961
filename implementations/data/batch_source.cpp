// The sources every batch comes from (batch_source.h).
#include "data/batch_source.h"

#include <algorithm>
#include <random>

#include "core/errors.h"

namespace bertperf {

bool BatchSource::next(Batch& batch) {
  BatchView view = view_of(batch, shape().capacity);
  const bool got = next(view);
  sizes_from(batch, view);
  return got;
}

SyntheticSource::SyntheticSource(BatchShape shape, std::vector<Packing> packings, int vocab, uint32_t seed,
                                 bool repeat)
    : shape_(shape), packings_(std::move(packings)), vocab_(vocab), seed_(seed), repeat_(repeat) {
  BERT_CHECK(vocab > 5, "a synthetic source draws token ids from [5, vocab), vocab ", vocab);
  BERT_CHECK(!packings_.empty(), "a synthetic source needs a packing");
  for (const Packing& packing : packings_)
    for (const auto& row : packing)
      for (const SequenceShape& q : row)
        BERT_CHECK(q.length > 1 && q.predictions >= 0 && q.predictions < q.length, "a synthetic sequence of ",
                   q.length, " tokens with ", q.predictions, " predictions");
}

int64_t SyntheticSource::samples() const {
  int64_t n = 0;
  for (const Packing& packing : packings_)
    for (const auto& row : packing) n += static_cast<int64_t>(row.size());
  return n;
}

bool SyntheticSource::next(BatchView& out) {
  if (next_ == packings_.size()) {
    if (!repeat_) return false;
    next_ = 0;
  }
  const size_t k = next_++;
  std::mt19937 rng(seed_ + static_cast<uint32_t>(k));
  BatchWriter writer(out, false, 0);
  std::vector<int32_t> slots;
  for (const auto& row : packings_[k]) {
    for (const SequenceShape& q : row) {
      const BatchWriter::Sequence s = writer.add_sequence(q.length, q.predictions);
      for (int t = 0; t < q.length; ++t) s.input_ids[t] = 5 + int(rng() % (vocab_ - 5));
      for (int t = 0; t < q.length; ++t) s.segment_ids[t] = t >= q.length / 2;
      slots.resize(static_cast<size_t>(q.length - 1));
      for (int t = 0; t < q.length - 1; ++t) slots[t] = t + 1;
      std::shuffle(slots.begin(), slots.end(), rng);
      slots.resize(static_cast<size_t>(q.predictions));
      std::sort(slots.begin(), slots.end());
      for (int p = 0; p < q.predictions; ++p) s.mlm_positions[p] = s.first_token + slots[p];
      for (int p = 0; p < q.predictions; ++p) s.mlm_labels[p] = 5 + int(rng() % (vocab_ - 5));
      *s.nsp_label = int(rng() % 2);
    }
    writer.end_row();
  }
  writer.finish();
  return true;
}

CachedSource::CachedSource(BatchSource& source, bool repeat) : shape_(source.shape()), repeat_(repeat) {
  for (Batch b; source.next(b);) {
    samples_ += b.sequences;
    batches_.push_back(std::move(b));
  }
}

CachedSource::CachedSource(BatchShape shape, std::vector<Batch> batches, bool repeat)
    : shape_(shape), batches_(std::move(batches)), repeat_(repeat) {
  for (const Batch& b : batches_) {
    BERT_CHECK(b.capacity.tokens == shape.capacity.tokens && b.capacity.sequences == shape.capacity.sequences &&
                   b.capacity.predictions == shape.capacity.predictions,
               "a cached batch of another capacity");
    samples_ += b.sequences;
  }
}

bool CachedSource::next(BatchView& out) {
  if (next_ == batches_.size() && repeat_ && !batches_.empty()) next_ = 0;
  if (next_ == batches_.size()) return false;
  copy_into(batches_[next_++], out);
  return true;
}

}  // namespace bertperf
