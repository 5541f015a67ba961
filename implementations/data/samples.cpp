// SequenceStore (samples.h).
#include "data/samples.h"

namespace bertperf {

void SequenceStore::append_from(const SequenceStore& other, size_t i) {
  const auto t = other.tokens(i);
  const auto s = other.segments(i);
  input_ids.insert(input_ids.end(), t.begin(), t.end());
  segment_ids.insert(segment_ids.end(), s.begin(), s.end());
  token_offsets.push_back(input_ids.size());
  const auto p = other.positions(i);
  const auto l = other.labels(i);
  mlm_positions.insert(mlm_positions.end(), p.begin(), p.end());
  mlm_ids.insert(mlm_ids.end(), l.begin(), l.end());
  mlm_offsets.push_back(mlm_positions.size());
  nsp_labels.push_back(other.nsp_labels[i]);
}

SequenceStore SequenceStore::select(const std::vector<size_t>& order) const {
  SequenceStore out;
  size_t tokens_total = 0, predictions_total = 0;
  for (size_t i : order) {
    tokens_total += length(i);
    predictions_total += predictions(i);
  }
  out.input_ids.reserve(tokens_total);
  out.segment_ids.reserve(tokens_total);
  out.mlm_positions.reserve(predictions_total);
  out.mlm_ids.reserve(predictions_total);
  out.token_offsets.reserve(order.size() + 1);
  out.mlm_offsets.reserve(order.size() + 1);
  out.nsp_labels.reserve(order.size());
  for (size_t i : order) out.append_from(*this, i);
  return out;
}

}  // namespace bertperf
