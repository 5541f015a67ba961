// The MPI transport (transport.h): collectives on host memory, over a duplicate of MPI_COMM_WORLD (and the
// hierarchy's splits of it), so they never interleave with the context's own traffic.
//
// How a collective meets the order transport.h promises, on an asynchronous backend (one whose work runs after it is
// issued) as on a synchronous one: MPI touches memory only after the work that wrote it, either in the backend's own
// queue or once the host has waited for an event the backend recorded when the collective was issued. Four ways to
// run:
//   queued       (a backend with host functions, MPI_THREAD_MULTIPLE) each collective is queued on the backend as a
//                host function and runs on its queue in its turn: the host never waits, join() has nothing to do, and
//                a captured step holds the collectives (each queued collective's arguments are kept, one copy per
//                distinct collective, for as long as the transport lives);
//   at once      (no overlap asked) each collective runs on the calling thread when it is issued;
//   thread       (overlap, MPI_THREAD_MULTIPLE) a communication thread runs them in issue order, each after its
//                event, while the caller goes on; join() waits for the thread;
//   polled       (overlap, thread support below MULTIPLE, or not asked for) an all-reduce starts as MPI_Iallreduce
//                once its event has passed, progress() tests the requests and join() waits for them; the other
//                collectives wait for those requests and run at once.
#include "comm/transport.h"

#include "core/errors.h"

#ifdef BERTPERF_HAVE_MPI

#include <algorithm>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "comm/mpi_check.h"

