// NCCL's CUDA side, for the NCCL gradient reducer (comm/nccl_reducer.cpp): a communicator over a job's ranks on one
// device, with its own stream, ordered after and before the backend's work through the backend's events (their
// native handles are CUDA events). Nothing here knows
// MPI (the caller hands in the unique id rank 0 made), and this header names no CUDA type. Built as its own small
// library where NCCL and the CUDA runtime are found (CMakeLists.txt), apart from the CUDA backend.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <string>

#include "backends/backend.h"

namespace bertperf::cuda {

using NcclId = std::array<char, 128>;  // ncclUniqueId's bytes

// Rank 0's id for a new communicator.
NcclId nccl_unique_id();
// CUDA devices visible here (0 where the driver finds none).
int cuda_device_count();

class NcclComm {
 public:
  // Rank `rank` of `ranks` on CUDA device `device` (-1: the current one).
  NcclComm(const NcclId& id, int ranks, int rank, int device);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // Work issued on the communication stream from now on waits for `cuda_event` (a cudaEvent_t).
  void wait_for(void* cuda_event);
  // Records `cuda_event` (a cudaEvent_t) after everything issued so far on the communication stream.
  void record(void* cuda_event);
  // In-place sum over ranks of `count` elements (F32, BF16 or F64) of device memory, on the communication stream.
  void all_reduce(void* data, size_t count, DType type);
  // "NCCL 2.28.9".
  static std::string version();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bertperf::cuda
