// Thread-count control for the CPU backend: OpenMP loops and OpenBLAS share one setting so a
// benchmark can pin both to the same number of threads as its peer.
#pragma once

namespace bertperf {

// Sets OpenMP and OpenBLAS to `threads` (<= 0 keeps the current setting). Returns the count in use.
int set_cpu_threads(int threads);

}  // namespace bertperf
