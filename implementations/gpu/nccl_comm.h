// NCCL's communicators, for the NCCL transport (comm/nccl_transport.cpp): collectives on one device, issued on a
// stream of the GPU runtime (runtime.h). Nothing here knows MPI (the caller hands in the unique id rank 0 made) or the
// reduction policy, and this header names no CUDA or NCCL type. Built as its own small library where NCCL is found
// (CMakeLists.txt), so the GPU backend does not link NCCL.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backends/device.h"
#include "core/tensor_table.h"
#include "gpu/runtime.h"

namespace bertperf::gpu {

using NcclId = std::array<char, 128>;  // ncclUniqueId's bytes

// Rank 0's id for a new communicator.
NcclId nccl_unique_id();
// "2.28.9".
std::string nccl_version();

// One NCCL communicator; its collectives are issued on the stream they are handed, in place, on device memory of F32,
// F64 or BF16 elements.
class NcclComm {
 public:
  // Rank `rank` of `ranks` on device `device`, which becomes the current device.
  NcclComm(const NcclId& id, int ranks, int rank, int device);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // The communicator of the ranks that pass this `color`, ordered by `key` (ncclCommSplit: every rank of this one
  // calls it).
  std::unique_ptr<NcclComm> split(int color, int key);
  int rank() const { return rank_; }
  int size() const { return size_; }

  // data[0, count) = the sum over ranks.
  void all_reduce(void* data, size_t count, DType type, Stream& stream);
  // Equal parts of `count`, rank r's at r * count: data[rank's part] = its sum over ranks (ncclReduceScatter).
  void reduce_scatter(void* data, size_t count, DType type, Stream& stream);
  // Equal parts of `count`: data[r's part] = rank r's, for every r (ncclAllGather).
  void all_gather(void* data, size_t count, DType type, Stream& stream);
  // Parts of any size: data[parts[r]] summed into rank r's, one ncclReduce to each rank in one group.
  void reduce_parts(void* data, const std::vector<FlatRange>& parts, DType type, Stream& stream);
  // Parts of any size: data[parts[r]] from rank r to every rank, one ncclBroadcast from each rank in one group.
  void broadcast_parts(void* data, const std::vector<FlatRange>& parts, DType type, Stream& stream);

 private:
  NcclComm() = default;
  void* comm_ = nullptr;  // the ncclComm_t
  int rank_ = 0, size_ = 1;
};

}  // namespace bertperf::gpu
