// The distributed context (context.h): MPI when built in and launched by mpirun or srun, a world of one otherwise.
#include "comm/context.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>  // program_invocation_short_name
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <mutex>
#include <new>
#include <thread>

#include "core/errors.h"

#ifdef BERTPERF_HAVE_MPI
#include "comm/mpi_check.h"
#endif

namespace bertperf {

namespace {

#ifdef BERTPERF_HAVE_MPI
// Throws when the launcher said something about `what` and it is not MPI's `value`.
void agree(const LaunchIdentity::Said& said, int value, const char* what) {
  if (said.value && *said.value != value)
    throw_input(said.var, cat("the launcher says ", what, " is ", *said.value, " but MPI says ", value,
                              ": the launcher and the MPI library disagree (under srun, try --mpi=pmix)"));
}
#endif

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

#ifdef BERTPERF_HAVE_MPI
const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "SINGLE";
    case MPI_THREAD_FUNNELED: return "FUNNELED";
    case MPI_THREAD_SERIALIZED: return "SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MULTIPLE";
  }
  return "unknown";
}

constexpr int kFailureTag = 7001;
constexpr int kFailureBytes = 4096;  // a failure line is cut to this
// Every node's first rank but rank 0's tells rank 0 it is there (context.h): 1 every kHeartbeat, 0 when it finishes.
constexpr int kHeartbeatTag = 7002;
constexpr std::chrono::seconds kHeartbeat{1};
constexpr std::chrono::seconds kNodeSilence{10};  // a node not heard from for this long is gone
constexpr int kHostBytes = 64;

// A node's first rank as rank 0 knows it, for its watch over the nodes (the bytes MPI gathers).
struct NodeLeader {
  int rank = 0, node = 0;
  char host[kHostBytes] = {};
};

template <typename T>
void allreduce(T* data, size_t count, MPI_Datatype type) {
  // MPI counts are int: large flat buffers go in chunks.
  constexpr size_t kChunk = size_t(1) << 30;
  for (size_t done = 0; done < count; done += kChunk) {
    const int n = static_cast<int>(std::min(kChunk, count - done));
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + done, n, type, MPI_SUM, MPI_COMM_WORLD));
  }
}
#endif

}  // namespace

struct DistContext::Watcher {
#ifdef BERTPERF_HAVE_MPI
  MPI_Comm comm = MPI_COMM_NULL;  // a duplicate of the world: failure messages never meet the job's own traffic
  std::vector<NodeLeader> nodes;  // rank 0: the other nodes' first ranks, which it hears from
  // The buffer of the heartbeat send in flight. Here, not on heartbeat()'s stack: a send the thread could not see
  // complete is freed (MPI_Request_free) and may still read its buffer after the thread has returned.
  int beat = 1;
#endif
  std::thread thread;  // rank 0: watch(); the other nodes' first ranks: heartbeat()
  // Held by the thread for each of its MPI calls, and by quiet() while another thread makes or frees a communicator.
  std::mutex mpi;
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::condition_variable wake;  // ends heartbeat()'s wait
  std::function<void(const std::string&)> hook;
};

std::unique_ptr<DistContext> DistContext::single() {
  std::unique_ptr<DistContext> c(new DistContext);
  c->host_ = host_name();
  return c;
}

