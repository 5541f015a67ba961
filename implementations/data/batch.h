// One training or eval micro-batch as the data pipeline hands it to the trainer: the sequences' tokens compacted
// end to end (no padding between them), their boundaries as cumulative offsets, and the masked-LM and
// next-sentence targets. Fixed-length, variable-length and packed shards all become this one form, so the model
// never computes on padding.
//
// Every array has a fixed capacity for the whole run (the reader's batch_rows rows of seq_len tokens), so a batch
// always has one shape: the part past the real content is filler (token 0, zero weights, empty sequences), which a
// backend with static shapes (a replayed CUDA graph) computes on harmlessly and the CPU skips.
#pragma once

#include <cstdint>
#include <vector>

namespace bertperf {

// The fixed sizes of every batch of a run.
struct BatchCapacity {
  int tokens = 0;       // rows x seq_len
  int sequences = 0;    // rows, or rows x max_sequences_per_row when packed
  int predictions = 0;  // masked-LM slots
  int max_seqlen = 0;   // seq_len: the longest sequence
};

struct Batch {
  BatchCapacity capacity;
  int tokens = 0;       // real tokens: cu_seqlens[sequences]
  int sequences = 0;    // real sequences
  int predictions = 0;  // masked-LM slots in use (real predictions, plus weight-0 slots when the reader pads them)
  // Per token, (capacity.tokens); filler 0.
  std::vector<int32_t> input_ids;
  std::vector<int32_t> segment_ids;
  std::vector<int32_t> position_ids;   // 0, 1, ... within each sequence
  // (capacity.sequences + 1): sequence s owns tokens [cu_seqlens[s], cu_seqlens[s+1]); its [CLS] is token
  // cu_seqlens[s]. Entries past `sequences` repeat `tokens`.
  std::vector<int32_t> cu_seqlens;
  // Next-sentence labels, (capacity.sequences): 0 = IsNext, 1 = random next; filler 0.
  std::vector<int32_t> nsp_labels;
  // Masked-LM targets, (capacity.predictions): token index, original token id, and weight (1 for a real
  // prediction, 0 for an empty slot or filler, which points at token 0 with label 0).
  std::vector<int32_t> mlm_positions;
  std::vector<int32_t> mlm_labels;
  std::vector<float> mlm_weights;
};

// Pads a batch built sequence by sequence up to its capacities with the filler above; `predictions` becomes the
// slots written so far.
inline void fill_to_capacity(Batch& b) {
  b.predictions = int(b.mlm_positions.size());
  b.input_ids.resize(b.capacity.tokens, 0);
  b.segment_ids.resize(b.capacity.tokens, 0);
  b.position_ids.resize(b.capacity.tokens, 0);
  b.cu_seqlens.resize(b.capacity.sequences + 1, b.tokens);
  b.nsp_labels.resize(b.capacity.sequences, 0);
  b.mlm_positions.resize(b.capacity.predictions, 0);
  b.mlm_labels.resize(b.capacity.predictions, 0);
  b.mlm_weights.resize(b.capacity.predictions, 0.0f);
}

// Building a batch sequence by sequence (the step benchmark's and the tests' batches): append_sequence adds one after
// the last, its token ids, segment B its second half, its masked-LM predictions (weight 1) at `positions` inside the
// sequence with `labels`, and its next-sentence label; fill_to_capacity (above) then pads it. The capacity must hold
// what is appended.
void append_sequence(Batch& b, const std::vector<int32_t>& ids, const std::vector<int32_t>& positions,
                     const std::vector<int32_t>& labels, int32_t nsp_label);

// A batch of random tokens in a given packing: row r holds the sequences rows[r], end to end; a sequence's
// masked-LM slots are `predictions` distinct random positions after its first token (in order), and its token ids,
// labels (from [5, vocab)) and next-sentence label are drawn from mt19937(seed). Filled to `capacity`.
struct SequenceShape {
  int length = 0;
  int predictions = 0;
};
Batch random_batch(BatchCapacity capacity, const std::vector<std::vector<SequenceShape>>& rows, int vocab,
                   uint32_t seed);

}  // namespace bertperf
