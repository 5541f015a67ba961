// Gradient reduction across data-parallel ranks: the sum of every rank's gradient buffer, in place. The training
// step (harness/train_step.h) tells a reducer which ranges of the flat gradient buffer are final as the backward
// produces them (ready), so a reducer can start on them while the backward goes on, then waits for the whole sum
// (finish). A reducer works on backend memory through a transport (transport.h): MPI where the backend's memory is
// host memory, NCCL where it is a GPU's (the backend says which: Capabilities::collectives). It is ordered with the backend's work through
// the backend's events: ready() may come before the backward's ops that write the range have run (an asynchronous
// backend), and finish() leaves work the backend issues later ordered after the sum.
//
// The policy is one, written once over the transport (reducer.cpp); the config's "distributed": {"reduction": ...}
// block (harness/train_config.h) chooses:
//   allreduce     one all-reduce of the whole buffer at finish;
//   bucketed      the buffer cut into buckets of bucket_mb; a bucket's all-reduce is issued as soon as ready() has
//                 reported all of it, and runs while the backward goes on (MPI: on a communication thread where MPI
//                 has MPI_THREAD_MULTIPLE, else MPI_Iallreduce polled at every ready(); NCCL: on its stream), the
//                 rest at finish, which joins them all;
//   hierarchical  reduce-scatter inside a node, all-reduce of each part across nodes among the ranks of the same
//                 local rank, all-gather inside the node (the node's parts are equal; the few elements past them are
//                 all-reduced over the world).
// A sharded reducer (shard_optimizer, ZeRO-1) reduce-scatters instead: after finish only this rank's part of the
// buffer (parts(), cut at chunk boundaries) holds the sum; the optimizer updates that part, completing its per-tensor
// norms with sum(), and gather() hands every rank's updated part to every rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/device.h"
#include "comm/context.h"
#include "comm/transport.h"

namespace bertperf {

// How training groups and issues its gradient reductions (the reducer's policy); not the scaling model's
// AllReduceSchedule (perf/comm_model.h), the message schedule of one all-reduce it prices.
enum class ReduceAlgorithm : uint8_t { ALLREDUCE, BUCKETED, HIERARCHICAL };
const char* reduce_algorithm_name(ReduceAlgorithm algorithm);

struct ReductionOptions {
  ReduceAlgorithm algorithm = ReduceAlgorithm::ALLREDUCE;
  double bucket_mb = 25;         // bucketed: bucket size in MiB of gradient memory
  bool shard_optimizer = false;  // ZeRO-1: reduce-scatter, a sharded LAMB update, all-gather of the parameters
  bool thread = true;            // bucketed over MPI: a communication thread where MPI's thread support allows it;
                                 // false: MPI_Iallreduce polled at every ready() (not a config field)
};

class GradReducer {
 public:
  virtual ~GradReducer() = default;
  // Elements [begin, end) of `grads` (F) are final on this rank for this step.
  virtual void ready(void* grads, size_t begin, size_t end) {}
  // grads[0, count) = the sum over ranks, on every rank (sharded: only grads[part()] holds the sum).
  virtual void finish(void* grads, size_t count) = 0;
  // values[0, count) (f64 in backend memory) = the sum over ranks: partial norms of a sharded update.
  virtual void sum(double* values, size_t count) = 0;
  // Sharded reducers: every rank's part, in rank order (empty for the others).
  virtual const std::vector<FlatRange>& parts() const {
    static const std::vector<FlatRange> none;
    return none;
  }
  bool sharded() const { return !parts().empty(); }
  // This rank's part (everything when not sharded).
  virtual FlatRange part(size_t elements) const { return {0, elements}; }
  // Sharded reducers: data[part of rank r] from rank r, on every rank, for a flat buffer of `type`.
  virtual void gather(void* data, DType type) {}
  // Empty where a captured step may hold this reducer's collectives (its transport's, transport.h; none for one
  // rank); otherwise why not.
  virtual std::string not_capturable() const { return {}; }
  // One line for logs: the algorithm, buckets, thread or polling, parts.
  virtual std::string describe() const = 0;
  // The libraries it runs on beside the context's MPI, as (name, version): NCCL where it is NCCL's.
  virtual std::vector<std::pair<std::string, std::string>> library_versions() const { return {}; }
};

// The reducer for a job of a flat buffer of `elements` of `type` (the backend's master dtype) in `device`'s
// memory, whose sharded update may be cut at `cuts`: the identity for one rank; for several, the policy over MPI
// where the memory is host memory, or over NCCL where it is not and NCCL is built (InternalError where it is not).
std::unique_ptr<GradReducer> make_grad_reducer(Device& device, DType type, DistContext& dist,
                                               const ReductionOptions& options, size_t elements,
                                               const std::vector<int64_t>& cuts);
// The plain all-reduce, for callers without a layout (the step benchmark, tools).
std::unique_ptr<GradReducer> make_grad_reducer(Device& device, DType type, DistContext& dist);
// The transport options a reduction needs (the groups of a hierarchy, overlap for buckets).
TransportOptions transport_options(const ReductionOptions& options);
// The policy over `transport`, whatever the number of ranks (tests and benchmarks; make_grad_reducer uses it).
std::unique_ptr<GradReducer> make_reducer(std::unique_ptr<Transport> transport, DType type,
                                          const ReductionOptions& options, size_t elements,
                                          const std::vector<int64_t>& cuts);
// The policy over MPI on host memory of `type` (F32 or F64; InternalError otherwise), written by `device`'s work
// (null: plain host memory, final whenever the reducer is called); the identity on a world of one without MPI.
std::unique_ptr<GradReducer> make_mpi_reducer(Device* device, DistContext& dist, DType type,
                                              const ReductionOptions& options = {}, size_t elements = 0,
                                              const std::vector<int64_t>& cuts = {});
// The policy over NCCL on `device`'s memory of `type` (F32, BF16 or F64), on the device its events name, also on a
// world of one. InternalError where NCCL is not built (nccl_built()).
std::unique_ptr<GradReducer> make_nccl_reducer(Device& device, DistContext& dist, DType type,
                                               const ReductionOptions& options, size_t elements,
                                               const std::vector<int64_t>& cuts);

}  // namespace bertperf
