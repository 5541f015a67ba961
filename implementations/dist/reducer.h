// Gradient reduction across data-parallel ranks: the sum of every rank's gradient buffer, in place. The training
// step (harness/train_step.h) tells a reducer which ranges of the flat gradient buffer are final as the backward
// produces them (ready), so a reducer can start on them while the backward goes on, then waits for the whole sum
// (finish). A reducer works on backend memory: MPI for host gradients, NCCL for device gradients.
#pragma once

#include <cstddef>
#include <memory>

#include "backends/backend.h"
#include "dist/context.h"

namespace bertperf {

class GradReducer {
 public:
  virtual ~GradReducer() = default;
  // Elements [begin, end) of `grads` (F) are final on this rank for this step.
  virtual void ready(void* grads, size_t begin, size_t end) {}
  // grads[0, count) = the sum over ranks, on every rank.
  virtual void finish(void* grads, size_t count) = 0;
  // values[0, count) (f64 in backend memory) = the sum over ranks: partial norms of a sharded update.
  virtual void sum(double* values, size_t count) = 0;
};

// The reducer for a job: the identity for one rank; for several, an MPI all-reduce of the whole buffer at finish
// where the backend's memory is host memory (the CPU backends), in its master dtype. Device memory needs the NCCL
// reducer (not built yet): an InternalError says so.
std::unique_ptr<GradReducer> make_grad_reducer(Backend& backend, DistContext& dist);
// The MPI reducer over host memory of `type` (F32 or F64; InternalError otherwise), for backends whose ops have
// finished writing that memory when they return (the CPU's run synchronously).
std::unique_ptr<GradReducer> make_mpi_reducer(DistContext& dist, DType type);

}  // namespace bertperf
