// The gradient reducers (reducer.h): the identity for one rank, and for several one reduction policy (buckets,
// hierarchy, shards) over a transport (transport.h), MPI or NCCL.
#include "comm/reducer.h"

#include <algorithm>
#include <utility>

#include "core/errors.h"

namespace bertperf {

const char* reduce_algorithm_name(ReduceAlgorithm algorithm) {
  switch (algorithm) {
    case ReduceAlgorithm::ALLREDUCE: return "allreduce";
    case ReduceAlgorithm::BUCKETED: return "bucketed";
    case ReduceAlgorithm::HIERARCHICAL: return "hierarchical";
  }
  return "unknown";
}

namespace {

class IdentityReducer final : public GradReducer {
 public:
  void finish(void*, size_t) override {}
  void sum(double*, size_t) override {}
  std::string describe() const override { return "none (one rank)"; }
};

// The policy. Every collective goes to the transport, which orders it with the backend's work; finish, sum and
// gather end with join(), so the backend's work after them sees their results.
class Reduction final : public GradReducer {
 public:
  Reduction(std::unique_ptr<Transport> transport, DType type, const ReductionOptions& options, size_t elements,
            const std::vector<int64_t>& cuts)
      : transport_(std::move(transport)),
        type_(type),
        options_(options),
        elements_(elements),
        esize_(dtype_size(type)) {
    Transport& t = *transport_;
    if (options.shard_optimizer) {
      BERT_CHECK(elements > 0, "a sharded reducer needs the flat buffer's size");
      parts_ = split_flat(elements, cuts, t.size(Group::WORLD));
    } else if (options.algorithm == ReduceAlgorithm::BUCKETED) {
      BERT_CHECK(elements > 0, "a bucketed reducer needs the flat buffer's size");
      BERT_CHECK(options.bucket_mb > 0, "bucket_mb must be positive, got ", options.bucket_mb);
      const size_t per = std::max<size_t>(1, static_cast<size_t>(options.bucket_mb * 1048576.0) / esize_);
      for (size_t b = 0; b < elements; b += per) buckets_.push_back({b, std::min(elements, b + per)});
      pending_.resize(buckets_.size());
      started_.resize(buckets_.size());
      reset_buckets();
    } else if (options.algorithm == ReduceAlgorithm::HIERARCHICAL) {
      BERT_CHECK(elements > 0, "a hierarchical reducer needs the flat buffer's size");
      hierarchy_ = even_split(elements, t.size(Group::NODE));
    }
  }

  void ready(void* grads, size_t begin, size_t end) override {
    if (buckets_.empty()) return;
    BERT_CHECK(begin <= end && end <= elements_, "ready range [", begin, ", ", end, ") outside ", elements_);
    // Buckets are equal in size: the ones [begin, end) touches.
    const size_t per = buckets_[0].size();
    for (size_t b = begin / per; b < buckets_.size() && buckets_[b].begin < end; ++b) {
      const size_t overlap = std::min(end, buckets_[b].end) - std::max(begin, buckets_[b].begin);
      pending_[b] -= std::min(pending_[b], overlap);
      if (pending_[b] == 0 && !started_[b]) start(grads, b);
    }
    transport_->progress();
  }

  void finish(void* grads, size_t count) override {
    if (elements_ > 0)
      BERT_CHECK(count == elements_, "the reducer was built for ", elements_, " elements, handed ", count);
    Transport& t = *transport_;
    if (!parts_.empty()) {
      t.reduce_scatter(Group::WORLD, grads, parts_, type_);
    } else if (!buckets_.empty()) {
      for (size_t b = 0; b < buckets_.size(); ++b)
        if (!started_[b]) start(grads, b);
      reset_buckets();
    } else if (!hierarchy_.parts.empty()) {
      hierarchical(grads);
    } else {
      t.all_reduce(Group::WORLD, grads, count, type_);
    }
    t.join();
  }

  void sum(double* values, size_t count) override {
    transport_->all_reduce(Group::WORLD, values, count, DType::F64);
    transport_->join();
  }

  const std::vector<FlatRange>& parts() const override {
    static const std::vector<FlatRange> none;
    return parts_.empty() ? none : parts_;
  }
  FlatRange part(size_t elements) const override {
    return parts_.empty() ? FlatRange{0, elements} : parts_[transport_->rank(Group::WORLD)];
  }

  void gather(void* data, DType type) override {
    if (parts_.empty()) return;
    transport_->all_gather(Group::WORLD, data, parts_, type);
    transport_->join();
  }

  std::string describe() const override {
    const Transport& t = *transport_;
    const std::string over = cat(" over ", t.name(), ", ", dtype_name(type_));
    if (!parts_.empty())
      return cat("sharded (ZeRO-1)", over, ": reduce-scatter into ", parts_.size(), " parts, this rank's ",
                 part(elements_).size(), " of ", elements_, " elements; all-gather of the parameters");
    if (!buckets_.empty())
      return cat("bucketed all-reduce", over, ": ", buckets_.size(), " bucket", buckets_.size() == 1 ? "" : "s",
                 " of up to ", options_.bucket_mb, " MiB, ", t.overlap());
    if (!hierarchy_.parts.empty()) {
      const int nodes = t.size(Group::CROSS), local = t.size(Group::NODE);
      return cat("hierarchical", over, ": reduce-scatter inside each of ", nodes, " node", nodes == 1 ? "" : "s",
                 " of ", local, " ranks, all-reduce across nodes, all-gather");
    }
    return cat("all-reduce", over, ", after the backward");
  }