std::unique_ptr<DistContext> DistContext::create() {
  const LaunchIdentity launch = read_launch_identity();
  std::unique_ptr<DistContext> c = single();
  c->launch_ = launch;
  if (!launch.launched()) return c;
#ifndef BERTPERF_HAVE_MPI
  if (launch.several)
    throw_input("", cat("this process is one of several tasks (", launch.source,
                        ") but bertperf was built without MPI; install Open MPI and rebuild, or start a single process"));
  return c;
#else
  const LaunchIdentity& said = launch;
  // srun without an MPI plugin hands its tasks no PMIx or PMI contact, and MPI_Init would fail in many lines.
  if (launch.srun_without_pmi)
    throw_input("", cat("this process is one of several tasks (", launch.source,
                        ") but srun gave it no PMIx or PMI contact, so MPI cannot join the tasks: run srun --mpi=pmix"));
  int initialized = 0, provided = MPI_THREAD_SINGLE;
  MPI_CHECK(MPI_Initialized(&initialized));
  if (initialized) {
    MPI_CHECK(MPI_Query_thread(&provided));
  } else {
    MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    c->finalize_ = true;
  }
  c->mpi_ = true;
  c->thread_level_ = thread_level_name(provided);
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &c->size_));
  // From here every rank can abort the job, and must on a failure: the others are in the collectives below.
  try {
    if (launch.tasks > 0 && launch.tasks != c->size_)
      throw_input("",
                  cat("this process is one of ", launch.tasks, " tasks (", launch.source, ") but MPI sees ",
                      c->size_, " rank", c->size_ == 1 ? "" : "s",
                      ": the MPI library does not match the launcher (under srun, try --mpi=pmix)"));
    if (provided < MPI_THREAD_FUNNELED)
      throw InternalError(cat("MPI provides thread support ", c->thread_level_, ", below the FUNNELED bertperf needs"));
    // The ranks that share memory are a node; each node's first rank numbers the nodes in world-rank order.
    MPI_Comm local = MPI_COMM_NULL, leaders = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank_, MPI_INFO_NULL, &local));
    MPI_CHECK(MPI_Comm_rank(local, &c->local_rank_));
    MPI_CHECK(MPI_Comm_size(local, &c->local_size_));
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, c->local_rank_ == 0 ? 0 : MPI_UNDEFINED, c->rank_, &leaders));
    int node[2] = {0, 1};  // index, count
    if (leaders != MPI_COMM_NULL) {
      MPI_CHECK(MPI_Comm_rank(leaders, &node[0]));
      MPI_CHECK(MPI_Comm_size(leaders, &node[1]));
    }
    MPI_CHECK(MPI_Bcast(node, 2, MPI_INT, 0, local));
    // The launcher's node number, where it gives one, must be one value across the ranks sharing memory.
    int said_node[2] = {said.node.value.value_or(-1), -said.node.value.value_or(-1)};  // min, -max
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, said_node, 2, MPI_INT, MPI_MIN, local));
    MPI_CHECK(MPI_Comm_free(&local));
    c->node_ = node[0];
    c->nodes_ = node[1];
    int locals[2] = {-c->local_size_, c->local_size_};  // -fewest, most
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, locals, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    c->fewest_local_ = -locals[0];
    c->most_local_ = locals[1];
    agree(said.rank, c->rank_, "this process's rank");
    agree(said.size, c->size_, "the number of ranks");
    agree(said.size2, c->size_, "the number of ranks");
    agree(said.local_rank, c->local_rank_, "the local rank");
    agree(said.local_size, c->local_size_, "the number of ranks on this node");
    agree(said.nodes, c->nodes_, "the number of nodes");
    if (said.node.value) {
      if (said_node[0] != -said_node[1])
        throw_input(said.node.var, cat("the launcher puts the ranks that share this host's memory on nodes ",
                                       said_node[0], " to ", -said_node[1], ": the launcher and MPI disagree"));
      if (*said.node.value >= c->nodes_)
        throw_input(said.node.var, cat("the launcher says node ", *said.node.value, " but MPI sees ", c->nodes_,
                                       " node", c->nodes_ == 1 ? "" : "s"));
      c->node_ = *said.node.value;
    }
    // Failures travel to rank 0 on their own communicator, watched by a thread, and every other node's first rank
    // tells rank 0 that its node is there: only with full thread support.
    const bool watched = c->size_ > 1 && provided == MPI_THREAD_MULTIPLE;
    std::vector<NodeLeader> nodes;
    if (watched && leaders != MPI_COMM_NULL) {
      NodeLeader mine{c->rank_, c->node_, {}};
      c->host_.copy(mine.host, kHostBytes - 1);
      if (c->rank_ == 0) nodes.resize(static_cast<size_t>(c->nodes_));
      MPI_CHECK(MPI_Gather(&mine, sizeof mine, MPI_BYTE, nodes.data(), sizeof mine, MPI_BYTE, 0, leaders));
      if (!nodes.empty()) nodes.erase(nodes.begin());  // rank 0's own
    }
    if (leaders != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&leaders));
    if (watched) {
      c->watcher_ = std::make_unique<Watcher>();
      c->watcher_->nodes = std::move(nodes);
      MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c->watcher_->comm));
      MPI_CHECK(MPI_Comm_set_errhandler(c->watcher_->comm, MPI_ERRORS_RETURN));
      // From here the thread calls MPI beside this one, each call under watcher_->mpi: a thread that makes or frees
      // a communicator holds that lock (quiet()), so communicator set-up never runs beside the thread's calls.
      if (c->rank_ == 0)
        c->watcher_->thread = std::thread([d = c.get()] { d->watch(); });
      else if (c->local_rank_ == 0)
        c->watcher_->thread = std::thread([d = c.get()] { d->heartbeat(); });
    }
  } catch (...) {
    if (c->size_ > 1) report_failure(program_invocation_short_name, c.get());  // ends the job
    throw;
  }
  return c;
