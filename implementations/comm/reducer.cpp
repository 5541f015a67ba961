// Gradient reducers (reducer.h): the identity for one rank; MPI over host memory for several (all-reduce,
// bucketed, hierarchical, sharded); NCCL over device memory in nccl_reducer.cpp.
#include "comm/reducer.h"

#include <algorithm>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "core/errors.h"

#ifdef BERTPERF_HAVE_MPI
#include "comm/mpi_check.h"
#endif

namespace bertperf {

const char* reduce_algorithm_name(ReduceAlgorithm algorithm) {
  switch (algorithm) {
    case ReduceAlgorithm::ALLREDUCE: return "allreduce";
    case ReduceAlgorithm::BUCKETED: return "bucketed";
    case ReduceAlgorithm::HIERARCHICAL: return "hierarchical";
  }
  return "unknown";
}

std::vector<FlatRange> split_flat(size_t elements, const std::vector<int64_t>& cuts, int ranks) {
  BERT_CHECK(ranks > 0, "splitting a flat buffer among ", ranks, " ranks");
  std::vector<FlatRange> parts(ranks);
  size_t begin = 0;
  for (int r = 0; r < ranks; ++r) {
    size_t end = elements;
    if (r + 1 < ranks) {
      // The cut nearest the ideal end of this part, never before its begin.
      const size_t ideal = elements / ranks * (r + 1) + std::min<size_t>(r + 1, elements % ranks);
      end = begin;
      for (int64_t c : cuts) {
        const size_t cut = static_cast<size_t>(c);
        if (cut < begin || cut > elements) continue;
        if (end == begin || (cut > ideal ? cut - ideal : ideal - cut) < (end > ideal ? end - ideal : ideal - end))
          end = cut;
      }
    }
    parts[r] = {begin, end};
    begin = end;
  }
  return parts;
}

namespace {

class IdentityReducer final : public GradReducer {
 public:
  void finish(void*, size_t) override {}
  void sum(double*, size_t) override {}
  std::string describe() const override { return "none (one rank)"; }
};

#ifdef BERTPERF_HAVE_MPI

MPI_Datatype mpi_type(DType type) {
  switch (type) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::BF16: return MPI_UINT16_T;  // moved, never summed
  }
  return MPI_DATATYPE_NULL;
}

int mpi_count(size_t n, const char* what) {
  BERT_CHECK(n <= static_cast<size_t>(INT_MAX), what, " of ", n, " elements is past MPI's int counts");
  return static_cast<int>(n);
}

// All-reduce in chunks of at most 2^30 elements (MPI counts are int).
void allreduce(void* data, size_t count, DType type, MPI_Comm comm) {
  constexpr size_t kChunk = size_t(1) << 30;
  auto* bytes = static_cast<unsigned char*>(data);
  for (size_t done = 0; done < count; done += kChunk) {
    const int n = static_cast<int>(std::min(kChunk, count - done));
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bytes + done * dtype_size(type), n, mpi_type(type), MPI_SUM, comm));
  }
}