namespace bertperf {

namespace {

MPI_Datatype mpi_type(DType type) {
  switch (type) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::BF16: return MPI_UINT16_T;  // moved, never summed
    case DType::E4M3: case DType::E5M2: return MPI_UINT8_T;  // moved, never summed
  }
  return MPI_DATATYPE_NULL;
}

int mpi_count(size_t n, const char* what) {
  BERT_CHECK(n <= static_cast<size_t>(INT_MAX), what, " of ", n, " elements is past MPI's int counts");
  return static_cast<int>(n);
}

class MpiTransport final : public Transport {
 public:
  MpiTransport(Device* device, DistContext& dist, const TransportOptions& options)
      : device_(device && device->capabilities().asynchronous ? device : nullptr), dist_(dist) {
    BERT_CHECK(dist.mpi(), "an MPI transport for a context without MPI");
    if (options.hierarchy) check_uniform_nodes(dist.fewest_local(), dist.most_local());
    {
      // The context's threads keep out of MPI while the communicators are made (context.h, quiet()).
      const std::unique_lock<std::mutex> quiet = dist.quiet();
      MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comms_[0]));
      if (options.hierarchy)
        for (Group group : {Group::NODE, Group::CROSS}) {
          const GroupSplit split = group_split(group, dist.rank(), dist.node(), dist.local_rank());
          MPI_CHECK(MPI_Comm_split(comms_[0], split.color, split.key, &comms_[index(group)]));
        }
    }
    for (int g = 0; g < 3; ++g)
      if (comms_[g] != MPI_COMM_NULL) {
        MPI_CHECK(MPI_Comm_rank(comms_[g], &rank_[g]));
        MPI_CHECK(MPI_Comm_size(comms_[g], &size_[g]));
      }
    int provided = MPI_THREAD_SINGLE;
    MPI_CHECK(MPI_Query_thread(&provided));
    // The backend's queue and the communication thread run collectives beside the context's failure watcher and the
    // caller's own MPI calls, so MPI must allow calls from several threads at once.
    const bool multiple = provided >= MPI_THREAD_MULTIPLE;
    if (device_ && device_->capabilities().host_functions && multiple) {
      mode_ = Mode::QUEUED;
    } else if (options.overlap) {
      mode_ = options.thread && multiple ? Mode::THREAD : Mode::POLLED;
    }
    if (mode_ != Mode::QUEUED)
      not_capturable_ = !device_ ? "MPI runs each collective on the host (a synchronous backend)"
                        : !device_->capabilities().host_functions
                            ? "the backend queues no host functions, so MPI waits on the host for its work"
                            : "MPI's thread support is below MULTIPLE, so its collectives cannot run on the backend's "
                              "queue";
    if (device_ && (mode_ == Mode::AT_ONCE || mode_ == Mode::POLLED)) written_ = device_->make_event();
    if (mode_ == Mode::THREAD) worker_ = std::thread([this] { work(); });
  }

  ~MpiTransport() override {
    if (mode_ == Mode::QUEUED) {  // the queued collectives have run before their communicators go
      try {
        device_->synchronize();
      } catch (...) {  // a failure of the backend's work, said by its own wait
      }
    }
    if (worker_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
      }
      wake_.notify_all();
      worker_.join();
    }
    for (MPI_Request& r : requests_)
      if (r != MPI_REQUEST_NULL) MPI_Wait(&r, MPI_STATUS_IGNORE);
    const std::unique_lock<std::mutex> quiet = dist_.quiet();
    for (MPI_Comm& c : comms_)
      if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
  }

  std::string name() const override { return "MPI"; }
  std::string overlap() const override {
    switch (mode_) {
      case Mode::QUEUED: return "in the backend's queue";
      case Mode::THREAD: return "on a communication thread";
      case Mode::POLLED: return "MPI_Iallreduce polled at every ready layer";
      case Mode::AT_ONCE: break;
    }
    return "each collective when it is issued";
  }

  std::string not_capturable() const override { return not_capturable_; }

  int rank(Group group) const override { return rank_[existing(group)]; }
  int size(Group group) const override { return size_[existing(group)]; }

  void all_reduce(Group group, void* data, size_t count, DType type) override {
    issue({Op::ALL_REDUCE, group, data, count, type, nullptr});
  }
  void reduce_scatter(Group group, void* data, const std::vector<FlatRange>& parts, DType type) override {
    issue({Op::REDUCE_SCATTER, group, data, 0, type, &parts});
  }
  void all_gather(Group group, void* data, const std::vector<FlatRange>& parts, DType type) override {
    issue({Op::ALL_GATHER, group, data, 0, type, &parts});
  }

  void join() override {
    if (mode_ == Mode::POLLED) return wait_requests();
    if (mode_ != Mode::THREAD) return;
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [this] { return next_ == queue_.size() && !busy_; });
    queue_.clear();  // keeps its capacity: later steps allocate nothing
    next_ = 0;
    events_used_ = 0;
    if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
  }

  void progress() override {
    if (mode_ != Mode::POLLED || requests_.empty()) return;
    int done = 0;
    MPI_CHECK(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE));
  }

 private:
  enum class Mode : uint8_t { AT_ONCE, THREAD, POLLED, QUEUED };
  struct Op {
    enum Kind : uint8_t { ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER } kind;
    Group group;
    void* data;
    size_t count;                          // ALL_REDUCE
    DType type;
    const std::vector<FlatRange>* parts;  // REDUCE_SCATTER, ALL_GATHER
  };
  struct Job {
    Op op;
    Event* written;  // passed once the backend's work before the op has run (null: nothing to wait for)
  };
  // A collective queued on the backend: the host function's argument.
  struct Queued {
    MpiTransport* transport;
    Op op;
  };

  static bool same(const Op& a, const Op& b) {
    return a.kind == b.kind && a.group == b.group && a.data == b.data && a.count == b.count && a.type == b.type &&
           a.parts == b.parts;
  }
  static void run_queued(void* queued) {
    const Queued& q = *static_cast<const Queued*>(queued);
    q.transport->run(q.op);
  }
  // The kept copy of `op`: a step issues the same collectives in the same order every time, so the one expected next
  // is looked at first, and only a collective never issued before is added (no step after the first allocates).
  Queued& kept(const Op& op) {
    for (size_t i = 0; i < queued_.size(); ++i) {
      const size_t at = (next_queued_ + i) % queued_.size();
      if (same(queued_[at].op, op)) {
        next_queued_ = at + 1;
        return queued_[at];
      }
    }
    queued_.push_back({this, op});
    next_queued_ = queued_.size();
    return queued_.back();
  }

  static int index(Group group) { return static_cast<int>(group); }
  int existing(Group group) const {
    BERT_CHECK(comms_[index(group)] != MPI_COMM_NULL, "the MPI transport was made without the hierarchy's groups");
    return index(group);
  }

  void issue(const Op& op) {
    existing(op.group);
    BERT_CHECK(op.kind == Op::ALL_GATHER || op.type != DType::BF16, "MPI sums fp32 or fp64, not bf16");
    switch (mode_) {
      case Mode::QUEUED:
        device_->enqueue_host_function(&MpiTransport::run_queued, &kept(op));
        return;
      case Mode::AT_ONCE:
        backend_done();
        run(op);
        return;
      case Mode::POLLED:
        backend_done();
        if (op.kind == Op::ALL_REDUCE) {
          requests_.push_back(MPI_REQUEST_NULL);
          MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, op.data, mpi_count(op.count, "an all-reduce"), mpi_type(op.type),
                                   MPI_SUM, comms_[index(op.group)], &requests_.back()));
        } else {
          wait_requests();
          run(op);
        }
        return;
      case Mode::THREAD: {
        Event* written = nullptr;
        if (device_) {
          // Events are made on a step's first use and reused by every later step.
          if (events_used_ == events_.size()) events_.push_back(device_->make_event());
          written = events_[events_used_++].get();
          device_->record(*written);
        }
        {
          std::lock_guard<std::mutex> lock(mutex_);
          queue_.push_back({op, written});
        }
        wake_.notify_all();
        return;
      }
    }
  }

  // The host waits for the backend's work issued so far (its writes to host memory are then in place).
  void backend_done() {
    if (!device_) return;
    device_->record(*written_);
    device_->host_wait(*written_);
  }

  void wait_requests() {
    if (requests_.empty()) return;
    MPI_CHECK(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE));
    requests_.clear();
  }

  // The collective, on this thread, now.
  void run(const Op& op) {
    const MPI_Comm comm = comms_[index(op.group)];
    const MPI_Datatype type = mpi_type(op.type);
    const size_t esize = dtype_size(op.type);
    auto* bytes = static_cast<unsigned char*>(op.data);
    if (op.kind == Op::ALL_REDUCE) {
      // MPI counts are int: large buffers go in chunks.
      constexpr size_t kChunk = size_t(1) << 30;
      for (size_t done = 0; done < op.count; done += kChunk)
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bytes + done * esize, static_cast<int>(std::min(kChunk, op.count - done)),
                                type, MPI_SUM, comm));
      return;
    }
    const std::vector<FlatRange>& parts = *op.parts;
    const int group_rank = rank_[index(op.group)];
    BERT_CHECK(static_cast<int>(parts.size()) == size_[index(op.group)], parts.size(), " parts for a group of ",
               size_[index(op.group)], " ranks");
    counts_.resize(parts.size());
    displs_.resize(parts.size());
    for (size_t r = 0; r < parts.size(); ++r) {
      BERT_CHECK(parts[r].begin == (r == 0 ? 0 : parts[r - 1].end), "parts must follow each other from 0");
      counts_[r] = mpi_count(parts[r].size(), "a part");
      displs_[r] = mpi_count(parts[r].begin, "a part's offset");
    }
    if (op.kind == Op::REDUCE_SCATTER) {
      // In place, this rank's sum lands at the front of the buffer: moved to its part.
      MPI_CHECK(MPI_Reduce_scatter(MPI_IN_PLACE, op.data, counts_.data(), type, MPI_SUM, comm));
      const FlatRange mine = parts[group_rank];
      std::memmove(bytes + mine.begin * esize, bytes, mine.size() * esize);
    } else {
      MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, op.data, counts_.data(), displs_.data(), type,
                               comm));
    }
  }

  // The communication thread: the queued collectives in issue order (the same on every rank).
  void work() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return stop_ || next_ < queue_.size(); });
      if (stop_) return;
      const Job job = queue_[next_];  // a copy: the queue may grow while the lock is released
      busy_ = true;
      lock.unlock();
      std::exception_ptr failed;
      try {
        if (job.written) device_->host_wait(*job.written);
        run(job.op);
      } catch (...) {
        failed = std::current_exception();
      }
      lock.lock();
      if (failed && !failure_) failure_ = failed;
      ++next_;
      busy_ = false;
      if (next_ == queue_.size()) idle_.notify_all();
    }
  }

  Device* device_;  // an asynchronous backend whose work writes the memory, or null
  DistContext& dist_;
  MPI_Comm comms_[3] = {MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL};  // by Group
  int rank_[3] = {0, 0, 0}, size_[3] = {1, 1, 1};
  Mode mode_ = Mode::AT_ONCE;
  std::string not_capturable_;  // empty when queued
  std::vector<int> counts_, displs_;  // run()'s, on one thread at a time
  // Queued: every distinct collective issued so far (a deque: each stays where it is while it grows).
  std::deque<Queued> queued_;
  size_t next_queued_ = 0;
  // At once and polled.
  std::unique_ptr<Event> written_;
  std::vector<MPI_Request> requests_;
  // Thread.
  std::vector<std::unique_ptr<Event>> events_;
  size_t events_used_ = 0;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::vector<Job> queue_;  // issued since the last join; queue_[next_] is the next to run
  size_t next_ = 0;
  bool busy_ = false, stop_ = false;
  std::exception_ptr failure_;
};

}  // namespace

std::unique_ptr<Transport> make_mpi_transport(Device* device, DistContext& dist, const TransportOptions& options) {
  return std::make_unique<MpiTransport>(device, dist, options);
}

}  // namespace bertperf

#else

namespace bertperf {

std::unique_ptr<Transport> make_mpi_transport(Device*, DistContext&, const TransportOptions&) {
  throw InternalError("this build has no MPI");
}

}  // namespace bertperf

#endif
