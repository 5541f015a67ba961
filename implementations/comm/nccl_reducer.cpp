// The NCCL reducer (reducer.h) over device memory: a communicator over the job's ranks (comm/nccl_comm.h), its
// unique id made by rank 0 and broadcast over MPI, its own CUDA stream, and buckets like the MPI reducer's. A
// bucket's all-reduce is queued on the communication stream behind the backend's work (an event the backend
// records) when ready() reports it final; finish queues the rest and makes the backend wait for them (an event
// recorded on the communication stream), so nothing waits on the host (a captured step replays it). Built where NCCL, the CUDA runtime and MPI are found.
#include "comm/reducer.h"

#include "core/errors.h"

#if defined(BERTPERF_HAVE_NCCL) && defined(BERTPERF_HAVE_MPI)

#include <algorithm>

#include "comm/nccl_comm.h"
#include "comm/mpi_check.h"

namespace bertperf {

namespace {

class NcclReducer final : public GradReducer {
 public:
  NcclReducer(Device& device, DistContext& dist, DType type, const ReductionOptions& options, int cuda_device,
              size_t elements)
      : device_(device),
        type_(type),
        elements_(elements),
        esize_(dtype_size(type)),
        comm_(make_comm(dist, cuda_device)),
        computed_(device.make_event()),
        reduced_(device.make_event()) {
    BERT_CHECK(computed_->native() && reduced_->native(), "the NCCL reducer needs a backend with CUDA events");
    BERT_CHECK(type == DType::F32 || type == DType::BF16, "the NCCL reducer sums fp32 or bf16, not ",
               dtype_name(type));
    if (options.algorithm == ReduceAlgorithm::BUCKETED && elements > 0) {
      BERT_CHECK(options.bucket_mb > 0, "bucket_mb must be positive, got ", options.bucket_mb);
      const size_t per = std::max<size_t>(1, static_cast<size_t>(options.bucket_mb * 1048576.0) / esize_);
      for (size_t b = 0; b < elements; b += per) buckets_.push_back({b, std::min(elements, b + per)});
      pending_.resize(buckets_.size());
      started_.resize(buckets_.size());
      reset();
    }
  }

  void ready(void* grads, size_t begin, size_t end) override {
    if (buckets_.empty()) return;
    BERT_CHECK(begin <= end && end <= elements_, "ready range [", begin, ", ", end, ") outside ", elements_);
    const size_t per = buckets_[0].size();
    for (size_t b = begin / per; b < buckets_.size() && buckets_[b].begin < end; ++b) {
      const size_t overlap = std::min(end, buckets_[b].end) - std::max(begin, buckets_[b].begin);
      pending_[b] -= std::min(pending_[b], overlap);
      if (pending_[b] == 0 && !started_[b]) start(grads, b);
    }
  }

  void finish(void* grads, size_t count) override {
    if (buckets_.empty()) {
      after_compute();
      comm_->all_reduce(grads, count, type_);
    } else {
      BERT_CHECK(count == elements_, "the reducer was built for ", elements_, " elements, handed ", count);
      for (size_t b = 0; b < buckets_.size(); ++b)
        if (!started_[b]) start(grads, b);
      reset();
    }
    before_compute();
  }

  void sum(double* values, size_t count) override {
    after_compute();
    comm_->all_reduce(values, count, DType::F64);
    before_compute();
  }

  std::vector<std::pair<std::string, std::string>> library_versions() const override {
    std::string nccl = cuda::NcclComm::version();  // "NCCL 2.28.9"
    if (nccl.rfind("NCCL ", 0) == 0) nccl = nccl.substr(5);
    return {{"NCCL", nccl}};
  }

  std::string describe() const override {
    const std::string kind =
        buckets_.empty() ? std::string("all-reduce") : cat("bucketed all-reduce (", buckets_.size(), " buckets)");
    return cat(kind,
               " over ", cuda::NcclComm::version(), ", ", dtype_name(type_), ", on its own stream");
  }

 private:
  static std::unique_ptr<cuda::NcclComm> make_comm(DistContext& dist, int device) {
    cuda::NcclId id{};
    if (dist.rank() == 0) id = cuda::nccl_unique_id();
    if (dist.mpi() && dist.size() > 1)
      MPI_CHECK(MPI_Bcast(id.data(), static_cast<int>(id.size()), MPI_BYTE, 0, MPI_COMM_WORLD));
    return std::make_unique<cuda::NcclComm>(id, dist.size(), dist.rank(), device);
  }

  // The communication stream waits for the backend's work so far; the backend waits for the communication so far.
  void after_compute() {
    device_.record(*computed_);
    comm_->wait_for(computed_->native());
  }
  void before_compute() {
    comm_->record(reduced_->native());
    device_.wait(*reduced_);
  }

  void start(void* grads, size_t b) {
    started_[b] = true;
    after_compute();
    comm_->all_reduce(static_cast<unsigned char*>(grads) + buckets_[b].begin * esize_, buckets_[b].size(), type_);
  }

  void reset() {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      pending_[b] = buckets_[b].size();
      started_[b] = false;
    }
  }

  Device& device_;
  DType type_;
  size_t elements_, esize_;
  std::unique_ptr<cuda::NcclComm> comm_;
  std::unique_ptr<Event> computed_, reduced_;
  std::vector<FlatRange> buckets_;
  std::vector<size_t> pending_;
  std::vector<bool> started_;
};

}  // namespace

bool nccl_built() { return true; }

std::unique_ptr<GradReducer> make_nccl_reducer(Device& device, DistContext& dist, DType type,
                                               const ReductionOptions& options, int cuda_device, size_t elements) {
  return std::make_unique<NcclReducer>(device, dist, type, options, cuda_device, elements);
}

}  // namespace bertperf

#else

namespace bertperf {

bool nccl_built() { return false; }

std::unique_ptr<GradReducer> make_nccl_reducer(Device&, DistContext&, DType, const ReductionOptions&, int, size_t) {
  throw InternalError("this build has no NCCL (it needs the CUDA toolkit, NCCL and MPI)");
}

}  // namespace bertperf

#endif
