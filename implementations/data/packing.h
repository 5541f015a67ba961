// Packed rows: several sequences end to end in one row of at most seq_len tokens (NVIDIA's packed data, and what
// the reader makes of unpacked sequences when asked to pack, data/reader.h). The limits of a packed row are written
// here once; the reader's options, the data plan (harness/reader_plan.h) and `bertperf data --layout packed` take
// them from here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace bertperf {

struct PackingLimits {
  int max_sequences = 3;     // sequences per row: NVIDIA's packed data holds up to 3
  int max_predictions = 80;  // masked-LM slots per row: >= 0.15 x 512 + 3 halves, rounded up
};
inline constexpr PackingLimits kPackedRow{};

// Greedy first-fit packing of sequences, in the order given (their tokens and predictions): each goes into the first
// of the last 64 open rows where it fits (at most limits.max_sequences sequences, seq_len tokens and
// limits.max_predictions predictions), else opens a new row; rows come out in the order they were opened, each as
// the positions in `tokens` of its sequences, in order: row r is members[row_starts[r] .. row_starts[r + 1]).
struct PackedRows {
  std::vector<uint32_t> members;
  std::vector<uint32_t> row_starts{0};
  size_t rows() const { return row_starts.size() - 1; }
};
void pack_sequences(const std::vector<uint32_t>& tokens, const std::vector<uint32_t>& predictions, int seq_len,
                    const PackingLimits& limits, PackedRows& out);

}  // namespace bertperf
