// A flat buffer of tensors as the optimizer ops see it, for the op tests: each tensor starts on a
// multiple of 64 elements with at least 64 elements of padding after it (which no op may read or
// write), and is cut into chunks of at most `chunk` elements.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/ops.h"

namespace bertperf {

struct FlatProblem {
  std::vector<size_t> offset, numel;
  size_t total = 0;
  std::vector<int32_t> chunk_tensor;
  std::vector<int64_t> chunk_begin, chunk_end;

  FlatProblem(const std::vector<size_t>& sizes, size_t chunk) {
    for (size_t t = 0; t < sizes.size(); ++t) {
      offset.push_back(total);
      numel.push_back(sizes[t]);
      for (size_t b = 0; b < sizes[t]; b += chunk) {
        chunk_tensor.push_back(static_cast<int32_t>(t));
        chunk_begin.push_back(static_cast<int64_t>(total + b));
        chunk_end.push_back(static_cast<int64_t>(total + std::min(b + chunk, sizes[t])));
      }
      total += (sizes[t] + 63) / 64 * 64 + 64;
    }
  }
  int chunks() const { return static_cast<int>(chunk_tensor.size()); }
  ops::Chunks range(int first, int count) const {
    return {chunk_tensor.data(), chunk_begin.data(), chunk_end.data(), first, count};
  }
  ops::Chunks all() const { return range(0, chunks()); }
  bool in_tensor(size_t i) const {
    for (size_t t = 0; t < numel.size(); ++t)
      if (i >= offset[t] && i < offset[t] + numel[t]) return true;
    return false;
  }
};

}  // namespace bertperf
