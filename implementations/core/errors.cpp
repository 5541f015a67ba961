// The reporter behind the error-check family (errors.h).
#include "core/errors.h"

namespace bertperf {

void throw_internal(const char* expr, const char* file, int line, const std::string& msg) {
  throw InternalError(cat("internal error: ", msg, " [", expr, " at ", file, ":", line, "]"));
}

}  // namespace bertperf
