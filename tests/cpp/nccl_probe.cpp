// The NCCL transport (comm/transport.h) and the reduction policy over it, on the CUDA backend's memory, for
// test_nccl.cpp: run as one process (a world of one) or under `mpirun -np N` with a GPU per rank.
//   every reduction (all-reduce, bucketed with ranges reported ready as a backward does, hierarchical, sharded with
//   its sum and the all-gathers of fp32 master weights and the bf16 weight copy) against the fp64 sum of every rank's
//   values (reducer_checks.h), two steps each; and the transport's reduce-scatter and all-gather on uneven parts
//   (one ncclReduce / ncclBroadcast per part).
// Every input is written by the backend's own queued work just before the reducer is called (a copy on its stream)
// and read back by queued work just after (a download): a transport that did not order itself with the backend's
// events would read or hand back stale memory. Prints "rank R nccl ok" when everything matched.
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <vector>

#include "comm/context.h"
#include "comm/reducer.h"
#include "core/errors.h"
#include "reducer_checks.h"
#include "registry/registry.h"

using namespace bertperf;
using namespace bertperf::testing;

namespace {

// fp32 to bf16 and back, rounding to nearest even (what the backend's convert does).
float bf16_rounded(float x) {
  uint32_t u = 0;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

struct Probe {
  DistContext& dist;
  Backend& backend;
  size_t n;
  DeviceBuffer grads, staged;

  Probe(DistContext& d, Backend& b, size_t elements)
      : dist(d), backend(b), n(elements), grads(b, elements * 4), staged(b, elements * 4) {}

  // grads = host, written by the backend's queued work (a copy it has not necessarily run yet).
  void put(void* dst, const std::vector<float>& host) {
    upload_floats(backend, staged.data(), DType::F32, host.data(), n);
    backend.fill_zero(dst, n * 4);
    backend.copy(dst, staged.data(), n * 4);
  }
  std::vector<float> get(const void* src) {
    std::vector<float> host(n);
    backend.download(host.data(), src, n * 4);  // queued after whatever the reducer left for the backend to wait on
    backend.synchronize();
    return host;
  }

  void reduction(const char* name, const ReductionOptions& options) {
    const int W = dist.size(), r = dist.rank();
    const std::vector<int64_t> cuts = reducer_cuts(n);
    const auto reducer = make_nccl_reducer(backend, dist, DType::F32, options, n, cuts);
    if (r == 0) std::cout << "reducer: " << reducer->describe() << std::endl;
    const FlatRange mine = reducer->part(n);
    for (int step = 0; step < 2; ++step) {
      put(grads.data(), reducer_values(r, n));
      announce(*reducer, grads.data(), n);
      reducer->finish(grads.data(), n);
      expect_near_sum(get(grads.data()), W, mine, cat(name, " step ", step));
    }
    if (!reducer->sharded()) return;
    // The optimizer's partial norms, summed in device memory.
    DeviceBuffer norms(backend, 2 * sizeof(double));
    const double partial[2] = {0.5 * (r + 1), -1.0 * r};
    backend.upload(norms.data(), partial, sizeof partial);
    reducer->sum(norms.as<double>(), 2);
    double summed[2] = {};
    backend.download(summed, norms.data(), sizeof summed);
    backend.synchronize();
    if (summed[0] != 0.25 * W * (W + 1) || summed[1] != -0.5 * W * (W - 1))
      throw InternalError(cat(name, ": sum gave ", summed[0], ", ", summed[1]));
    // The parameters each rank updated, fp32 and bf16, to every rank.
    std::vector<float> params(n, -1.0f);
    for (size_t i = mine.begin; i < mine.end; ++i) params[i] = reducer_value(r, i);
    put(grads.data(), params);
    reducer->gather(grads.data(), DType::F32);
    const std::vector<float> master = get(grads.data());
    DeviceBuffer weights(backend, n * 2);
    upload_floats(backend, weights.data(), DType::BF16, params.data(), n);
    reducer->gather(weights.data(), DType::BF16);
    std::vector<float> copy(n);
    download_floats(backend, copy.data(), weights.data(), DType::BF16, n);
    for (int p = 0; p < W; ++p)
      for (size_t i = reducer->parts()[p].begin; i < reducer->parts()[p].end; ++i) {
        if (master[i] != reducer_value(p, i)) throw InternalError(cat(name, ": fp32 all-gather: element ", i));
        if (copy[i] != bf16_rounded(reducer_value(p, i))) throw InternalError(cat(name, ": bf16 all-gather: element ", i));
      }
  }

  // Parts that are not the equal layout: one ncclReduce or ncclBroadcast per part.
  void uneven_parts() {
    const int W = dist.size(), r = dist.rank();
    std::vector<FlatRange> parts = split_flat(n, {0, 1000, 5003, static_cast<int64_t>(n / 2 + 17)}, W);
    if (W == 1) parts = {{7, n}};  // one rank: an offset part is not the equal layout either
    if (equal_part_count(parts) != 0) throw InternalError("the uneven parts are laid out evenly");
    const auto transport = make_nccl_transport(backend, dist, {});
    if (r == 0) std::cout << "transport: " << transport->name() << ", " << transport->overlap() << std::endl;
    put(grads.data(), reducer_values(r, n));
    transport->reduce_scatter(Group::WORLD, grads.data(), parts, DType::F32);
    transport->join();
    expect_near_sum(get(grads.data()), W, parts[r], "uneven reduce-scatter");
    std::vector<float> params(n, -1.0f);
    for (size_t i = parts[r].begin; i < parts[r].end; ++i) params[i] = reducer_value(r, i);
    put(grads.data(), params);
    transport->all_gather(Group::WORLD, grads.data(), parts, DType::F32);
    transport->join();
    const std::vector<float> got = get(grads.data());
    for (int p = 0; p < W; ++p)
      for (size_t i = parts[p].begin; i < parts[p].end; ++i)
        if (got[i] != reducer_value(p, i)) throw InternalError(cat("uneven all-gather: element ", i));
  }
};

}  // namespace

int main(int argc, char** argv) {
  return run_job("nccl_probe", [](DistContext& dist) {
    const std::unique_ptr<Backend> backend = make_backend(backend_spec("cuda"), {.local_rank = dist.local_rank()});
    Probe probe(dist, *backend, 250007);
    probe.reduction("all-reduce", {});
    probe.reduction("bucketed", {.algorithm = ReduceAlgorithm::BUCKETED, .bucket_mb = 0.1});
    probe.reduction("hierarchical", {.algorithm = ReduceAlgorithm::HIERARCHICAL});
    probe.reduction("sharded", {.shard_optimizer = true});
    probe.uneven_parts();
    std::cout << "rank " << dist.rank() << " nccl ok" << std::endl;
    return 0;
  });
}
