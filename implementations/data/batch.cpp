// Batches built sequence by sequence, and random ones (batch.h).
#include "data/batch.h"

#include <algorithm>
#include <random>

#include "core/errors.h"

namespace bertperf {

void append_sequence(Batch& b, const std::vector<int32_t>& ids, const std::vector<int32_t>& positions,
                     const std::vector<int32_t>& labels, int32_t nsp_label) {
  const int length = static_cast<int>(ids.size()), first = b.tokens;
  BERT_CHECK(length > 0 && length <= b.capacity.max_seqlen && first + length <= b.capacity.tokens &&
                 b.sequences < b.capacity.sequences &&
                 b.mlm_positions.size() + positions.size() <= static_cast<size_t>(b.capacity.predictions) &&
                 positions.size() == labels.size(),
             "append_sequence: a sequence of ", length, " tokens and ", positions.size(),
             " predictions does not fit the batch's capacity");
  b.cu_seqlens.push_back(first);
  for (int t = 0; t < length; ++t) {
    b.input_ids.push_back(ids[t]);
    b.segment_ids.push_back(t >= length / 2);
    b.position_ids.push_back(t);
  }
  for (size_t p = 0; p < positions.size(); ++p) {
    BERT_CHECK(positions[p] >= 0 && positions[p] < length, "append_sequence: prediction at ", positions[p],
               " outside a sequence of ", length);
    b.mlm_positions.push_back(first + positions[p]);
    b.mlm_labels.push_back(labels[p]);
    b.mlm_weights.push_back(1.0f);
  }
  b.nsp_labels.push_back(nsp_label);
  b.tokens += length;
  b.sequences += 1;
}

Batch random_batch(BatchCapacity capacity, const std::vector<std::vector<SequenceShape>>& rows, int vocab,
                   uint32_t seed) {
  BERT_CHECK(vocab > 5, "random_batch draws token ids from [5, vocab), vocab ", vocab);
  std::mt19937 rng(seed);
  Batch b;
  b.capacity = capacity;
  for (const auto& row : rows) {
    for (const SequenceShape& q : row) {
      BERT_CHECK(q.length > 1 && q.predictions >= 0 && q.predictions < q.length,
                 "random_batch: a sequence of ", q.length, " tokens with ", q.predictions, " predictions");
      std::vector<int32_t> ids(q.length), slots(q.length - 1), labels;
      for (int32_t& id : ids) id = 5 + int(rng() % (vocab - 5));
      for (int t = 0; t < q.length - 1; ++t) slots[t] = t + 1;
      std::shuffle(slots.begin(), slots.end(), rng);
      slots.resize(q.predictions);
      std::sort(slots.begin(), slots.end());
      for (size_t p = 0; p < slots.size(); ++p) labels.push_back(5 + int(rng() % (vocab - 5)));
      append_sequence(b, ids, slots, labels, int(rng() % 2));
    }
  }
  fill_to_capacity(b);
  return b;
}

}  // namespace bertperf