// The MPI reducers over host memory. Every one works on its own duplicate of MPI_COMM_WORLD, so its collectives
// (on a communication thread, too) never interleave with the context's. On an asynchronous backend, MPI touches a
// range only once the backend's work on it has passed: a bucket's event, recorded when ready() reports it, is
// waited for before its all-reduce; finish, sum and gather wait for all the work issued before them.
class MpiReducer final : public GradReducer {
 public:
  MpiReducer(Device* device, DistContext& dist, DType type, const ReductionOptions& options, size_t elements,
             const std::vector<int64_t>& cuts)
      : device_(device && device->capabilities().asynchronous ? device : nullptr),
        type_(type),
        options_(options),
        elements_(elements),
        esize_(dtype_size(type)) {
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(comm_, &size_));
    if (options.shard_optimizer) {
      BERT_CHECK(elements > 0, "a sharded reducer needs the flat buffer's size");
      parts_ = split_flat(elements, cuts, size_);
      for (const FlatRange& p : parts_) {
        counts_.push_back(mpi_count(p.size(), "a shard"));
        displs_.push_back(mpi_count(p.begin, "a shard offset"));
      }
    } else if (options.algorithm == ReduceAlgorithm::BUCKETED) {
      BERT_CHECK(elements > 0, "a bucketed reducer needs the flat buffer's size");
      BERT_CHECK(options.bucket_mb > 0, "bucket_mb must be positive, got ", options.bucket_mb);
      const size_t per = std::max<size_t>(1, static_cast<size_t>(options.bucket_mb * 1048576.0) / esize_);
      for (size_t b = 0; b < elements; b += per) buckets_.push_back({b, std::min(elements, b + per)});
      pending_.resize(buckets_.size());
      started_.resize(buckets_.size());
      requests_.assign(buckets_.size(), MPI_REQUEST_NULL);
      if (device_)
        for (size_t b = 0; b < buckets_.size(); ++b) written_.push_back(device_->make_event());
      reset_buckets();
      int provided = MPI_THREAD_SINGLE;
      MPI_CHECK(MPI_Query_thread(&provided));
      threaded_ = options.thread && provided >= MPI_THREAD_MULTIPLE;  // beside the context's failure watcher
      if (threaded_) worker_ = std::thread([this] { work(); });
    } else if (options.algorithm == ReduceAlgorithm::HIERARCHICAL) {
      BERT_CHECK(elements > 0, "a hierarchical reducer needs the flat buffer's size");
      MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local_));
      int local_rank = 0;
      MPI_CHECK(MPI_Comm_rank(local_, &local_rank));
      MPI_CHECK(MPI_Comm_size(local_, &local_size_));
      int sizes[2] = {local_size_, -local_size_};
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MAX, comm_));
      if (sizes[0] != -sizes[1])
        throw_input("distributed: reduction",
                    cat("hierarchical reduction needs as many ranks on every node, but nodes have from ", -sizes[1],
                        " to ", sizes[0], "; use \"allreduce\" or \"bucketed\""));
      MPI_CHECK(MPI_Comm_split(comm_, local_rank, rank_, &cross_));
      MPI_CHECK(MPI_Comm_size(cross_, &nodes_));
      for (const FlatRange& p : split_flat(elements, {}, local_size_)) {
        counts_.push_back(mpi_count(p.size(), "a node's part"));
        displs_.push_back(mpi_count(p.begin, "a node's part offset"));
      }
      scratch_.resize(static_cast<size_t>(counts_[local_rank]) * esize_);
      local_rank_ = local_rank;
    }
  }

  ~MpiReducer() override {
    if (worker_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
      }
      wake_.notify_all();
      worker_.join();
    }
    for (MPI_Comm* c : {&cross_, &local_, &comm_})
      if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  }

  void ready(void* grads, size_t begin, size_t end) override {
    if (buckets_.empty()) return;
    BERT_CHECK(begin <= end && end <= elements_, "ready range [", begin, ", ", end, ") outside ", elements_);
    grads_ = static_cast<unsigned char*>(grads);
    // Buckets are equal in size: the ones [begin, end) touches.
    const size_t per = buckets_[0].size();
    for (size_t b = begin / per; b < buckets_.size() && buckets_[b].begin < end; ++b) {
      const size_t overlap = std::min(end, buckets_[b].end) - std::max(begin, buckets_[b].begin);
      pending_[b] -= std::min(pending_[b], overlap);
      if (pending_[b] == 0 && !started_[b]) start(b);
    }
    if (!threaded_) poll();
  }

  void finish(void* grads, size_t count) override {
    if (elements_ > 0)
      BERT_CHECK(count == elements_, "the reducer was built for ", elements_, " elements, handed ", count);
    settle();
    if (!parts_.empty()) return reduce_scatter(grads);
    if (!buckets_.empty()) return finish_buckets(grads);
    if (local_ != MPI_COMM_NULL) return hierarchical(grads, count);
    allreduce(grads, count, type_, comm_);
  }

  void sum(double* values, size_t count) override {
    settle();
    allreduce(values, count, DType::F64, comm_);
  }

  const std::vector<FlatRange>& parts() const override {
    static const std::vector<FlatRange> none;
    return parts_.empty() ? none : parts_;
  }
  FlatRange part(size_t elements) const override { return parts_.empty() ? FlatRange{0, elements} : parts_[rank_]; }

  void gather(void* data, DType type) override {
    if (parts_.empty()) return;
    settle();
    MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts_.data(), displs_.data(),
                             mpi_type(type), comm_));
  }

  std::string describe() const override {
    const std::string dt = dtype_name(type_);
    if (!parts_.empty())
      return cat("sharded (ZeRO-1) over MPI, ", dt, ": reduce-scatter into ", size_, " parts, this rank's ",
                 parts_[rank_].size(), " of ", elements_, " elements; all-gather of the parameters");
    if (!buckets_.empty())
      return cat("bucketed all-reduce over MPI, ", dt, ": ", buckets_.size(), " bucket",
                 buckets_.size() == 1 ? "" : "s",
                 " of up to ", options_.bucket_mb, " MiB, ",
                 threaded_ ? "on a communication thread" : "MPI_Iallreduce polled at every ready layer");
    if (local_ != MPI_COMM_NULL)
      return cat("hierarchical over MPI, ", dt, ": reduce-scatter inside each of ", nodes_, " node",
                 nodes_ == 1 ? "" : "s", " of ", local_size_, " ranks, all-reduce across nodes, all-gather");
    return cat("all-reduce over MPI, ", dt, ", after the backward");
  }

 private:
  // Waits for the backend's work issued so far (host memory is final after it).
  void settle() {
    if (device_) device_->synchronize();
  }

  void reset_buckets() {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      pending_[b] = buckets_[b].size();
      started_[b] = false;
    }
  }

  void start(size_t b) {
    started_[b] = true;
    unsigned char* data = grads_ + buckets_[b].begin * esize_;
    const int n = mpi_count(buckets_[b].size(), "a bucket");
    Event* written = device_ ? written_[b].get() : nullptr;
    if (written) device_->record(*written);
    if (threaded_) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.push_back({data, n, written});
      }
      wake_.notify_all();
    } else {
      if (written) device_->host_wait(*written);
      MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, n, mpi_type(type_), MPI_SUM, comm_, &requests_[b]));
    }
  }

  void poll() {
    int done = 0;
    MPI_CHECK(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE));
  }

  void finish_buckets(void* grads) {
    grads_ = static_cast<unsigned char*>(grads);
    for (size_t b = 0; b < buckets_.size(); ++b)
      if (!started_[b]) start(b);
    if (threaded_) {
      std::unique_lock<std::mutex> lock(mutex_);
      idle_.wait(lock, [this] { return queue_.empty() && !busy_; });
      if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
    } else {
      MPI_CHECK(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE));
    }
    reset_buckets();
  }

  // The communication thread: the buckets' all-reduces in the order they were started (the same on every rank).
  void work() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      const Job job = queue_.front();
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      std::exception_ptr failed;
      try {
        if (job.written) device_->host_wait(*job.written);
        allreduce(job.data, static_cast<size_t>(job.count), type_, comm_);
      } catch (...) {
        failed = std::current_exception();
      }
      lock.lock();
      if (failed && !failure_) failure_ = failed;
      busy_ = false;
      if (queue_.empty()) idle_.notify_all();
    }
  }

  void hierarchical(void* grads, size_t count) {
    const MPI_Datatype t = mpi_type(type_);
    MPI_CHECK(MPI_Reduce_scatter(grads, scratch_.data(), counts_.data(), t, MPI_SUM, local_));
    const int mine = counts_[local_rank_];
    if (nodes_ > 1) MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, scratch_.data(), mine, t, MPI_SUM, cross_));
    MPI_CHECK(MPI_Allgatherv(scratch_.data(), mine, t, grads, counts_.data(), displs_.data(), t, local_));
  }

  void reduce_scatter(void* grads) {
    // In place, this rank's sum lands at the front of the buffer: moved to its part.
    MPI_CHECK(MPI_Reduce_scatter(MPI_IN_PLACE, grads, counts_.data(), mpi_type(type_), MPI_SUM, comm_));
    auto* bytes = static_cast<unsigned char*>(grads);
    std::memmove(bytes + parts_[rank_].begin * esize_, bytes, parts_[rank_].size() * esize_);
  }

  struct Job {
    void* data;
    int count;
    Event* written;  // the backend's work on the bucket has passed it (null: nothing to wait for)
  };

  Device* device_;  // an asynchronous backend whose work writes the buffers, or null
  DType type_;
  ReductionOptions options_;
  size_t elements_, esize_;
  MPI_Comm comm_ = MPI_COMM_NULL, local_ = MPI_COMM_NULL, cross_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, nodes_ = 1;
  std::vector<FlatRange> parts_;       // sharded
  std::vector<int> counts_, displs_;   // sharded: per rank; hierarchical: per local rank
  std::vector<unsigned char> scratch_; // hierarchical: this rank's part
  // Bucketed.
  std::vector<FlatRange> buckets_;
  std::vector<size_t> pending_;        // elements not yet reported ready, per bucket
  std::vector<bool> started_;
  std::vector<MPI_Request> requests_;  // polling mode
  std::vector<std::unique_ptr<Event>> written_;  // per bucket, on an asynchronous backend
  unsigned char* grads_ = nullptr;
  bool threaded_ = false;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<Job> queue_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr failure_;
};

