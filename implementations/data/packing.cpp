// Greedy first-fit packing (packing.h).
#include "data/packing.h"

#include <algorithm>
#include <deque>

namespace bertperf {

void pack_sequences(const std::vector<uint32_t>& tokens, const std::vector<uint32_t>& predictions, int seq_len,
                    const PackingLimits& limits, PackedRows& out) {
  constexpr size_t kWindow = 64;
  struct Open {
    uint32_t row;
    uint32_t sequences, tokens, predictions;
  };
  // Rows are emitted in the order they were opened, but filled while open: members are collected per open row and
  // laid out at the end.
  std::vector<std::vector<uint32_t>> rows;
  std::deque<Open> open;
  const auto max_sequences = static_cast<uint32_t>(limits.max_sequences);
  for (uint32_t i = 0; i < tokens.size(); ++i) {
    const uint32_t len = tokens[i], preds = predictions[i];
    auto fits = [&](const Open& r) {
      return r.sequences < max_sequences && r.tokens + len <= static_cast<uint32_t>(seq_len) &&
             r.predictions + preds <= static_cast<uint32_t>(limits.max_predictions);
    };
    auto it = std::find_if(open.begin(), open.end(), fits);
    if (it == open.end()) {
      rows.emplace_back();
      open.push_back({static_cast<uint32_t>(rows.size() - 1), 0, 0, 0});
      if (open.size() > kWindow) open.pop_front();
      it = open.end() - 1;
    }
    rows[it->row].push_back(i);
    it->sequences += 1;
    it->tokens += len;
    it->predictions += preds;
    if (it->sequences == max_sequences) open.erase(it);
  }
  out.members.clear();
  out.row_starts.assign(1, 0);
  for (const auto& row : rows) {
    out.members.insert(out.members.end(), row.begin(), row.end());
    out.row_starts.push_back(static_cast<uint32_t>(out.members.size()));
  }
}

}  // namespace bertperf
