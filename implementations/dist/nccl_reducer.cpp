// The NCCL reducer (reducer.h) over device memory: a communicator over the job's ranks, bootstrapped with a unique id
// that rank 0 makes and MPI broadcasts, its own CUDA stream, and buckets like the MPI reducer's. A bucket's
// all-reduce is queued on the communication stream behind an event recorded on the compute stream when ready()
// reports it final; finish queues the rest and makes the compute stream wait for them, so nothing waits on the host
// (a captured step replays it). Compiled only where NCCL and the CUDA runtime are found.
#include "dist/reducer.h"

#include "core/errors.h"

#if defined(BERTPERF_HAVE_NCCL) && defined(BERTPERF_HAVE_MPI)

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>

#include "dist/mpi_check.h"

#define CUDA_CHECK(call)                                                   \
  do {                                                                     \
    const cudaError_t bert_cuda_status_ = (call);                          \
    BERT_CHECK_GEN(call, bert_cuda_status_ == cudaSuccess,                 \
                   ::bertperf::cat(cudaGetErrorString(bert_cuda_status_))); \
  } while (0)

#define NCCL_CHECK(call)                                                                   \
  do {                                                                                     \
    const ncclResult_t bert_nccl_status_ = (call);                                         \
    BERT_CHECK_GEN(call, bert_nccl_status_ == ncclSuccess,                                 \
                   ::bertperf::cat(ncclGetErrorString(bert_nccl_status_))); \
  } while (0)

namespace bertperf {

namespace {

class NcclReducer final : public GradReducer {
 public:
  NcclReducer(DistContext& dist, DType type, const ReductionOptions& options, int device, size_t elements)
      : type_(type), options_(options), elements_(elements), esize_(element_bytes(type)) {
    BERT_CHECK(type == DType::F32 || type == DType::BF16, "the NCCL reducer sums fp32 or bf16, not ",
               element_name(type));
    int devices = 0;
    CUDA_CHECK(cudaGetDeviceCount(&devices));
    BERT_CHECK(device >= 0 && device < devices, "CUDA device ", device, " of ", devices);
    CUDA_CHECK(cudaSetDevice(device));
    ncclUniqueId id{};
    if (dist.rank() == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    if (dist.mpi() && dist.size() > 1)
      MPI_CHECK(MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, MPI_COMM_WORLD));
    NCCL_CHECK(ncclCommInitRank(&comm_, dist.size(), id, dist.rank()));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&ready_event_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&done_event_, cudaEventDisableTiming));
    if (options.algorithm == ReduceAlgorithm::BUCKETED && elements > 0) {
      const size_t per = std::max<size_t>(1, static_cast<size_t>(options.bucket_mb * 1048576.0) / esize_);
      for (size_t b = 0; b < elements; b += per) buckets_.push_back({b, std::min(elements, b + per)});
      pending_.resize(buckets_.size());
      started_.resize(buckets_.size());
      reset();
    }
  }

  ~NcclReducer() override {
    if (stream_) cudaStreamSynchronize(stream_);
    if (comm_) ncclCommDestroy(comm_);
    if (ready_event_) cudaEventDestroy(ready_event_);
    if (done_event_) cudaEventDestroy(done_event_);
    if (stream_) cudaStreamDestroy(stream_);
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
      NCCL_CHECK(ncclAllReduce(grads, grads, count, nccl_type(type_), ncclSum, comm_, stream_));
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
    NCCL_CHECK(ncclAllReduce(values, values, count, ncclFloat64, ncclSum, comm_, stream_));
    before_compute();
  }

  std::string describe() const override {
    return cat(buckets_.empty() ? "all-reduce" : cat("bucketed all-reduce (", buckets_.size(), " buckets)"),
               " over NCCL ", NCCL_MAJOR, ".", NCCL_MINOR, ".", NCCL_PATCH, ", ", element_name(type_),
               ", on its own stream");
  }

 private:
  static ncclDataType_t nccl_type(DType type) { return type == DType::BF16 ? ncclBfloat16 : ncclFloat32; }

  // The communication stream waits for the work issued so far on the compute stream (the legacy default stream,
  // until the CUDA backend hands out its own), and the compute stream for the communication.
  void after_compute() {
    CUDA_CHECK(cudaEventRecord(ready_event_, compute_));
    CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_event_, 0));
  }
  void before_compute() {
    CUDA_CHECK(cudaEventRecord(done_event_, stream_));
    CUDA_CHECK(cudaStreamWaitEvent(compute_, done_event_, 0));
  }

  void start(void* grads, size_t b) {
    started_[b] = true;
    after_compute();
    auto* data = static_cast<unsigned char*>(grads) + buckets_[b].begin * esize_;
    NCCL_CHECK(ncclAllReduce(data, data, buckets_[b].size(), nccl_type(type_), ncclSum, comm_, stream_));
  }

  void reset() {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      pending_[b] = buckets_[b].size();
      started_[b] = false;
    }
  }

  DType type_;
  ReductionOptions options_;
  size_t elements_, esize_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr, compute_ = nullptr;
  cudaEvent_t ready_event_ = nullptr, done_event_ = nullptr;
  std::vector<FlatRange> buckets_;
  std::vector<size_t> pending_;
  std::vector<bool> started_;
};

}  // namespace

bool nccl_built() { return true; }

std::unique_ptr<GradReducer> make_nccl_reducer(DistContext& dist, DType type, const ReductionOptions& options,
                                               int device, size_t elements) {
  return std::make_unique<NcclReducer>(dist, type, options, device, elements);
}

}  // namespace bertperf

#else

namespace bertperf {

bool nccl_built() { return false; }

std::unique_ptr<GradReducer> make_nccl_reducer(DistContext&, DType, const ReductionOptions&, int, size_t) {
  throw InternalError("this build has no NCCL (it needs the CUDA toolkit, NCCL and MPI)");
}

}  // namespace bertperf

#endif
