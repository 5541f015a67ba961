// NCCL communicator, stream and events (nccl_comm.h).
#include "comm/nccl_comm.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>

#include "core/errors.h"

#define BERT_CUDA_CHECK(call)                                                                                 \
  do {                                                                                                        \
    const cudaError_t bert_cuda_status_ = (call);                                                             \
    BERT_CHECK_GEN(call, bert_cuda_status_ == cudaSuccess, ::bertperf::cat(cudaGetErrorString(bert_cuda_status_))); \
  } while (0)

#define BERT_NCCL_CHECK(call)                                                                                 \
  do {                                                                                                        \
    const ncclResult_t bert_nccl_status_ = (call);                                                            \
    BERT_CHECK_GEN(call, bert_nccl_status_ == ncclSuccess, ::bertperf::cat(ncclGetErrorString(bert_nccl_status_))); \
  } while (0)

namespace bertperf::cuda {

static_assert(sizeof(ncclUniqueId) == sizeof(NcclId), "ncclUniqueId is 128 bytes");

struct NcclComm::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  ~Impl() {
    if (stream) cudaStreamSynchronize(stream);
    if (comm) ncclCommDestroy(comm);
    if (stream) cudaStreamDestroy(stream);
  }
};

NcclId nccl_unique_id() {
  ncclUniqueId id;
  BERT_NCCL_CHECK(ncclGetUniqueId(&id));
  NcclId out;
  std::memcpy(out.data(), &id, sizeof id);
  return out;
}

int cuda_device_count() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess ? devices : 0;
}

NcclComm::NcclComm(const NcclId& id, int ranks, int rank, int device)
    : impl_(std::make_unique<Impl>()) {
  const int devices = cuda_device_count();
  if (device < 0) BERT_CUDA_CHECK(cudaGetDevice(&device));
  BERT_CHECK(device < devices, "CUDA device ", device, " is not one of the ", devices, " here");
  BERT_CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId nid;
  std::memcpy(&nid, id.data(), sizeof nid);
  BERT_NCCL_CHECK(ncclCommInitRank(&impl_->comm, ranks, nid, rank));
  BERT_CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
}

NcclComm::~NcclComm() = default;

void NcclComm::wait_for(void* cuda_event) {
  BERT_CUDA_CHECK(cudaStreamWaitEvent(impl_->stream, static_cast<cudaEvent_t>(cuda_event), 0));
}

void NcclComm::record(void* cuda_event) {
  BERT_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(cuda_event), impl_->stream));
}

void NcclComm::all_reduce(void* data, size_t count, DType type) {
  const ncclDataType_t t = type == DType::BF16 ? ncclBfloat16 : type == DType::F64 ? ncclFloat64 : ncclFloat32;
  BERT_NCCL_CHECK(ncclAllReduce(data, data, count, t, ncclSum, impl_->comm, impl_->stream));
}

std::string NcclComm::version() {
  int v = 0;
  ncclGetVersion(&v);
  return cat("NCCL ", v / 10000, ".", v / 100 % 100, ".", v % 100);
}

}  // namespace bertperf::cuda
