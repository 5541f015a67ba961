// NCCL's CUDA side, for the NCCL transport (nccl_transport.cpp): communicators on one device and the CUDA stream
// their collectives run on, ordered with a backend's queue through its events (their native handles are CUDA
// events). Nothing here knows MPI (the caller hands in the unique id rank 0 made) or the reduction policy, and this
// header names no CUDA or NCCL type. Built as its own small library where NCCL and the CUDA runtime are found
// (CMakeLists.txt), apart from the CUDA backend.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backends/device.h"
#include "comm/transport.h"

namespace bertperf::cuda {

using NcclId = std::array<char, 128>;  // ncclUniqueId's bytes

// Rank 0's id for a new communicator.
NcclId nccl_unique_id();
// CUDA devices visible here (0 where the driver finds none).
int cuda_device_count();
// "2.28.9".
std::string nccl_version();

// A CUDA stream of its own on the current device, for communication.
class CommStream {
 public:
  CommStream();
  ~CommStream();
  CommStream(const CommStream&) = delete;
  CommStream& operator=(const CommStream&) = delete;

  // Work issued on the stream from now on waits for `cuda_event` (a cudaEvent_t).
  void wait_for(void* cuda_event);
  // Records `cuda_event` (a cudaEvent_t) after everything issued so far on the stream.
  void record(void* cuda_event);
  // Waits on the host for everything issued so far (teardown only).
  void synchronize();
  void* handle() const { return stream_; }  // the cudaStream_t

 private:
  void* stream_ = nullptr;
};

// One NCCL communicator; its collectives are issued on the stream they are handed, in place, on device memory of F32,
// F64 or BF16 elements.
class NcclComm {
 public:
  // Rank `rank` of `ranks` on CUDA device `device` (-1: the current one), which becomes the current device.
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
  void all_reduce(void* data, size_t count, DType type, CommStream& stream);
  // Equal parts of `count`, rank r's at r * count: data[rank's part] = its sum over ranks (ncclReduceScatter).
  void reduce_scatter(void* data, size_t count, DType type, CommStream& stream);
  // Equal parts of `count`: data[r's part] = rank r's, for every r (ncclAllGather).
  void all_gather(void* data, size_t count, DType type, CommStream& stream);
  // Parts of any size: data[parts[r]] summed into rank r's, one ncclReduce to each rank in one group.
  void reduce_parts(void* data, const std::vector<FlatRange>& parts, DType type, CommStream& stream);
  // Parts of any size: data[parts[r]] from rank r to every rank, one ncclBroadcast from each rank in one group.
  void broadcast_parts(void* data, const std::vector<FlatRange>& parts, DType type, CommStream& stream);

 private:
  NcclComm() = default;
  void* comm_ = nullptr;  // the ncclComm_t
  int rank_ = 0, size_ = 1;
};

}  // namespace bertperf::cuda
