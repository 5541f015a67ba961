// What a gradient reducer (reducer.h) runs its collectives over: a transport. The reduction policy (buckets started
// from the backward's ready hook, sharded LAMB, hierarchical reduction; reducer.cpp) is written once over this
// interface; a transport says how a collective moves memory of one kind:
//   MPI   host memory (mpi_transport.cpp): the CPU backends', whose device memory is host memory;
//   NCCL  GPU memory (nccl_transport.cpp, gpu/nccl_comm.h), on its own GPU stream.
// make_grad_reducer takes the one the backend declares for its memory (Capabilities::collectives), never guessing
// from its name or its memory.
//
// Order. A transport is ordered with the backend whose memory it moves. Collectives are issued in the same order on
// every rank and run in issue order; each runs after the backend's work issued before it (an asynchronous backend
// may not have run that work yet when the collective is issued), and join() makes the backend's work issued after
// it run after every collective issued so far. MPI meets that on the host: on a backend with host functions
// (cpu-async: device.h) it queues each collective as one, so the backend's queue runs it in its turn and the host
// never waits; otherwise it waits for an event the backend recorded before it touches the memory (on the calling
// thread, or on a communication thread that runs the collectives while the caller goes on), and join() waits for the
// collectives. NCCL meets it on the GPU: its stream waits for the backend's event, the backend's queue waits for the
// stream's, and the host never waits.
//
// Capture. Where the host never waits, a capture of the backend's work (a CUDA graph; cpu-async's recorded queue)
// holds the collectives issued meanwhile and replays them with the step: not_capturable() is empty.
//
// Groups. A hierarchy works in sub-groups of the job's ranks, cut from the world by the context's node numbering
// (comm/context.h): the ranks of one node, and the ranks of one local rank across the nodes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/device.h"
#include "comm/context.h"
#include "core/tensor_table.h"

namespace bertperf {

// `ranks` consecutive parts of [0, elements) that together cover it, cut only at `cuts` (sorted element offsets,
// the optimizer's chunk starts), each as near elements / ranks as the cuts allow. A part may be empty.
std::vector<FlatRange> split_flat(size_t elements, const std::vector<int64_t>& cuts, int ranks);

// A hierarchy's parts of a buffer of `elements` among the `ranks` of a node: `ranks` equal parts of
// elements / ranks, rank r's at r * part (collectives with equal counts run on them in place), and the tail past
// them (fewer than `ranks` elements), which the hierarchy sums over the world instead.
struct EvenSplit {
  std::vector<FlatRange> parts;
  FlatRange tail;
};
EvenSplit even_split(size_t elements, int ranks);

// The count of every part when parts[r] is [r * count, (r + 1) * count) for every r (the layout of an in-place
// reduce-scatter or all-gather with equal counts); 0 when they are not laid out so (or are empty).
size_t equal_part_count(const std::vector<FlatRange>& parts);

enum class Group : uint8_t {
  WORLD,  // every rank of the job
  NODE,   // the ranks of this node, by local rank
  CROSS,  // the ranks of this local rank, one per node, by node
};
// A group as a split of the world (MPI_Comm_split's and ncclCommSplit's arguments): the ranks with this rank's color
// form it, ordered by key.
struct GroupSplit {
  int color = 0, key = 0;
};
GroupSplit group_split(Group group, int rank, int node, int local_rank);
// A hierarchy needs as many ranks on every node: InputError (naming the config's reduction) otherwise.
void check_uniform_nodes(int fewest_local, int most_local);

class Transport {
 public:
  virtual ~Transport() = default;

  // "MPI", "NCCL 2.28.9": what a reducer's describe() says it runs over.
  virtual std::string name() const = 0;
  // How collectives issued during the backward overlap with it, for describe(): "on a communication thread".
  virtual std::string overlap() const = 0;
  // The libraries it runs on beside the context's MPI, as (name, version).
  virtual std::vector<std::pair<std::string, std::string>> library_versions() const { return {}; }

  // Empty where a capture of the backend's work holds the collectives issued meanwhile (see above); otherwise why not.
  virtual std::string not_capturable() const = 0;

  virtual int rank(Group group) const = 0;
  virtual int size(Group group) const = 0;

  // Collectives over `group` on the backend's memory, in place, of elements of `type` (sums: F32, F64, and BF16 on
  // NCCL; all_gather moves any type). `parts` has one range per rank of the group and stays alive until join().
  // data[0, count) = the sum over the group.
  virtual void all_reduce(Group group, void* data, size_t count, DType type) = 0;
  // data[parts[rank]] = the sum over the group of it; the rest of data is undefined afterwards.
  virtual void reduce_scatter(Group group, void* data, const std::vector<FlatRange>& parts, DType type) = 0;
  // data[parts[r]] = rank r's data[parts[r]], for every rank r of the group.
  virtual void all_gather(Group group, void* data, const std::vector<FlatRange>& parts, DType type) = 0;
  // The backend's work issued from now on runs after every collective issued so far (see above).
  virtual void join() = 0;
  // Lets issued collectives advance where the transport needs the caller for it (MPI polled); the ready hook calls
  // it.
  virtual void progress() {}
};

struct TransportOptions {
  bool overlap = false;    // collectives issued before join() may run while the caller goes on (the bucketed
                           // reducer); MPI otherwise runs each when it is issued
  bool thread = true;      // MPI with overlap: on a communication thread where MPI's thread support allows it;
                           // false: MPI_Iallreduce, advanced by progress()
  bool hierarchy = false;  // make the NODE and CROSS groups (otherwise only WORLD exists)
};

// MPI over host memory written by `device`'s work (null: plain host memory, final whenever a collective is issued),
// queued on the device as host functions where it has them and MPI allows calls from several threads at once.
// InternalError in a build without MPI or on a context that is not MPI's.
std::unique_ptr<Transport> make_mpi_transport(Device* device, DistContext& dist, const TransportOptions& options);
// NCCL over `device`'s GPU memory, on the device its events name, its communicators' unique ids broadcast over the
// context. InternalError where NCCL is not built (nccl_built()) or the device's events are not the GPU runtime's
// (gpu/runtime.h).
std::unique_ptr<Transport> make_nccl_transport(Device& device, DistContext& dist, const TransportOptions& options);
bool nccl_built();

}  // namespace bertperf
