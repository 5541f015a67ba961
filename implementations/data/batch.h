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

// A batch's arrays in memory the caller owns (a Batch's vectors, or a pinned block, model/batch_stage.h), at their
// capacities, with the batch's real sizes: what a BatchSource (data/batch_source.h) fills.
struct BatchView {
  BatchCapacity capacity;
  int tokens = 0, sequences = 0, predictions = 0;
  int32_t* input_ids = nullptr;      // (capacity.tokens)
  int32_t* segment_ids = nullptr;
  int32_t* position_ids = nullptr;
  int32_t* cu_seqlens = nullptr;     // (capacity.sequences + 1)
  int32_t* nsp_labels = nullptr;     // (capacity.sequences)
  int32_t* mlm_positions = nullptr;  // (capacity.predictions)
  int32_t* mlm_labels = nullptr;
  float* mlm_weights = nullptr;
};

// A Batch's arrays sized to `capacity` (filler) and their view; after a source has filled the view, take its sizes
// back with `sizes_from`.
BatchView view_of(Batch& b, const BatchCapacity& capacity);
void sizes_from(Batch& b, const BatchView& v);
// A Batch copied into a view of its capacity.
void copy_into(const Batch& b, BatchView& v);

// Writes a batch into a view row by row, as every source lays one out (data/reader.h): a row's sequences end to end,
// each with its position ids, its masked-LM slots (weight 1) and its next-sentence label; with `pad_predictions`,
// each row's slots are followed by empty ones (weight 0, label 0, at the row's first token) up to `row_slots`;
// finish() writes the filler past the content (and one empty slot where the batch has none) and the real sizes.
// Whatever the view held before is overwritten. A sequence over the capacity is an InternalError: the sources keep
// every row within its share of the capacity.
class BatchWriter {
 public:
  BatchWriter(BatchView& view, bool pad_predictions, int row_slots);
  // Where a sequence of `length` tokens and `predictions` masked-LM slots goes: the caller writes its token and
  // segment ids, its slots' positions (within the batch: first_token + position in the sequence) and labels, and its
  // next-sentence label.
  struct Sequence {
    int32_t* input_ids;
    int32_t* segment_ids;
    int32_t* mlm_positions;
    int32_t* mlm_labels;
    int32_t* nsp_label;
    int first_token;
  };
  Sequence add_sequence(int length, int predictions);
  void end_row();
  void finish();

 private:
  BatchView& v_;
  bool pad_;
  int row_slots_, row_start_ = 0, row_first_slot_ = 0, last_row_start_ = 0;
};

}  // namespace bertperf
