// The distributed context (context.h): MPI when built in and launched by mpirun or srun, a world of one otherwise.
#include "comm/context.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>  // program_invocation_short_name
#include <chrono>
#include <climits>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <mutex>
#include <new>
#include <optional>
#include <thread>

#include "core/errors.h"

#ifdef BERTPERF_HAVE_MPI
#include "comm/mpi_check.h"
#endif

namespace bertperf {

namespace {

// What the environment says about a launcher: whether one started us, and how many tasks (0: it does not say).
struct Launch {
  bool launched = false;
  int tasks = 0;
  bool several = false;  // more than one task
  std::string source;    // the variable that says so
};

Launch launch_from_env() {
  Launch l;
  // Counts first, in the order a nested launch would set them (mpirun inside an srun step: mpirun's count wins).
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}) {
    const char* value = std::getenv(var);
    if (!value) continue;
    l.launched = true;
    char* end = nullptr;
    const long n = std::strtol(value, &end, 10);
    if (end == value || *end != '\0' || n < 1 || n > INT_MAX)
      throw_input(var, cat("'", value, "' is not a number of tasks"));
    l.tasks = static_cast<int>(n);
    l.several = n > 1;
    l.source = cat(var, "=", value);
    return l;
  }
  // PMIx alone gives no count here, but any rank past 0 means several tasks.
  const char* pmix_rank = std::getenv("PMIX_RANK");
  l.launched = pmix_rank != nullptr;
  l.several = l.launched && std::string(pmix_rank) != "0";
  l.source = l.launched ? cat("PMIX_RANK=", pmix_rank) : "";
  return l;
}

// An integer from the environment, or nullopt when the variable is not set.
std::optional<int> env_int(const char* var) {
  const char* value = std::getenv(var);
  if (!value) return std::nullopt;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || n < 0 || n > INT_MAX) throw_input(var, cat("'", value, "' is not a count"));
  return static_cast<int>(n);
}

// What the launcher says this process is (context.h): each field with the variable it came from.
struct Said {
  const char* var = nullptr;
  std::optional<int> value;
};
struct Identity {
  Said rank, local_rank, local_size, size, size2, node, nodes;
};

Identity identity_from_env() {
  Identity id;
  auto said = [](const char* var) { return Said{var, env_int(var)}; };
  auto first = [&](const char* a, const char* b) { return std::getenv(a) ? said(a) : said(b); };
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) {  // mpirun, also when it runs inside a Slurm step
    id.rank = said("OMPI_COMM_WORLD_RANK");
    id.local_rank = said("OMPI_COMM_WORLD_LOCAL_RANK");
    id.local_size = said("OMPI_COMM_WORLD_LOCAL_SIZE");
  } else if (std::getenv("SLURM_STEP_NUM_TASKS")) {  // srun, whatever its PMI
    id.rank = said("SLURM_PROCID");
    id.local_rank = said("SLURM_LOCALID");
    id.size = said("SLURM_STEP_NUM_TASKS");
    id.size2 = said("SLURM_NTASKS");
    id.node = said("SLURM_NODEID");
    id.nodes = first("SLURM_STEP_NUM_NODES", "SLURM_NNODES");
  }
  return id;
}

#ifdef BERTPERF_HAVE_MPI
// Throws when the launcher said something about `what` and it is not MPI's `value`.
void agree(const Said& said, int value, const char* what) {
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
#endif
  std::thread thread;  // rank 0 only
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::function<void(const std::string&)> hook;
};

std::unique_ptr<DistContext> DistContext::single() {
  std::unique_ptr<DistContext> c(new DistContext);
  c->host_ = host_name();
  return c;
}

std::unique_ptr<DistContext> DistContext::create() {
  const Launch launch = launch_from_env();
  [[maybe_unused]] const Identity said = launch.launched ? identity_from_env() : Identity{};
  std::unique_ptr<DistContext> c = single();
  if (!launch.launched) return c;
#ifndef BERTPERF_HAVE_MPI
  if (launch.several)
    throw_input("", cat("this process is one of several tasks (", launch.source,
                        ") but bertperf was built without MPI; install Open MPI and rebuild, or start a single process"));
  return c;
#else
  // srun without an MPI plugin hands its tasks no PMIx or PMI contact, and MPI_Init would fail in many lines.
  if (launch.several && launch.source.rfind("SLURM_STEP_NUM_TASKS", 0) == 0 && !std::getenv("PMIX_RANK") &&
      !std::getenv("PMI_RANK") && !std::getenv("PMI_FD"))
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
      MPI_CHECK(MPI_Comm_free(&leaders));
    }
    MPI_CHECK(MPI_Bcast(node, 2, MPI_INT, 0, local));
    // The launcher's node number, where it gives one, must be one value across the ranks sharing memory.
    int said_node[2] = {said.node.value.value_or(-1), -said.node.value.value_or(-1)};  // min, -max
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, said_node, 2, MPI_INT, MPI_MIN, local));
    MPI_CHECK(MPI_Comm_free(&local));
    c->node_ = node[0];
    c->nodes_ = node[1];
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
    // Failures travel to rank 0 on their own communicator, watched by a thread: only with full thread support.
    if (c->size_ > 1 && provided == MPI_THREAD_MULTIPLE) {
      c->watcher_ = std::make_unique<Watcher>();
      MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c->watcher_->comm));
      MPI_CHECK(MPI_Comm_set_errhandler(c->watcher_->comm, MPI_ERRORS_RETURN));
      if (c->rank_ == 0) c->watcher_->thread = std::thread([d = c.get()] { d->watch(); });
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
  std::vector<char> text(kFailureBytes);
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Irecv(text.data(), kFailureBytes, MPI_CHAR, MPI_ANY_SOURCE, kFailureTag, w.comm, &request) != MPI_SUCCESS)
    return;
  // Polled, not blocked on: a blocking receive would spin a core for the whole run.
  while (!w.stop.load()) {
    int done = 0;
    MPI_Status status;
    if (MPI_Test(&request, &done, &status) != MPI_SUCCESS) return;
    if (done) {
      int length = 0;
      MPI_Get_count(&status, MPI_CHAR, &length);
      // The message: the exit code's digit, then the failing rank's line.
      const std::string message(text.data(), static_cast<size_t>(std::max(0, length)));
      const int code = message.empty() ? 1 : message[0] - '0';
      const std::string line = message.size() > 1 ? message.substr(1) : "a rank failed";
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
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  MPI_Cancel(&request);
  MPI_Wait(&request, MPI_STATUS_IGNORE);
#endif
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
    watcher_->stop = true;
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

}  // namespace bertperf