  std::string not_capturable() const override { return transport_->not_capturable(); }

  std::vector<std::pair<std::string, std::string>> library_versions() const override {
    return transport_->library_versions();
  }

 private:
  void reset_buckets() {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      pending_[b] = buckets_[b].size();
      started_[b] = false;
    }
  }

  void start(void* grads, size_t b) {
    started_[b] = true;
    transport_->all_reduce(Group::WORLD, static_cast<unsigned char*>(grads) + buckets_[b].begin * esize_,
                           buckets_[b].size(), type_);
  }

  void hierarchical(void* grads) {
    Transport& t = *transport_;
    auto* bytes = static_cast<unsigned char*>(grads);
    const FlatRange mine = hierarchy_.parts[t.rank(Group::NODE)];
    const bool local = t.size(Group::NODE) > 1;
    if (local) t.reduce_scatter(Group::NODE, grads, hierarchy_.parts, type_);
    if (t.size(Group::CROSS) > 1) t.all_reduce(Group::CROSS, bytes + mine.begin * esize_, mine.size(), type_);
    if (local) t.all_gather(Group::NODE, grads, hierarchy_.parts, type_);
    const FlatRange tail = hierarchy_.tail;
    if (tail.size() > 0) t.all_reduce(Group::WORLD, bytes + tail.begin * esize_, tail.size(), type_);
  }

  std::unique_ptr<Transport> transport_;
  DType type_;
  ReductionOptions options_;
  size_t elements_, esize_;
  std::vector<FlatRange> parts_;  // sharded: every rank's part
  EvenSplit hierarchy_;           // hierarchical: the node's parts and the tail
  // Bucketed.
  std::vector<FlatRange> buckets_;
  std::vector<size_t> pending_;  // elements not yet reported ready, per bucket
  std::vector<bool> started_;
};

}  // namespace

TransportOptions transport_options(const ReductionOptions& options) {
  const bool plain = !options.shard_optimizer;
  return {.overlap = plain && options.algorithm == ReduceAlgorithm::BUCKETED,
          .thread = options.thread,
          .hierarchy = plain && options.algorithm == ReduceAlgorithm::HIERARCHICAL};
}

std::unique_ptr<GradReducer> make_reducer(std::unique_ptr<Transport> transport, DType type,
                                          const ReductionOptions& options, size_t elements,
                                          const std::vector<int64_t>& cuts) {
  return std::make_unique<Reduction>(std::move(transport), type, options, elements, cuts);
}

std::unique_ptr<GradReducer> make_mpi_reducer(Device* device, DistContext& dist, DType type,
                                              const ReductionOptions& options, size_t elements,
                                              const std::vector<int64_t>& cuts) {
  if (type != DType::F32 && type != DType::F64)
    throw InternalError("the MPI gradient reducer sums fp32 or fp64 gradients, not bf16");
  if (!dist.mpi()) {
    BERT_CHECK(dist.size() == 1, "an MPI reducer for ", dist.size(), " ranks without MPI");
    return std::make_unique<IdentityReducer>();
  }
  return make_reducer(make_mpi_transport(device, dist, transport_options(options)), type, options, elements, cuts);
}

std::unique_ptr<GradReducer> make_nccl_reducer(Device& device, DistContext& dist, DType type,
                                               const ReductionOptions& options, size_t elements,
                                               const std::vector<int64_t>& cuts) {
  return make_reducer(make_nccl_transport(device, dist, transport_options(options)), type, options, elements, cuts);
}

std::unique_ptr<GradReducer> make_grad_reducer(Device& device, DType type, DistContext& dist,
                                               const ReductionOptions& options, size_t elements,
                                               const std::vector<int64_t>& cuts) {
  if (dist.size() == 1) return std::make_unique<IdentityReducer>();
  // The transport the backend declares for its memory: MPI for host memory (the CPU backends'), NCCL for a GPU's.
  switch (device.capabilities().collectives) {
    case Collectives::MPI: return make_mpi_reducer(&device, dist, type, options, elements, cuts);
    case Collectives::NCCL:
      if (!nccl_built())
        throw InternalError(cat("reducing gradients in GPU memory across ", dist.size(),
                                " ranks needs the NCCL transport, and this build has no NCCL"));
      return make_nccl_reducer(device, dist, type, options, elements, cuts);
  }
  throw InternalError("a backend declares no collective transport");
}

std::unique_ptr<GradReducer> make_grad_reducer(Device& device, DType type, DistContext& dist) {
  return make_grad_reducer(device, type, dist, {}, 0, {});
}

}  // namespace bertperf
