// The data-parallel communicator: rank, world size, gradient all-reduce and host-side agreement
// (seeds). With MPI built in and the process started by mpirun (or Slurm's launcher), it spans all
// ranks; otherwise it is a world of one and every collective is the identity, so the trainer has
// one code path for one core and for many nodes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace bertperf {

class Communicator {
 public:
  // The process-wide communicator; initialises MPI on first use when launched as an MPI job.
  static Communicator& world();

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_root() const { return rank_ == 0; }

  // In-place sum over ranks.
  void allreduce_sum(float* data, size_t count);
  void allreduce_sum(double* data, size_t count);
  // Rank 0's value everywhere.
  void broadcast(uint64_t& value);
  void barrier();

  ~Communicator();

 private:
  Communicator();
  int rank_ = 0;
  int size_ = 1;
  bool mpi_ = false;
};

}  // namespace bertperf
