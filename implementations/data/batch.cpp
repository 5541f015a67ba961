// Random batches for the step benchmark and the tests (batch.h).
#include "data/batch.h"

#include <algorithm>
#include <random>

#include "core/errors.h"

namespace bertperf {

Batch random_batch(BatchCapacity capacity, const std::vector<std::vector<SequenceShape>>& rows, int vocab,
                   uint32_t seed) {
  BERT_CHECK(vocab > 5, "random_batch draws token ids from [5, vocab), vocab ", vocab);
  std::mt19937 rng(seed);
  Batch b;
  b.capacity = capacity;
  for (const auto& row : rows) {
    for (const SequenceShape& q : row) {
      BERT_CHECK(q.length > 1 && q.predictions >= 0 && q.predictions < q.length && q.length <= capacity.max_seqlen,
                 "random_batch: a sequence of ", q.length, " tokens with ", q.predictions, " predictions");
      const int first = b.tokens;
      b.cu_seqlens.push_back(first);
      for (int t = 0; t < q.length; ++t) {
        b.input_ids.push_back(5 + int(rng() % (vocab - 5)));
        b.segment_ids.push_back(t >= q.length / 2);
        b.position_ids.push_back(t);
      }
      std::vector<int> slots(q.length - 1);
      for (int t = 0; t < q.length - 1; ++t) slots[t] = first + t + 1;
      std::shuffle(slots.begin(), slots.end(), rng);
      slots.resize(q.predictions);
      std::sort(slots.begin(), slots.end());
      for (int at : slots) {
        b.mlm_positions.push_back(at);
        b.mlm_labels.push_back(5 + int(rng() % (vocab - 5)));
        b.mlm_weights.push_back(1.0f);
      }
      b.nsp_labels.push_back(int(rng() % 2));
      b.tokens += q.length;
      b.sequences += 1;
    }
  }
  BERT_CHECK(b.tokens <= capacity.tokens && b.sequences <= capacity.sequences &&
                 int(b.mlm_positions.size()) <= capacity.predictions,
             "random_batch: the sequences do not fit the capacity");
  fill_to_capacity(b);
  return b;
}

}  // namespace bertperf
