// MPI_CHECK, the MPI member of the one check family (core/errors.h), for the files of comm/ that call MPI. The
// context makes MPI return error codes instead of aborting (MPI_ERRORS_RETURN on MPI_COMM_WORLD), so a failed call
// becomes an InternalError with the call, file, line and MPI's own message.
#pragma once

#include <mpi.h>

#include <string>

#include "core/errors.h"

namespace bertperf {

inline std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return cat("MPI error ", code);
  return cat("MPI error ", code, ": ", std::string(text, static_cast<size_t>(length)));
}

}  // namespace bertperf

#define MPI_CHECK(call)                                                                                   \
  do {                                                                                                    \
    const int bert_mpi_status_ = (call);                                                                  \
    BERT_CHECK_GEN(call, bert_mpi_status_ == MPI_SUCCESS, ::bertperf::mpi_error_string(bert_mpi_status_)); \
  } while (0)
