// The distributed context (context.h): MPI when built in and launched by mpirun or srun, a world of one otherwise.
#include "dist/context.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>  // program_invocation_short_name
#include <climits>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>

#include "core/errors.h"

#ifdef BERTPERF_HAVE_MPI
#include "dist/mpi_check.h"
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

std::unique_ptr<DistContext> DistContext::single() {
  std::unique_ptr<DistContext> c(new DistContext);
  c->host_ = host_name();
  return c;
}

std::unique_ptr<DistContext> DistContext::create() {
  const Launch launch = launch_from_env();
  std::unique_ptr<DistContext> c = single();
  if (!launch.launched) return c;
#ifndef BERTPERF_HAVE_MPI
  if (launch.several)
    throw_input("", cat("this process is one of several tasks (", launch.source,
                        ") but bertperf was built without MPI; install Open MPI and rebuild, or start a single process"));
  return c;
#else
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
    MPI_CHECK(MPI_Comm_free(&local));
    c->node_ = node[0];
    c->nodes_ = node[1];
  } catch (...) {
    if (c->size_ > 1) report_failure(program_invocation_short_name, c.get());  // ends the job
    throw;
  }
  return c;
#endif
}

DistContext::~DistContext() {
#ifdef BERTPERF_HAVE_MPI
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
  std::cerr << (job ? cat("rank ", dist->rank(), " on ", dist->host(), ": ") : "") << line << std::endl;
  if (job) dist->abort(code);
  return code;
}

}  // namespace bertperf