#endif
}

void DistContext::watch() {
#ifdef BERTPERF_HAVE_MPI
  Watcher& w = *watcher_;
  // Ends the job from here, after the hook has had the line.
  auto end_job = [&](const std::string& line, int code) {
    {
      std::lock_guard<std::mutex> lock(w.mutex);
      try {
        if (w.hook) w.hook(line);
      } catch (...) {
      }
    }
    std::cerr.flush();
    MPI_Abort(MPI_COMM_WORLD, code > 0 && code < 10 ? code : 1);
    std::_Exit(code);
  };
  std::vector<char> text(kFailureBytes);
  MPI_Request failure = MPI_REQUEST_NULL, beat = MPI_REQUEST_NULL;
  // When each other node was last heard from; a node that said it finished is no longer watched.
  using Clock = std::chrono::steady_clock;
  std::vector<Clock::time_point> heard(w.nodes.size(), Clock::now());
  std::vector<bool> finished(w.nodes.size(), false);
  int alive = 0;
  {
    std::lock_guard<std::mutex> calls(w.mpi);
    if (MPI_Irecv(text.data(), kFailureBytes, MPI_CHAR, MPI_ANY_SOURCE, kFailureTag, w.comm, &failure) != MPI_SUCCESS)
      return;
    if (!w.nodes.empty() &&
        MPI_Irecv(&alive, 1, MPI_INT, MPI_ANY_SOURCE, kHeartbeatTag, w.comm, &beat) != MPI_SUCCESS)
      beat = MPI_REQUEST_NULL;
  }
  // Polled, not blocked on: a blocking receive would spin a core for the whole run.
  for (; !w.stop.load(); std::this_thread::sleep_for(std::chrono::milliseconds(20))) {
    // While another thread makes a communicator (quiet()), this poll is skipped whole: no MPI call, and no node judged
    // silent, since its heartbeats wait unread.
    std::unique_lock<std::mutex> calls(w.mpi, std::try_to_lock);
    if (!calls.owns_lock()) continue;
    int done = 0;
    MPI_Status status;
    if (MPI_Test(&failure, &done, &status) != MPI_SUCCESS) return;
    if (done) {
      int length = 0;
      MPI_Get_count(&status, MPI_CHAR, &length);
      // The message: the exit code's digit, then the failing rank's line.
      const std::string message(text.data(), static_cast<size_t>(std::max(0, length)));
      const int code = message.empty() ? 1 : message[0] - '0';
      end_job(message.size() > 1 ? message.substr(1) : "a rank failed", code);
    }
    // Every heartbeat that has come (all of them, before any node is judged: this thread may have slept long).
    while (beat != MPI_REQUEST_NULL) {
      if (MPI_Test(&beat, &done, &status) != MPI_SUCCESS || !done) break;
      for (size_t n = 0; n < w.nodes.size(); ++n)
        if (w.nodes[n].rank == status.MPI_SOURCE) {
          heard[n] = Clock::now();
          finished[n] = finished[n] || alive == 0;
        }
      if (MPI_Irecv(&alive, 1, MPI_INT, MPI_ANY_SOURCE, kHeartbeatTag, w.comm, &beat) != MPI_SUCCESS)
        beat = MPI_REQUEST_NULL;
    }
    for (size_t n = 0; n < w.nodes.size(); ++n) {
      const auto silent = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - heard[n]);
      if (finished[n] || silent < kNodeSilence) continue;
      const NodeLeader& lost = w.nodes[n];
      const std::string line = cat("node ", lost.node, " (", lost.host, ") is gone: its first rank, ", lost.rank,
                                   ", has not been heard from for ", silent.count(), " s");
      std::cerr << "rank 0 on " << host_ << ": " << line << std::endl;
      end_job(line, 1);
    }
  }
  std::lock_guard<std::mutex> calls(w.mpi);
  for (MPI_Request* r : {&failure, &beat})
    if (*r != MPI_REQUEST_NULL) {
      MPI_Cancel(r);
      MPI_Wait(r, MPI_STATUS_IGNORE);
    }