#endif  // BERTPERF_HAVE_MPI

}  // namespace

std::unique_ptr<GradReducer> make_mpi_reducer(Device* device, DistContext& dist, DType type,
                                              const ReductionOptions& options, size_t elements,
                                              const std::vector<int64_t>& cuts) {
  if (type != DType::F32 && type != DType::F64)
    throw InternalError("the MPI gradient reducer sums fp32 or fp64 gradients, not bf16");
#ifdef BERTPERF_HAVE_MPI
  if (dist.mpi()) return std::make_unique<MpiReducer>(device, dist, type, options, elements, cuts);
#else
  (void)device;
#endif
  BERT_CHECK(dist.size() == 1, "an MPI reducer for ", dist.size(), " ranks without MPI");
  return std::make_unique<IdentityReducer>();
}

std::unique_ptr<GradReducer> make_grad_reducer(Device& device, DType type, DistContext& dist,
                                               const ReductionOptions& options, size_t elements,
                                               const std::vector<int64_t>& cuts) {
  if (dist.size() == 1) return std::make_unique<IdentityReducer>();
  // Host memory (the CPU backends'), MPI reads directly.
  if (device.capabilities().host_memory) return make_mpi_reducer(&device, dist, type, options, elements, cuts);
  if (!nccl_built())
    throw InternalError(cat("reducing gradients in GPU memory across ", dist.size(),
                            " ranks needs the NCCL reducer, and this build has no NCCL"));
  if (options.shard_optimizer)
    throw_input("distributed: reduction", "shard_optimizer is not built for the NCCL reducer yet");
  // CUDA device -1: the current one, which the backend set when it was made.
  return make_nccl_reducer(device, dist, type, options, -1, elements);
}

std::unique_ptr<GradReducer> make_grad_reducer(Device& device, DType type, DistContext& dist) {
  return make_grad_reducer(device, type, dist, {}, 0, {});
}

}  // namespace bertperf
