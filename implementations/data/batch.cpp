// A batch's view and the writer every source lays batches out with (batch.h).
#include "data/batch.h"

#include <algorithm>

#include "core/errors.h"

namespace bertperf {

BatchView view_of(Batch& b, const BatchCapacity& c) {
  b.capacity = c;
  b.input_ids.resize(c.tokens);
  b.segment_ids.resize(c.tokens);
  b.position_ids.resize(c.tokens);
  b.cu_seqlens.resize(c.sequences + 1);
  b.nsp_labels.resize(c.sequences);
  b.mlm_positions.resize(c.predictions);
  b.mlm_labels.resize(c.predictions);
  b.mlm_weights.resize(c.predictions);
  BatchView v;
  v.capacity = c;
  v.input_ids = b.input_ids.data();
  v.segment_ids = b.segment_ids.data();
  v.position_ids = b.position_ids.data();
  v.cu_seqlens = b.cu_seqlens.data();
  v.nsp_labels = b.nsp_labels.data();
  v.mlm_positions = b.mlm_positions.data();
  v.mlm_labels = b.mlm_labels.data();
  v.mlm_weights = b.mlm_weights.data();
  return v;
}

void sizes_from(Batch& b, const BatchView& v) {
  b.tokens = v.tokens;
  b.sequences = v.sequences;
  b.predictions = v.predictions;
}

void copy_into(const Batch& b, BatchView& v) {
  const BatchCapacity& c = v.capacity;
  BERT_CHECK(b.capacity.tokens == c.tokens && b.capacity.sequences == c.sequences &&
                 b.capacity.predictions == c.predictions && b.capacity.max_seqlen == c.max_seqlen,
             "batch capacity ", b.capacity.tokens, "/", b.capacity.sequences, "/", b.capacity.predictions,
             " differs from the view's ", c.tokens, "/", c.sequences, "/", c.predictions);
  const size_t T = c.tokens, Q = c.sequences, M = c.predictions;
  BERT_CHECK(b.input_ids.size() == T && b.segment_ids.size() == T && b.position_ids.size() == T &&
                 b.cu_seqlens.size() == Q + 1 && b.nsp_labels.size() == Q && b.mlm_positions.size() == M &&
                 b.mlm_labels.size() == M && b.mlm_weights.size() == M,
             "batch arrays do not have their capacity's sizes");
  std::copy(b.input_ids.begin(), b.input_ids.end(), v.input_ids);
  std::copy(b.segment_ids.begin(), b.segment_ids.end(), v.segment_ids);
  std::copy(b.position_ids.begin(), b.position_ids.end(), v.position_ids);
  std::copy(b.cu_seqlens.begin(), b.cu_seqlens.end(), v.cu_seqlens);
  std::copy(b.nsp_labels.begin(), b.nsp_labels.end(), v.nsp_labels);
  std::copy(b.mlm_positions.begin(), b.mlm_positions.end(), v.mlm_positions);
  std::copy(b.mlm_labels.begin(), b.mlm_labels.end(), v.mlm_labels);
  std::copy(b.mlm_weights.begin(), b.mlm_weights.end(), v.mlm_weights);
  v.tokens = b.tokens;
  v.sequences = b.sequences;
  v.predictions = b.predictions;
}

BatchWriter::BatchWriter(BatchView& view, bool pad_predictions, int row_slots)
    : v_(view), pad_(pad_predictions), row_slots_(row_slots) {
  v_.tokens = v_.sequences = v_.predictions = 0;
  v_.cu_seqlens[0] = 0;
}

BatchWriter::Sequence BatchWriter::add_sequence(int length, int predictions) {
  const BatchCapacity& c = v_.capacity;
  const int t = v_.tokens, m = v_.predictions;
  BERT_CHECK(length > 0 && v_.sequences < c.sequences && t + length <= c.tokens && m + predictions <= c.predictions,
             "batch over its capacity: a sequence of ", length, " tokens and ", predictions, " predictions");
  for (int j = 0; j < length; ++j) v_.position_ids[t + j] = j;
  for (int j = 0; j < predictions; ++j) v_.mlm_weights[m + j] = 1.0f;
  const Sequence out{v_.input_ids + t, v_.segment_ids + t, v_.mlm_positions + m, v_.mlm_labels + m,
                     v_.nsp_labels + v_.sequences, t};
  v_.tokens += length;
  v_.predictions += predictions;
  v_.cu_seqlens[++v_.sequences] = v_.tokens;
  return out;
}

void BatchWriter::end_row() {
  // Empty slots point at the row's first token with label 0 and weight 0, as in the reference.
  if (pad_) {
    const int end = row_first_slot_ + row_slots_;
    BERT_CHECK(end <= v_.capacity.predictions, "batch over its capacity: the row's empty slots");
    for (int& m = v_.predictions; m < end; ++m) {
      v_.mlm_positions[m] = row_start_;
      v_.mlm_labels[m] = 0;
      v_.mlm_weights[m] = 0.0f;
    }
  }
  row_first_slot_ = v_.predictions;
  last_row_start_ = row_start_;
  row_start_ = v_.tokens;
}

void BatchWriter::finish() {
  const BatchCapacity& c = v_.capacity;
  const int t = v_.tokens, s = v_.sequences;
  int m = v_.predictions;
  if (m == 0) {  // at least one slot per batch: the last row's first token, weight 0
    v_.mlm_positions[0] = last_row_start_;
    v_.mlm_labels[0] = 0;
    v_.mlm_weights[0] = 0.0f;
    m = v_.predictions = 1;
  }
  std::fill(v_.input_ids + t, v_.input_ids + c.tokens, 0);
  std::fill(v_.segment_ids + t, v_.segment_ids + c.tokens, 0);
  std::fill(v_.position_ids + t, v_.position_ids + c.tokens, 0);
  std::fill(v_.cu_seqlens + s + 1, v_.cu_seqlens + c.sequences + 1, t);
  std::fill(v_.nsp_labels + s, v_.nsp_labels + c.sequences, 0);
  std::fill(v_.mlm_positions + m, v_.mlm_positions + c.predictions, 0);
  std::fill(v_.mlm_labels + m, v_.mlm_labels + c.predictions, 0);
  std::fill(v_.mlm_weights + m, v_.mlm_weights + c.predictions, 0.0f);
}

}  // namespace bertperf
