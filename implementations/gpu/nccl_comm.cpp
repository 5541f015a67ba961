// NCCL's communicators (nccl_comm.h).
#include "gpu/nccl_comm.h"

#include <nccl.h>

#include <cstring>

#include "core/errors.h"
#include "gpu/vendor.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "the NCCL transport needs NCCL 2.18 or newer (ncclCommSplit)"
#endif

// A failed call throws InternalError "<expr>: NCCL: <message>" with file:line, as CUDA_CHECK (vendor.h).
#define NCCL_CHECK(call)                                                                             \
  do {                                                                                               \
    const ncclResult_t bert_nccl_status_ = (call);                                                   \
    BERT_CHECK_GEN(call, bert_nccl_status_ == ncclSuccess,                                           \
                   ::bertperf::cat("NCCL: ", ncclGetErrorString(bert_nccl_status_)));               \
  } while (0)

namespace bertperf::gpu {

static_assert(sizeof(ncclUniqueId) == sizeof(NcclId), "ncclUniqueId is 128 bytes");

namespace {

ncclDataType_t nccl_type(DType type) {
  switch (type) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::BF16: return ncclBfloat16;
    case DType::E4M3: case DType::E5M2: return ncclUint8;  // moved, never summed
  }
  return ncclFloat32;
}

ncclComm_t as_comm(void* comm) { return static_cast<ncclComm_t>(comm); }
cudaStream_t as_stream(Stream& stream) { return native(stream); }

// The NCCL calls `issue` makes, as one group (one launch); the group is closed also when one of them fails.
template <typename Issue>
void grouped(Issue&& issue) {
  NCCL_CHECK(ncclGroupStart());
  try {
    issue();
  } catch (...) {
    ncclGroupEnd();
    throw;
  }
  NCCL_CHECK(ncclGroupEnd());
}

// `call(at, count, r)` on each non-empty part, data[parts[r]] (the part rank r roots), as one group.
template <typename Call>
void each_part(void* data, const std::vector<FlatRange>& parts, int ranks, DType type, Call&& call) {
  BERT_CHECK(static_cast<int>(parts.size()) == ranks, parts.size(), " parts for ", ranks, " ranks");
  auto* bytes = static_cast<unsigned char*>(data);
  grouped([&] {
    for (int r = 0; r < ranks; ++r)
      if (parts[r].size() != 0) call(bytes + parts[r].begin * dtype_size(type), parts[r].size(), r);
  });
}

}  // namespace

NcclId nccl_unique_id() {
  ncclUniqueId id;
  NCCL_CHECK(ncclGetUniqueId(&id));
  NcclId out;
  std::memcpy(out.data(), &id, sizeof id);
  return out;
}

std::string nccl_version() {
  int v = 0;
  ncclGetVersion(&v);
  return cat(v / 10000, ".", v / 100 % 100, ".", v % 100);
}

NcclComm::NcclComm(const NcclId& id, int ranks, int rank, int device) : rank_(rank), size_(ranks) {
  const int devices = device_count();
  BERT_CHECK(device >= 0 && device < devices, "GPU ", device, " is not one of the ", devices, " here");
  set_device(device);
  ncclUniqueId nid;
  std::memcpy(&nid, id.data(), sizeof nid);
  ncclComm_t comm = nullptr;
  NCCL_CHECK(ncclCommInitRank(&comm, ranks, nid, rank));
  comm_ = comm;
}

NcclComm::~NcclComm() {
  if (comm_) ncclCommDestroy(as_comm(comm_));
}

std::unique_ptr<NcclComm> NcclComm::split(int color, int key) {
  std::unique_ptr<NcclComm> part(new NcclComm);
  ncclComm_t comm = nullptr;
  NCCL_CHECK(ncclCommSplit(as_comm(comm_), color, key, &comm, nullptr));
  BERT_CHECK(comm != nullptr, "ncclCommSplit left this rank out of the communicator of color ", color);
  part->comm_ = comm;
  NCCL_CHECK(ncclCommUserRank(comm, &part->rank_));
  NCCL_CHECK(ncclCommCount(comm, &part->size_));
  return part;
}

void NcclComm::all_reduce(void* data, size_t count, DType type, Stream& stream) {
  NCCL_CHECK(ncclAllReduce(data, data, count, nccl_type(type), ncclSum, as_comm(comm_), as_stream(stream)));
}

void NcclComm::reduce_scatter(void* data, size_t count, DType type, Stream& stream) {
  // In place: NCCL's receive buffer is the send buffer at this rank's part.
  auto* bytes = static_cast<unsigned char*>(data);
  NCCL_CHECK(ncclReduceScatter(data, bytes + rank_ * count * dtype_size(type), count, nccl_type(type), ncclSum,
                                    as_comm(comm_), as_stream(stream)));
}

void NcclComm::all_gather(void* data, size_t count, DType type, Stream& stream) {
  // In place: NCCL's send buffer is the receive buffer at this rank's part.
  auto* bytes = static_cast<unsigned char*>(data);
  NCCL_CHECK(ncclAllGather(bytes + rank_ * count * dtype_size(type), data, count, nccl_type(type),
                                as_comm(comm_), as_stream(stream)));
}

void NcclComm::reduce_parts(void* data, const std::vector<FlatRange>& parts, DType type, Stream& stream) {
  each_part(data, parts, size_, type, [&](void* at, size_t count, int r) {
    NCCL_CHECK(ncclReduce(at, at, count, nccl_type(type), ncclSum, r, as_comm(comm_), as_stream(stream)));
  });
}

void NcclComm::broadcast_parts(void* data, const std::vector<FlatRange>& parts, DType type, Stream& stream) {
  each_part(data, parts, size_, type, [&](void* at, size_t count, int r) {
    NCCL_CHECK(ncclBroadcast(at, at, count, nccl_type(type), r, as_comm(comm_), as_stream(stream)));
  });
}

}  // namespace bertperf::gpu
