// What the reducer probes (dist_probe.cpp over MPI, nccl_probe.cpp over NCCL) feed a reducer and check it against:
// a non-integral value per (rank, element), the fp64 sum over ranks as the oracle, and the order in which a backward
// reports its ranges ready. A wrong element throws InternalError, which ends the probe's job non-zero.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/reducer.h"
#include "core/errors.h"

namespace bertperf::testing {

// Rank `rank`'s gradient at element i: non-integral, so sums round.
inline float reducer_value(int rank, size_t i) {
  const uint32_t h = static_cast<uint32_t>(i * 2654435761u) ^ static_cast<uint32_t>((rank + 1) * 40503u * 97u);
  return (static_cast<float>(h % 20001u) - 10000.0f) / 997.0f * static_cast<float>(1 + i % 7);
}

inline std::vector<float> reducer_values(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = reducer_value(rank, i);
  return v;
}

// got[range] within fp32 rounding of the fp64 sum over ranks.
inline void expect_near_sum(const std::vector<float>& got, int ranks, FlatRange range, const std::string& what) {
  for (size_t i = range.begin; i < range.end; ++i) {
    double sum = 0, magnitude = 0;
    for (int r = 0; r < ranks; ++r) {
      sum += reducer_value(r, i);
      magnitude += std::fabs(reducer_value(r, i));
    }
    if (std::fabs(got[i] - sum) > ranks * 1.2e-7 * magnitude + 1e-30)
      throw InternalError(cat(what, ": element ", i, " is ", got[i], ", the sum is ", sum));
  }
}

inline void expect_equal(const std::vector<float>& got, const std::vector<float>& want, FlatRange range,
                         const std::string& what) {
  for (size_t i = range.begin; i < range.end; ++i)
    if (got[i] != want[i])
      throw InternalError(cat(what, ": element ", i, " is ", got[i], ", all-reduce gave ", want[i]));
}

// What the backward does: ranges reported ready from the end of the buffer to its start, of uneven sizes, leaving a
// hole that only finish() sends.
inline void announce(GradReducer& reducer, void* grads, size_t n) {
  const size_t hole_begin = n / 3, hole_end = n / 3 + 1000;
  auto report = [&](size_t begin, size_t end) {
    if (begin < end) reducer.ready(grads, begin, end);
  };
  for (size_t end = n, step = 1; end > 0; ++step) {
    const size_t size = 7919 * step % 20000 + 1, begin = end > size ? end - size : 0;
    report(begin, std::min(end, hole_begin));
    report(std::max(begin, hole_end), end);
    end = begin;
  }
}

// Chunk starts every 32768 elements: where a sharded reducer may cut.
inline std::vector<int64_t> reducer_cuts(size_t n) {
  std::vector<int64_t> cuts;
  for (size_t c = 0; c < n; c += 32768) cuts.push_back(static_cast<int64_t>(c));
  return cuts;
}

}  // namespace bertperf::testing
