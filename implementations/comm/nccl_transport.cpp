// The NCCL transport (transport.h) over GPU memory: the job's communicator (its unique id made by rank 0 and broadcast
// over the context), the hierarchy's groups split from it (ncclCommSplit by the context's node numbering, so no
// further ids travel), and one GPU stream of its own (gpu/runtime.h) that every collective runs on, in issue order.
//
// Order through the backend's events, never on the host: before each collective the backend records an event that
// the stream waits for; join() records one on the stream that the backend's queue waits for. The backend's events
// are the GPU runtime's (gpu::Event), which also name the device. A step captured as a CUDA graph holds the
// collectives as a fork and a join of the backend's stream.
//
// Parts of any size: NCCL's reduce-scatter and all-gather want equal counts laid out rank by rank. Where the parts
// are so laid out (a hierarchy's even split) they run in place; otherwise (the sharded update's parts, cut at the
// optimizer's chunks) each part is one ncclReduce to its rank or one ncclBroadcast from it, grouped into one launch:
// in place, with no padded copy of the buffer and no scratch memory, and the same bytes on every link as a
// reduce-scatter to within a factor W / (W - 1).
#include "comm/transport.h"

#include "core/errors.h"

#if defined(BERTPERF_HAVE_NCCL)

#include "gpu/nccl_comm.h"
#include "gpu/runtime.h"

namespace bertperf {

namespace {

// One of the backend's events, as the GPU runtime's.
std::unique_ptr<gpu::Event> gpu_event(Device& device) {
  std::unique_ptr<Event> event = device.make_event();
  BERT_CHECK(dynamic_cast<gpu::Event*>(event.get()) != nullptr,
             "the NCCL transport needs a backend whose events are the GPU runtime's (gpu/runtime.h)");
  return std::unique_ptr<gpu::Event>(static_cast<gpu::Event*>(event.release()));
}

class NcclTransport final : public Transport {
 public:
  NcclTransport(Device& device, DistContext& dist, const TransportOptions& options)
      : device_(device), computed_(gpu_event(device)), reduced_(gpu_event(device)) {
    gpu::NcclId id{};
    if (dist.rank() == 0) id = gpu::nccl_unique_id();
    dist.broadcast(id.data(), id.size());
    comms_[0] = std::make_unique<gpu::NcclComm>(id, dist.size(), dist.rank(), computed_->device());
    if (options.hierarchy) {
      check_uniform_nodes(dist.fewest_local(), dist.most_local());
      for (Group group : {Group::NODE, Group::CROSS}) {
        const GroupSplit split = group_split(group, dist.rank(), dist.node(), dist.local_rank());
        comms_[static_cast<int>(group)] = comms_[0]->split(split.color, split.key);
      }
    }
    stream_ = std::make_unique<gpu::Stream>();  // on the device the communicator made current
  }

  ~NcclTransport() override {
    // What was issued completes before the communicators go.
    try {
      if (stream_) stream_->synchronize();
    } catch (...) {
    }
    for (int g = 2; g >= 0; --g) comms_[g].reset();
  }

  std::string name() const override { return "NCCL " + gpu::nccl_version(); }
  std::string overlap() const override { return "on its own CUDA stream"; }
  std::string not_capturable() const override { return {}; }  // the stream's fork and join are captured with the step
  std::vector<std::pair<std::string, std::string>> library_versions() const override {
    return {{"NCCL", gpu::nccl_version()}};
  }

  int rank(Group group) const override { return comm(group).rank(); }
  int size(Group group) const override { return comm(group).size(); }

  void all_reduce(Group group, void* data, size_t count, DType type) override {
    after_backend();
    comm(group).all_reduce(data, count, type, *stream_);
  }
  void reduce_scatter(Group group, void* data, const std::vector<FlatRange>& parts, DType type) override {
    after_backend();
    if (const size_t count = equal_part_count(parts)) return comm(group).reduce_scatter(data, count, type, *stream_);
    comm(group).reduce_parts(data, parts, type, *stream_);
  }
  void all_gather(Group group, void* data, const std::vector<FlatRange>& parts, DType type) override {
    after_backend();
    if (const size_t count = equal_part_count(parts)) return comm(group).all_gather(data, count, type, *stream_);
    comm(group).broadcast_parts(data, parts, type, *stream_);
  }
  void join() override {
    stream_->record(*reduced_);
    device_.wait(*reduced_);
  }

 private:
  gpu::NcclComm& comm(Group group) const {
    const auto& c = comms_[static_cast<int>(group)];
    BERT_CHECK(c != nullptr, "the NCCL transport was made without the hierarchy's groups");
    return *c;
  }
  // The stream's work from now on waits for the backend's work issued so far.
  void after_backend() {
    device_.record(*computed_);
    stream_->wait(*computed_);
  }

  Device& device_;
  std::unique_ptr<gpu::Event> computed_, reduced_;
  std::unique_ptr<gpu::NcclComm> comms_[3];  // by Group
  std::unique_ptr<gpu::Stream> stream_;
};

}  // namespace

bool nccl_built() { return true; }

std::unique_ptr<Transport> make_nccl_transport(Device& device, DistContext& dist, const TransportOptions& options) {
  return std::make_unique<NcclTransport>(device, dist, options);
}

}  // namespace bertperf

#else

namespace bertperf {

bool nccl_built() { return false; }

std::unique_ptr<Transport> make_nccl_transport(Device&, DistContext&, const TransportOptions&) {
  throw InternalError("this build has no NCCL (it needs the CUDA toolkit, NCCL and MPI)");
}

}  // namespace bertperf

#endif
