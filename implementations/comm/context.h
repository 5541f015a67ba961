// The distributed context of a job: who this process is among the ranks and the host work they share (seeds,
// statuses, barriers). Built once in main: with MPI built in and the process started by a launcher (Open MPI's
// mpirun, Slurm's srun; launcher.h reads what the environment says, here and nowhere else), it spans the job's
// ranks; otherwise it is a world of one and every collective is the identity, so the trainer has one code path for
// one core and for many nodes.
//
// Under a launcher, MPI starts with MPI_THREAD_MULTIPLE where the library has it (FUNNELED at least: only the main
// thread calls MPI), and must see as many ranks as the launcher says it started; a multi-task launch of a build
// without MPI, or an srun step without an MPI plugin (no PMIx or PMI variables), is refused (InputError) rather than
// run as independent single-rank trainings or left to fail inside MPI_Init. The launcher's own account of the
// process (its rank, local rank and size, node and nodes) must agree with MPI's, or the job is refused with one line
// naming the variable; under srun SLURM_NODEID numbers the nodes (the ranks MPI finds sharing memory must share it).
//
// A failure on any rank ends the whole job: abort() takes every rank down (MPI_Abort), and main calls it through
// report_failure when a command fails on a job of more than one rank. With MPI_THREAD_MULTIPLE, a failing rank
// first sends its one-line message to rank 0, whose watcher thread hands it to the hook set with on_peer_failure
// (run-once logs the run as aborted there) and then ends the job; a rank that dies outright (SIGKILL) is the
// launcher's to report, and it ends the others. A whole node that vanishes (its host down, or its launcher daemon
// gone with its ranks) leaves the others waiting in MPI, which over TCP neither fails nor returns, and Slurm notices
// it only after its own timeouts; so every other node's first rank tells rank 0 each second that it is there, and a
// node not heard from for 10 s is reported to the same hook as gone ("node N (HOST) is gone: ...") before rank 0
// ends the job.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "comm/launcher.h"

namespace bertperf {

class DistContext {
 public:
  // MPI when launched by mpirun or srun (and built with MPI), else a world of one.
  static std::unique_ptr<DistContext> create();
  // A world of one, for tests and single-process tools.
  static std::unique_ptr<DistContext> single();
  ~DistContext();  // finalises MPI (after every user of it, NCCL included, has shut down)
  DistContext(const DistContext&) = delete;
  DistContext& operator=(const DistContext&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_root() const { return rank_ == 0; }
  int local_rank() const { return local_rank_; }  // among the ranks of this node
  int local_size() const { return local_size_; }
  int node() const { return node_; }              // 0 .. nodes()-1
  int nodes() const { return nodes_; }
  // The fewest and the most ranks any node of the job has (equal: every node has as many).
  int fewest_local() const { return fewest_local_; }
  int most_local() const { return most_local_; }
  const std::string& host() const { return host_; }
  bool mpi() const { return mpi_; }
  // How this process was started, as the environment said when the context was made.
  const LaunchIdentity& launch() const { return launch_; }
  // One line for logs: the ranks, nodes and MPI's thread support, or that this is a single process.
  std::string describe() const;
  // The MPI library this build runs on ("Open MPI v4.1.4"), or "" in a build without MPI. Any time, even before
  // MPI_Init.
  static std::string mpi_library_version();

  // In-place sums over ranks of host memory.
  void allreduce_sum(double* data, size_t count);
  void allreduce_sum(float* data, size_t count);
  // Rank 0's value everywhere.
  void broadcast(uint64_t& value);
  void broadcast(void* bytes, size_t count);
  void barrier();
  // Ends every rank of the job with `code`; returns only on a world of one (it does nothing there).
  void abort(int code);
  // On rank 0 of a job with a watcher: `hook(line)` runs on the watcher thread when another rank reports a failure
  // (line: "rank R on HOST: ..."), before the job is ended. Cleared by passing an empty function.
  void on_peer_failure(std::function<void(const std::string& line)> hook);
  // Held by a thread while it makes or frees communicators (the MPI transport does): meanwhile the context's own
  // threads make no MPI call. Open MPI 4.1 runs a communicator's set-up (its context id agreement, its activation and
  // the choice of its collectives) from whichever thread drives MPI's progress, and a start-up crash of a node's first
  // rank (its heartbeat thread polling beside the transport's MPI_Comm_dup and MPI_Comm_split) pointed there; the
  // watcher skips its polls meanwhile and the heartbeat waits. An empty lock where there is no watcher. So a node whose
  // first rank waits more than 10 s inside a communicator's creation for a late rank 0 sends no heartbeat meanwhile,
  // and rank 0 would take it for gone: the transport's communicators are made right after the seed's broadcast, where
  // the ranks' skew is their own set-up's.
  [[nodiscard]] std::unique_lock<std::mutex> quiet();
  // Called by report_failure on a failing rank other than 0: tells rank 0 (bounded wait), then aborts the job.
  [[noreturn]] void fail_job(const std::string& line, int code);

 private:
  DistContext() = default;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, node_ = 0, nodes_ = 1;
  int fewest_local_ = 1, most_local_ = 1;
  std::string host_;
  LaunchIdentity launch_;
  bool mpi_ = false;
  bool finalize_ = false;     // MPI was initialised here, so it is finalised here
  std::string thread_level_;  // what MPI_Init_thread provided
  // The communicator failure messages travel on, on every rank, and rank 0's thread listening on it (context.cpp).
  struct Watcher;
  std::unique_ptr<Watcher> watcher_;
  void watch();      // rank 0
  void heartbeat();  // the other nodes' first ranks
};

// For main's catch block: reports the exception in flight as one line on stderr, "<who>: error: <what>" for bad
// input (exit code 2) or "<who>: <what>" for anything else (1). In a job of several ranks the line starts with
// "rank R on HOST: " and every rank then ends with that code (abort), so one rank's failure never leaves the others
// waiting in a collective. Returns the exit code on a world of one (or when `dist` is null: no context yet).
int report_failure(const std::string& who, DistContext* dist);

// A program's main on the job's context: makes the context, runs `body` on it and returns its exit code, or
// report_failure's for a failure, the context made or not. The context is destroyed last, after everything `body`
// built with MPI.
int run_job(const std::string& who, const std::function<int(DistContext&)>& body);

}  // namespace bertperf
