// The host-side arithmetic of the transports and the reduction policy (transport.h): parts of a flat buffer and the
// groups of a hierarchy, as pure functions.
#include "comm/transport.h"

#include <algorithm>

#include "core/errors.h"

namespace bertperf {

std::vector<FlatRange> split_flat(size_t elements, const std::vector<int64_t>& cuts, int ranks) {
  BERT_CHECK(ranks > 0, "splitting a flat buffer among ", ranks, " ranks");
  std::vector<FlatRange> parts(ranks);
  size_t begin = 0;
  for (int r = 0; r < ranks; ++r) {
    size_t end = elements;
    if (r + 1 < ranks) {
      // The cut nearest the ideal end of this part, never before its begin.
      const size_t ideal = elements / ranks * (r + 1) + std::min<size_t>(r + 1, elements % ranks);
      end = begin;
      for (int64_t c : cuts) {
        const size_t cut = static_cast<size_t>(c);
        if (cut < begin || cut > elements) continue;
        if (end == begin || (cut > ideal ? cut - ideal : ideal - cut) < (end > ideal ? end - ideal : ideal - end))
          end = cut;
      }
    }
    parts[r] = {begin, end};
    begin = end;
  }
  return parts;
}

EvenSplit even_split(size_t elements, int ranks) {
  BERT_CHECK(ranks > 0, "splitting a flat buffer among ", ranks, " ranks");
  const size_t part = elements / static_cast<size_t>(ranks);
  EvenSplit split;
  for (int r = 0; r < ranks; ++r) split.parts.push_back({r * part, (r + 1) * part});
  split.tail = {ranks * part, elements};
  return split;
}

size_t equal_part_count(const std::vector<FlatRange>& parts) {
  if (parts.empty()) return 0;
  const size_t count = parts[0].size();
  for (size_t r = 0; r < parts.size(); ++r)
    if (parts[r].begin != r * count || parts[r].end != (r + 1) * count) return 0;
  return count;
}

GroupSplit group_split(Group group, int rank, int node, int local_rank) {
  switch (group) {
    case Group::WORLD: return {0, rank};
    case Group::NODE: return {node, local_rank};
    case Group::CROSS: return {local_rank, node};
  }
  throw InternalError("unknown group");
}

void check_uniform_nodes(int fewest_local, int most_local) {
  if (fewest_local != most_local)
    throw_input("distributed: reduction",
                cat("hierarchical reduction needs as many ranks on every node, but nodes have from ", fewest_local,
                    " to ", most_local, "; use \"allreduce\" or \"bucketed\""));
}

}  // namespace bertperf
