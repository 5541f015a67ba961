// CPU softmax cross-entropy and row argmax for the masked-LM and NSP heads (cpu_ops.h).
// Rows are long (the 30522-word vocabulary), so each row is one task and the softmax is recomputed
// in the backward rather than stored.
#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_math.h"
#include "backends/cpu/cpu_ops.h"
#include "core/errors.h"

namespace bertperf::cpu {

namespace {

// sum_j exp(x_j - max), exponentials in T, the sum in double.
template <typename T>
double row_exp_sum(const T* x, T max, int V) {
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < V; ++j) sum += static_cast<double>(exp_t<T>(x[j] - max));
  return sum;
}

void check_labels(const int32_t* labels, int M, int V) {
  for (int i = 0; i < M; ++i)
    BERT_CHECK(labels[i] >= 0 && labels[i] < V, "cross-entropy label ", labels[i], " of row ", i,
               " is outside [0, ", V, ")");
}

}  // namespace

template <typename T>
void cross_entropy_forward(T* losses, const T* logits, const int32_t* labels, int M, int V) {
  check_labels(labels, M, V);
#pragma omp parallel for schedule(static) if (static_cast<size_t>(M) * V > kParallelMin)
  for (int i = 0; i < M; ++i) {
    const T* x = logits + static_cast<size_t>(i) * V;
    const T m = max_of(x, V);
    // -log softmax(x)[label] = log(sum_j exp(x_j - m)) - (x_label - m)
    losses[i] = static_cast<T>(std::log(row_exp_sum(x, m, V)) - static_cast<double>(x[labels[i]] - m));
  }
}

template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const int32_t* labels, const T* dlosses, int M, int V) {
  check_labels(labels, M, V);
#pragma omp parallel for schedule(static) if (static_cast<size_t>(M) * V > kParallelMin)
  for (int i = 0; i < M; ++i) {
    const size_t offset = static_cast<size_t>(i) * V;
    const T* x = logits + offset;
    T* dx = dlogits + offset;
    const T m = max_of(x, V);
    const T scale = static_cast<T>(static_cast<double>(dlosses[i]) / row_exp_sum(x, m, V));
#pragma omp simd
    for (int j = 0; j < V; ++j) dx[j] += scale * exp_t<T>(x[j] - m);
    dx[labels[i]] -= dlosses[i];
  }
}

template <typename T>
void argmax_rows(int32_t* out, const T* logits, int M, int V) {
#pragma omp parallel for schedule(static) if (static_cast<size_t>(M) * V > kParallelMin)
  for (int i = 0; i < M; ++i) {
    const T* x = logits + static_cast<size_t>(i) * V;
    // The maximum in one vectorised pass, then the first element equal to it, found a block at a
    // time (a scan with an early exit does not vectorise). A row whose first element is NaN has
    // no match and reports 0, as a strict-greater scan would.
    const T m = max_of(x, V);
    int32_t first = 0;
    constexpr int kBlock = 256;
    for (int j0 = 0; j0 < V; j0 += kBlock) {
      const int j1 = std::min(V, j0 + kBlock);
      int hit = 0;
#pragma omp simd reduction(| : hit)
      for (int j = j0; j < j1; ++j) hit |= x[j] == m;
      if (hit) {
        first = j0;
        while (x[first] != m) ++first;
        break;
      }
    }
    out[i] = first;
  }
}

#define BERTPERF_INSTANTIATE(T)                                                                    \
  template void cross_entropy_forward<T>(T*, const T*, const int32_t*, int, int);                 \
  template void cross_entropy_backward<T>(T*, const T*, const int32_t*, const T*, int, int);      \
  template void argmax_rows<T>(int32_t*, const T*, int, int);
BERTPERF_INSTANTIATE(float)
BERTPERF_INSTANTIATE(double)
#undef BERTPERF_INSTANTIATE

}  // namespace bertperf::cpu
