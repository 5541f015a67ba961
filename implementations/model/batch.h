// One training or eval batch as the model consumes it: the contract between the data pipeline
// (data/) and the model. Padded and packed rows use the same fields; packing only changes
// positions, seq_id and the number of sequences.
#pragma once

#include <cstdint>
#include <vector>

namespace bertperf {

struct Batch {
  int rows = 0;     // B
  int seq_len = 0;  // S
  // Per token, (B*S) each.
  std::vector<int32_t> input_ids;
  std::vector<int32_t> segment_ids;
  std::vector<int32_t> position_ids;  // 0..S-1 per row; restart per sequence in packed rows
  std::vector<int32_t> seq_id;        // 0 = padding, k >= 1 = k-th sequence of its row
  // Masked-LM targets, (M) each; M counts the prediction slots of the batch: the real ones, and
  // padding slots of weight 0 where the reader keeps the reference's fixed slot count.
  std::vector<int32_t> mlm_positions;  // flat token index b*S + position
  std::vector<int32_t> mlm_labels;     // original token ids (0 in padding slots)
  std::vector<float> mlm_weights;      // 1.0 for a real prediction, 0.0 for padding
  // Next-sentence prediction, one entry per sequence (B unpacked, more when packed).
  std::vector<int32_t> cls_positions;  // flat token index of each sequence's [CLS]
  std::vector<int32_t> nsp_labels;     // 0 = IsNext, 1 = random next

  int tokens() const { return rows * seq_len; }
  int predictions() const { return static_cast<int>(mlm_positions.size()); }
  int sequences() const { return static_cast<int>(cls_positions.size()); }
};

}  // namespace bertperf
