// A small MPI program for test_dist.cpp, run under `mpirun -np N`: it builds the distributed context the way
// bertperf's main does and handles failures the same way (run_job).
//   dist_probe check   every rank prints what it is and checks all-reduce, broadcast and the MPI gradient reducer
//                      against sums computed here; a wrong result throws, which ends the job non-zero
//   dist_probe fail    the last rank throws a bad-input error while the others wait in a barrier
//   dist_probe throw   the last rank throws a plain exception while the others wait in all-reduces
//   dist_probe train   every rank sums in all-reduces until killed (a test kills one of them)
//   dist_probe reducers  every reducer (all-reduce, bucketed on a thread and polled, hierarchical, sharded) against
//                      the fp64 sum of every rank's contribution (each rank computes them all) and, where the
//                      summation order is the same (two ranks), bit for bit against the plain all-reduce
// Rank 0 prints "peer failure: LINE" when its watcher hears of another rank's failure.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <iostream>
#include <memory>
#include <vector>

#include "core/errors.h"
#include "comm/context.h"
#include "comm/reducer.h"
#include "reducer_checks.h"

using namespace bertperf;
using namespace bertperf::testing;

namespace {

template <typename T>
void expect_sums(const std::vector<T>& got, int ranks, const char* what) {
  // Rank r contributed (r + 1) * i at index i: the sum is i * ranks * (ranks + 1) / 2, exact in fp32 here.
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != static_cast<T>(i) * ranks * (ranks + 1) / 2)
      throw InternalError(cat(what, ": element ", i, " is ", got[i]));
}

template <typename T>
std::vector<T> contribution(size_t n, int rank) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<T>(i) * (rank + 1);
  return v;
}

int check(DistContext& dist) {
  const int W = dist.size(), r = dist.rank();
  std::cout << "rank=" << r << " size=" << W << " local_rank=" << dist.local_rank() << " local_size="
            << dist.local_size() << " node=" << dist.node() << " nodes=" << dist.nodes() << " host=" << dist.host()
            << " mpi=" << dist.mpi() << " root=" << dist.is_root() << " launcher=" << launcher_name(dist.launch().launcher)
            << "\n";
  if (r == 0) std::cout << "describe: " << dist.describe() << "\n";
  const size_t n = 1000;
  auto f = contribution<float>(n, r);
  dist.allreduce_sum(f.data(), n);
  expect_sums(f, W, "allreduce_sum(float)");
  auto d = contribution<double>(n, r);
  dist.allreduce_sum(d.data(), n);
  expect_sums(d, W, "allreduce_sum(double)");
  uint64_t value = r == 0 ? 0x9e3779b97f4a7c15ull : static_cast<uint64_t>(r);
  dist.broadcast(value);
  if (value != 0x9e3779b97f4a7c15ull) throw InternalError(cat("broadcast gave ", value));
  dist.barrier();
  // The MPI reducer, as make_grad_reducer gives it to a CPU backend: finish in fp32 and fp64, sum in fp64.
  auto g32 = contribution<float>(n, r);
  make_mpi_reducer(nullptr, dist, DType::F32)->finish(g32.data(), n);
  expect_sums(g32, W, "reducer finish (fp32)");
  auto g64 = contribution<double>(n, r);
  const auto reducer = make_mpi_reducer(nullptr, dist, DType::F64);
  reducer->finish(g64.data(), n);
  expect_sums(g64, W, "reducer finish (fp64)");
  auto partial = contribution<double>(7, r);
  reducer->sum(partial.data(), partial.size());
  expect_sums(partial, W, "reducer sum");
  bool refused = false;
  try {
    make_mpi_reducer(nullptr, dist, DType::BF16);
  } catch (const InternalError&) {
    refused = true;
  }
  if (!refused) throw InternalError("the MPI reducer accepted bf16");
  std::cout << "rank " << r << " ok\n";
  return 0;
}

