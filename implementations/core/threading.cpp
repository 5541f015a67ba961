// CPU thread-count control (threading.h).
#include "core/threading.h"

#include <cblas.h>
#include <omp.h>

namespace bertperf {

int set_cpu_threads(int threads) {
  if (threads > 0) {
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
  }
  return omp_get_max_threads();
}

}  // namespace bertperf
