// Gradient reduction timed under mpirun (also across the hosts of scripts/netns_hosts.sh): for each buffer size,
// Open MPI's MPI_Allreduce of the whole fp32 buffer alone, beside our reducers (comm/reducer.h) on the same buffer,
// and, with --compute-ms, a simulated backward of --layers equal layers (busy work on this rank's thread) that reports
// each layer ready: the step with MPI_Allreduce after the backward against the bucketed reducer overlapped with it.
// Every time is the slowest rank's, the median (and the fastest) of --reps runs after one warm-up.
//
//   mpirun -np 2 bench_reduce [--mib 1,4,16] [--reps 5] [--bucket-mb 25] [--compute-ms 0] [--layers 12]
//                             [--algorithms mpi,allreduce,bucketed,hierarchical,sharded]
// (also: bucketed-polled; and the link alone between ranks 0 and 1: oneway, exchange)
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/errors.h"
#include "comm/context.h"
#include "comm/reducer.h"

using namespace bertperf;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

// Busy work for `seconds` on this thread (a backward layer's compute).
void compute(double seconds) {
  const double end = now() + seconds;
  volatile double x = 1;
  while (now() < end)
    for (int i = 0; i < 1000; ++i) x = x * 1.0000001 + 1e-9;
}

struct Timing {
  double median = 0, best = 0;
};

// `run` timed `reps` times after a warm-up: the slowest rank's time of each, then their median and minimum.
Timing time_it(const std::function<void()>& run, int reps) {
  run();
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = now();
    run();
    double elapsed = now() - start;
    MPI_Allreduce(MPI_IN_PLACE, &elapsed, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    times.push_back(elapsed);
  }
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], times.front()};
}

int bench(DistContext& dist, int argc, char** argv) {
  std::vector<std::string> mib = {"1", "4", "16"};
  std::vector<std::string> algorithms = {"mpi", "allreduce", "bucketed", "hierarchical", "sharded"};
  int reps = 5, layers = 12;
  double bucket_mb = 25, compute_ms = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) throw_input("command line", "option " + a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--mib") mib = split(v);
    else if (a == "--algorithms") algorithms = split(v);
    else if (a == "--reps") reps = std::stoi(v);
    else if (a == "--layers") layers = std::stoi(v);
    else if (a == "--bucket-mb") bucket_mb = std::stod(v);
    else if (a == "--compute-ms") compute_ms = std::stod(v);
    else throw_input("command line", "unknown option " + a);
  }
  if (dist.is_root())
    std::printf("# %s\n# bucket %.3g MiB, %d reps, simulated backward %g ms x %d layers\n"
                "| MiB | algorithm | median s | best s | vs MPI_Allreduce |\n| --- | --- | --- | --- | --- |\n",
                dist.describe().c_str(), bucket_mb, reps, compute_ms, layers);
  for (const std::string& m : mib) {
    const size_t n = static_cast<size_t>(std::stod(m) * 1048576.0 / sizeof(float));
    std::vector<float> grads(n, 1.0f);
    std::vector<int64_t> cuts;
    for (size_t c = 0; c < n; c += 32768) cuts.push_back(static_cast<int64_t>(c));
    // The backward's ready ranges: `layers` equal pieces from the end of the buffer.
    auto backward = [&](GradReducer* reducer) {
      for (int l = layers - 1; l >= 0; --l) {
        if (compute_ms > 0) compute(compute_ms / 1000.0);
        if (reducer) reducer->ready(grads.data(), n * l / layers, n * (l + 1) / layers);
      }
    };
    double mpi_median = 0;
    for (const std::string& name : algorithms) {
      Timing t;
      if (name == "oneway" || name == "exchange") {
        // The link alone, between ranks 0 and 1: the buffer there and back (half of it: one way), or both ways
        // at once (MPI_Sendrecv; a full-duplex link takes one way's time).
        std::vector<float> in(n);
        const int peer = dist.rank() == 0 ? 1 : 0, count = static_cast<int>(n);
        t = time_it([&] {
          if (dist.rank() > 1) return;
          if (name == "exchange") {
            MPI_Sendrecv(grads.data(), count, MPI_FLOAT, peer, 0, in.data(), count, MPI_FLOAT, peer, 0,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          } else if (dist.rank() == 0) {
            MPI_Send(grads.data(), count, MPI_FLOAT, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(in.data(), count, MPI_FLOAT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          } else {
            MPI_Recv(in.data(), count, MPI_FLOAT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(grads.data(), count, MPI_FLOAT, 0, 0, MPI_COMM_WORLD);
          }
        }, reps);
        if (name == "oneway") t = {t.median / 2, t.best / 2};
      } else if (name == "mpi") {
        t = time_it([&] {
          backward(nullptr);
          MPI_Allreduce(MPI_IN_PLACE, grads.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }, reps);
        mpi_median = t.median;
      } else {
        ReductionOptions o;
        o.bucket_mb = bucket_mb;
        if (name == "bucketed" || name == "bucketed-polled") o.algorithm = ReduceAlgorithm::BUCKETED;
        if (name == "bucketed-polled") o.thread = false;
        if (name == "hierarchical") o.algorithm = ReduceAlgorithm::HIERARCHICAL;
        if (name == "sharded") o.shard_optimizer = true;
        if (name != "allreduce" && name != "bucketed" && name != "bucketed-polled" && name != "hierarchical" &&
            name != "sharded")
          throw_input("--algorithms", "unknown algorithm " + name);
        const auto reducer = make_mpi_reducer(nullptr, dist, DType::F32, o, n, cuts);
        t = time_it([&] {
          backward(reducer.get());
          reducer->finish(grads.data(), n);
          if (o.shard_optimizer) reducer->gather(grads.data(), DType::F32);  // the parameters' all-gather
        }, reps);
      }
      if (dist.is_root()) {
        char ratio[32] = "";
        if (mpi_median > 0) std::snprintf(ratio, sizeof ratio, "%.2fx", mpi_median / t.median);
        std::printf("| %s | %s | %.4f | %.4f | %s |\n", m.c_str(), name.c_str(), t.median, t.best, ratio);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_job("bench_reduce", [&](DistContext& dist) { return bench(dist, argc, argv); });
}