int reducers(DistContext& dist) {
  const int W = dist.size(), r = dist.rank();
  const size_t n = 250007;
  const std::vector<int64_t> cuts = reducer_cuts(n);
  const FlatRange all{0, n};

  auto plain = reducer_values(r, n);
  make_mpi_reducer(nullptr, dist, DType::F32, {}, n, cuts)->finish(plain.data(), n);
  expect_near_sum(plain, W, all, "all-reduce");

  for (bool thread : {true, false}) {
    // 0.1 MiB buckets: 10 of them.
    const ReductionOptions o{.algorithm = ReduceAlgorithm::BUCKETED, .bucket_mb = 0.1, .thread = thread};
    const auto reducer = make_mpi_reducer(nullptr, dist, DType::F32, o, n, cuts);
    if (r == 0) std::cout << "reducer: " << reducer->describe() << "\n";
    for (int step = 0; step < 2; ++step) {
      auto g = reducer_values(r, n);
      announce(*reducer, g.data(), n);
      reducer->finish(g.data(), n);
      const std::string what = cat("bucketed (", thread ? "thread" : "polled", ") step ", step);
      expect_near_sum(g, W, all, what);
      if (W == 2) expect_equal(g, plain, all, what);
    }
  }

  {
    const auto reducer = make_mpi_reducer(nullptr, dist, DType::F32, {.algorithm = ReduceAlgorithm::HIERARCHICAL}, n, cuts);
    if (r == 0) std::cout << "reducer: " << reducer->describe() << "\n";
    auto g = reducer_values(r, n);
    reducer->finish(g.data(), n);
    expect_near_sum(g, W, all, "hierarchical");
    if (W == 2) expect_equal(g, plain, all, "hierarchical");
  }

  {
    const auto reducer = make_mpi_reducer(nullptr, dist, DType::F32, {.shard_optimizer = true}, n, cuts);
    if (r == 0) std::cout << "reducer: " << reducer->describe() << "\n";
    const std::vector<FlatRange>& parts = reducer->parts();
    if (static_cast<int>(parts.size()) != W || parts.front().begin != 0 || parts.back().end != n)
      throw InternalError("the shards do not cover the buffer");
    for (int p = 0; p < W; ++p) {
      if (p > 0 && parts[p].begin != parts[p - 1].end) throw InternalError(cat("shard ", p, " does not follow on"));
      if (p > 0 && std::find(cuts.begin(), cuts.end(), static_cast<int64_t>(parts[p].begin)) == cuts.end())
        throw InternalError(cat("shard ", p, " starts at ", parts[p].begin, ", not at a chunk"));
    }
    const FlatRange mine = reducer->part(n);
    auto g = reducer_values(r, n);
    reducer->finish(g.data(), n);
    expect_near_sum(g, W, mine, "reduce-scatter");
    if (W == 2) expect_equal(g, plain, mine, "reduce-scatter");
    // The optimizer's partial norms, then the parameters each rank updated.
    std::vector<double> partial = {0.5 * (r + 1), -1.0 * r};
    reducer->sum(partial.data(), partial.size());
    if (partial[0] != 0.25 * W * (W + 1) || partial[1] != -0.5 * W * (W - 1))
      throw InternalError(cat("sharded sum gave ", partial[0], ", ", partial[1]));
    std::vector<float> params(n, -1.0f);
    for (size_t i = mine.begin; i < mine.end; ++i) params[i] = reducer_value(r, i);
    reducer->gather(params.data(), DType::F32);
    for (int p = 0; p < W; ++p)
      for (size_t i = parts[p].begin; i < parts[p].end; ++i)
        if (params[i] != reducer_value(p, i)) throw InternalError(cat("all-gather: element ", i, " is not rank ", p, "'s"));
  }
  std::cout << "rank " << r << " reducers ok\n";
  return 0;
}

int fail(DistContext& dist) {
  if (dist.rank() == dist.size() - 1)
    throw_input("shard_1.hdf5", "row 3: token id 40000 is outside the vocabulary of 30522");
  dist.barrier();  // without the abort, the other ranks would wait here for ever
  return 0;
}

int throw_plain(DistContext& dist) {
  if (dist.rank() == dist.size() - 1) throw std::runtime_error("simulated fault in the backward");
  std::vector<double> v(1 << 16, 1.0);
  for (;;) dist.allreduce_sum(v.data(), v.size());  // without the abort, for ever
}

int train(DistContext& dist) {
  std::vector<double> v(1 << 16, 1.0);
  std::cout << "rank " << dist.rank() << " pid " << getpid() << std::endl;
  for (;;) dist.allreduce_sum(v.data(), v.size());
}

}  // namespace

int main(int argc, char** argv) {
  return run_job("dist_probe", [&](DistContext& dist) -> int {
    dist.on_peer_failure([](const std::string& line) { std::cout << "peer failure: " << line << std::endl; });
    dist.barrier();  // no rank fails before rank 0 has its hook (else the watcher ends the job without it)
    if (argc == 2 && !std::strcmp(argv[1], "check")) return check(dist);
    if (argc == 2 && !std::strcmp(argv[1], "fail")) return fail(dist);
    if (argc == 2 && !std::strcmp(argv[1], "throw")) return throw_plain(dist);
    if (argc == 2 && !std::strcmp(argv[1], "train")) return train(dist);
    if (argc == 2 && !std::strcmp(argv[1], "reducers")) return reducers(dist);
    throw_input("command line", "usage: dist_probe check|fail|throw|train|reducers");
  });
}