#endif
}

void DistContext::heartbeat() {
#ifdef BERTPERF_HAVE_MPI
  Watcher& w = *watcher_;
  int& message = w.beat;
  MPI_Request request = MPI_REQUEST_NULL;
  // One heartbeat at a time: a beat whose send has not completed yet (rank 0 busy) is not doubled.
  auto send = [&](int value) {
    int done = 1;
    if (request != MPI_REQUEST_NULL && MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return;
    if (!done) return;
    message = value;
    if (MPI_Isend(&message, 1, MPI_INT, 0, kHeartbeatTag, w.comm, &request) != MPI_SUCCESS) request = MPI_REQUEST_NULL;
  };
  {
    std::unique_lock<std::mutex> lock(w.mutex);
    while (!w.stop.load()) {
      lock.unlock();
      {
        std::lock_guard<std::mutex> calls(w.mpi);
        send(1);
      }
      lock.lock();
      w.wake.wait_for(lock, kHeartbeat, [&] { return w.stop.load(); });
    }
  }
  // Finished: rank 0 stops watching this node. The word goes out within a bounded wait, or not at all.
  std::lock_guard<std::mutex> calls(w.mpi);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  int done = 0;
  while (request != MPI_REQUEST_NULL && !done && std::chrono::steady_clock::now() < deadline) {
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (request == MPI_REQUEST_NULL || done) {
    send(0);
    done = 0;
    while (request != MPI_REQUEST_NULL && !done && std::chrono::steady_clock::now() < deadline) {
      if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
      if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (request != MPI_REQUEST_NULL && !done) MPI_Request_free(&request);  // completes, or not, on its own
#endif
}

std::unique_lock<std::mutex> DistContext::quiet() {
  if (!watcher_) return {};
  return std::unique_lock<std::mutex>(watcher_->mpi);
}

void DistContext::on_peer_failure(std::function<void(const std::string& line)> hook) {
  if (!watcher_) return;
  std::lock_guard<std::mutex> lock(watcher_->mutex);
  watcher_->hook = std::move(hook);
}

void DistContext::fail_job(const std::string& line, int code) {
#ifdef BERTPERF_HAVE_MPI
  if (watcher_ && rank_ != 0) {
    // Rank 0 ends the job once it has the line; should it not (dead, or finished), this rank does after a while.
    const std::string message = cat(char('0' + std::clamp(code, 1, 9)), line.substr(0, kFailureBytes - 1));
    MPI_Request request = MPI_REQUEST_NULL;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    if (MPI_Isend(message.data(), static_cast<int>(message.size()), MPI_CHAR, 0, kFailureTag, watcher_->comm,
                  &request) == MPI_SUCCESS) {
      for (int done = 0; !done && std::chrono::steady_clock::now() < deadline;) {
        if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
        if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      std::this_thread::sleep_until(deadline);
    }
  }
#endif
  abort(code);
  std::_Exit(code);
}

DistContext::~DistContext() {
#ifdef BERTPERF_HAVE_MPI
  if (watcher_) {
    {
      std::lock_guard<std::mutex> lock(watcher_->mutex);
      watcher_->stop = true;
    }
    watcher_->wake.notify_all();
    if (watcher_->thread.joinable()) watcher_->thread.join();
    int finalized = 0;
    if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Comm_free(&watcher_->comm);
  }
  int finalized = 0;
  if (finalize_ && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Finalize();
#endif
}

std::string DistContext::describe() const {
  if (!mpi_) return cat("a single process on ", host_, " (no MPI)");
  return cat("MPI, ", size_, " rank", size_ == 1 ? "" : "s", " on ", nodes_, " node", nodes_ == 1 ? "" : "s",
             ", thread support ", thread_level_, "; this is rank ", rank_, ", local rank ", local_rank_, " of ",
             local_size_, " on node ", node_, " (", host_, ")");
}

std::string DistContext::mpi_library_version() {
#ifdef BERTPERF_HAVE_MPI
  // "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, ..." -> "Open MPI v4.1.4" (the text before the first
  // comma or line break). MPI allows the call before MPI_Init and after MPI_Finalize.
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return "unknown";
  std::string version(text, static_cast<size_t>(std::max(0, length)));
  version = version.substr(0, version.find_first_of(",\n"));
  while (!version.empty() && (version.back() == ' ' || version.back() == '\0')) version.pop_back();
  return version.empty() ? "unknown" : version;
#else
  return "";
#endif
}

void DistContext::allreduce_sum(double* data, size_t count) {
#ifdef BERTPERF_HAVE_MPI
  if (mpi_ && size_ > 1) allreduce(data, count, MPI_DOUBLE);
#endif
}

void DistContext::allreduce_sum(float* data, size_t count) {
#ifdef BERTPERF_HAVE_MPI
  if (mpi_ && size_ > 1) allreduce(data, count, MPI_FLOAT);
#endif
}

void DistContext::broadcast(uint64_t& value) {
#ifdef BERTPERF_HAVE_MPI
  if (mpi_ && size_ > 1) MPI_CHECK(MPI_Bcast(&value, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD));
#endif
}

void DistContext::broadcast(void* bytes, size_t count) {
#ifdef BERTPERF_HAVE_MPI
  if (mpi_ && size_ > 1) {
    BERT_CHECK(count <= static_cast<size_t>(INT_MAX), "a broadcast of ", count, " bytes");
    MPI_CHECK(MPI_Bcast(bytes, static_cast<int>(count), MPI_BYTE, 0, MPI_COMM_WORLD));
  }
#endif
}

void DistContext::barrier() {
#ifdef BERTPERF_HAVE_MPI
  if (mpi_ && size_ > 1) MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
#endif
}

void DistContext::abort(int code) {
#ifdef BERTPERF_HAVE_MPI
  if (mpi_ && size_ > 1) {
    std::cerr.flush();
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; should a library's do, this rank still ends
  }
#endif
}

int report_failure(const std::string& who, DistContext* dist) {
  int code = 1;
  std::string line;
  try {
    throw;
  } catch (const InputError& e) {
    code = 2;
    line = cat(who, ": error: ", e.what());
  } catch (const std::bad_alloc&) {
    line = cat(who, ": error: out of memory");
  } catch (const std::exception& e) {
    line = cat(who, ": ", e.what());
  } catch (...) {
    line = cat(who, ": unknown error");
  }
  const bool job = dist && dist->size() > 1;
  if (job) line = cat("rank ", dist->rank(), " on ", dist->host(), ": ", line);
  std::cerr << line << std::endl;
  if (job) dist->fail_job(line, code);
  return code;
}

int run_job(const std::string& who, const std::function<int(DistContext&)>& body) {
  std::unique_ptr<DistContext> dist;
  try {
    dist = DistContext::create();
    return body(*dist);
  } catch (...) {
    return report_failure(who, dist.get());
  }
}

}  // namespace bertperf
