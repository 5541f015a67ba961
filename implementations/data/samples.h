// Pretraining sequences in memory, stored flat (one allocation per field, not one per sequence),
// shared by the generator (create_pretraining_data), the HDF5 writers and the reader.
// A sequence is "[CLS] A [SEP] B [SEP]" with its segment ids, its masked-LM predictions (positions
// within the sequence, ascending, with the original token ids) and its next-sentence label.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace bertperf {

struct SequenceStore {
  std::vector<int32_t> input_ids;     // all sequences' tokens, concatenated
  std::vector<int8_t> segment_ids;    // parallel to input_ids
  std::vector<size_t> token_offsets{0};
  std::vector<int32_t> mlm_positions;  // within its own sequence
  std::vector<int32_t> mlm_ids;
  std::vector<size_t> mlm_offsets{0};
  std::vector<int8_t> nsp_labels;      // 1 = B is a random next sentence

  size_t size() const { return nsp_labels.size(); }
  size_t length(size_t i) const { return token_offsets[i + 1] - token_offsets[i]; }
  size_t predictions(size_t i) const { return mlm_offsets[i + 1] - mlm_offsets[i]; }
  std::span<const int32_t> tokens(size_t i) const { return {input_ids.data() + token_offsets[i], length(i)}; }
  std::span<const int8_t> segments(size_t i) const { return {segment_ids.data() + token_offsets[i], length(i)}; }
  std::span<const int32_t> positions(size_t i) const { return {mlm_positions.data() + mlm_offsets[i], predictions(i)}; }
  std::span<const int32_t> labels(size_t i) const { return {mlm_ids.data() + mlm_offsets[i], predictions(i)}; }

  // Appends sequence i of `other`.
  void append_from(const SequenceStore& other, size_t i);
  // The sequences in the order `order` names (a permutation or a selection, repeats allowed).
  SequenceStore select(const std::vector<size_t>& order) const;
};

}  // namespace bertperf
