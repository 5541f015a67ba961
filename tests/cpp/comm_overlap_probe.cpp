// A small MPI program for test_dist.cpp, run under `mpirun`: does any other thread call MPI while this process makes
// or frees a communicator? The context's own threads (rank 0's failure watcher, the other nodes' heartbeat) must not
// (comm/context.cpp says why), and the MPI transport makes and frees its communicators beside them.
//
// The probe stands between the program and MPI through MPI's profiling interface: its MPI_Comm_dup, MPI_Comm_split
// and MPI_Comm_free mark the process as making a communicator, hold the mark 300 ms (the watcher polls every 20 ms and
// the heartbeat beats every second, so a thread that is not kept out calls MPI inside that window, every time), then
// call PMPI_...; its point-to-point calls (the only ones the context's threads make) count each call from another
// thread while the mark is up. The ranks then sum their counts; rank 0 prints "overlaps=N" (with the first call seen)
// and the probe exits 1 when N > 0.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <thread>

#include "comm/context.h"
#include "comm/transport.h"
#include "core/errors.h"

namespace {

std::atomic<bool> making{false};
std::atomic<std::thread::id> maker{};
std::atomic<long> overlaps{0};
std::atomic<const char*> first_overlap{nullptr};

void note(const char* call) {
  if (!making.load() || maker.load() == std::this_thread::get_id()) return;
  if (overlaps.fetch_add(1) == 0) first_overlap.store(call);
}

// Marks a communicator being made or freed by this thread for the length of `make`.
template <typename F>
int making_communicator(F make) {
  maker.store(std::this_thread::get_id());
  making.store(true);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const int rc = make();
  making.store(false);
  return rc;
}

}  // namespace

extern "C" {

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* out) {
  return making_communicator([&] { return PMPI_Comm_dup(comm, out); });
}
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* out) {
  return making_communicator([&] { return PMPI_Comm_split(comm, color, key, out); });
}
int MPI_Comm_free(MPI_Comm* comm) {
  return making_communicator([&] { return PMPI_Comm_free(comm); });
}
int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* r) {
  note("MPI_Isend");
  return PMPI_Isend(buf, count, type, dest, tag, comm, r);
}
int MPI_Irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Request* r) {
  note("MPI_Irecv");
  return PMPI_Irecv(buf, count, type, source, tag, comm, r);
}
int MPI_Test(MPI_Request* r, int* flag, MPI_Status* status) {
  note("MPI_Test");
  return PMPI_Test(r, flag, status);
}
int MPI_Cancel(MPI_Request* r) {
  note("MPI_Cancel");
  return PMPI_Cancel(r);
}
int MPI_Wait(MPI_Request* r, MPI_Status* status) {
  note("MPI_Wait");
  return PMPI_Wait(r, status);
}

}  // extern "C"

int main() {
  using namespace bertperf;
  return run_job("comm_overlap_probe", [](DistContext& dist) {
    // A transport with the node and cross-node groups: a duplicate of the world and two splits of it, made and freed
    // while the context's threads run.
    make_mpi_transport(nullptr, dist, {.hierarchy = true}).reset();
    double seen = static_cast<double>(overlaps.load());
    dist.allreduce_sum(&seen, 1);
    const char* first = first_overlap.load();
    if (dist.is_root())
      std::cout << "overlaps=" << seen << (first ? cat(" (first: ", first, ")") : "") << " ranks=" << dist.size()
                << " nodes=" << dist.nodes() << std::endl;
    return seen > 0 ? 1 : 0;
  });
}
