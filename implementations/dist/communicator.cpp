// The data-parallel communicator (communicator.h): MPI when built in and launched by an MPI
// launcher, a world of one otherwise.
#include "dist/communicator.h"

#include <cstdlib>
#include <algorithm>

#include "core/errors.h"

#ifdef BERTPERF_HAVE_MPI
#include <mpi.h>
#define MPI_CHECK(call)                                                                   \
  do {                                                                                    \
    const int bert_mpi_status_ = (call);                                                  \
    BERT_CHECK_GEN(call, bert_mpi_status_ == MPI_SUCCESS, ::bertperf::cat("MPI error ", bert_mpi_status_)); \
  } while (0)
#endif

namespace bertperf {

namespace {

// Only a launched job initialises MPI: a plain `bertperf train` stays a single process with no
// MPI start-up cost or launcher warnings.
bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_STEP_NUM_TASKS"}) {
    if (std::getenv(var)) return true;
  }
  return false;
}

}  // namespace

Communicator& Communicator::world() {
  static Communicator instance;
  return instance;
}

Communicator::Communicator() {
#ifdef BERTPERF_HAVE_MPI
  if (!launched_by_mpi()) return;
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    int provided = 0;
    MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
  }
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  mpi_ = true;
#endif
}

Communicator::~Communicator() {
#ifdef BERTPERF_HAVE_MPI
  int finalized = 0;
  if (mpi_ && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Finalize();
#endif
}

#ifdef BERTPERF_HAVE_MPI
namespace {
template <typename T>
void allreduce(T* data, size_t count, MPI_Datatype type) {
  // MPI counts are int: large flat buffers go in chunks.
  constexpr size_t kChunk = size_t(1) << 30;
  for (size_t done = 0; done < count; done += kChunk) {
    const int n = static_cast<int>(std::min(kChunk, count - done));
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + done, n, type, MPI_SUM, MPI_COMM_WORLD));
  }
}
}  // namespace
#endif

void Communicator::allreduce_sum(float* data, size_t count) {
#ifdef BERTPERF_HAVE_MPI
  if (mpi_ && size_ > 1) allreduce(data, count, MPI_FLOAT);
#endif
}

void Communicator::allreduce_sum(double* data, size_t count) {
#ifdef BERTPERF_HAVE_MPI
  if (mpi_ && size_ > 1) allreduce(data, count, MPI_DOUBLE);
#endif
}

void Communicator::broadcast(uint64_t& value) {
#ifdef BERTPERF_HAVE_MPI
  if (mpi_ && size_ > 1) MPI_CHECK(MPI_Bcast(&value, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD));
#endif
}

void Communicator::barrier() {
#ifdef BERTPERF_HAVE_MPI
  if (mpi_ && size_ > 1) MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
#endif
}

}  // namespace bertperf
