// CPU softmax cross-entropy with its loss statistics, and row argmax, for the masked-LM and NSP heads (cpu_ops.h).
// Rows are long (the 30522-word vocabulary), so each row is one task. The forward saves each row's log-sum-exp, so
// the backward is one pass of one exp per element.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backends/cpu/cpu_math.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/kernel_math.h"
#include "core/errors.h"

namespace bertperf::cpu {

namespace {

// sum_j exp(x_j - max), exponentials in the compute type R, the sum in S: double for the fp32 and fp64 backends,
// fp32 for the bf16 backend (as the CUDA backend sums).
template <typename S, typename X, typename R>
S row_exp_sum(const X* x, R max, int V) {
  S sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < V; ++j) sum += static_cast<S>(exp_t<R>(load(x[j]) - max));
  return sum;
}

template <typename T>
using ExpSum = std::conditional_t<is_bf16<T>, float, double>;

// The largest element of a row, in the compute type.
template <typename X>
auto row_max(const X* x, int V) {
  if constexpr (std::is_same_v<X, bf16>) {
    float m = to_float(x[0]);
#pragma omp simd reduction(max : m)
    for (int j = 0; j < V; ++j) {
      const float v = to_float(x[j]);
      m = v > m ? v : m;
    }
    return m;
  } else {
    return max_of(x, V);
  }
}

// The first j with x[j] == m (m the row's maximum). The search goes a block at a time, since a scan with an early
// exit does not vectorise. A row whose maximum is NaN has no match and reports 0, as a strict-greater scan would.
template <typename X, typename R>
int32_t first_index_of(const X* x, R m, int V) {
  constexpr int kBlock = 256;
  for (int j0 = 0; j0 < V; j0 += kBlock) {
    const int j1 = std::min(V, j0 + kBlock);
    int hit = 0;
#pragma omp simd reduction(| : hit)
    for (int j = j0; j < j1; ++j) hit |= load(x[j]) == m;
    if (hit) {
      int first = j0;
      while (load(x[first]) != m) ++first;
      return first;
    }
  }
  return 0;
}

void check_label(int32_t label, int row, int V) {
  BERT_CHECK(label >= 0 && label < V, "cross-entropy label ", label, " of row ", row, " is outside [0, ", V, ")");
}

}  // namespace

template <typename T>
void argmax_rows(int32_t* out, const T* logits, int M, int V, int ld) {
#pragma omp parallel for schedule(static) if (static_cast<size_t>(M) * V > kParallelMin)
  for (int i = 0; i < M; ++i) {
    const T* x = logits + static_cast<size_t>(i) * ld;
    out[i] = first_index_of(x, max_of(x, V), V);
  }
}

template <typename T>
void cross_entropy_forward(const ops::CrossEntropyForward& p, std::span<double> scratch) {
  const int M = p.M, V = p.V;
  const size_t ld = p.ldl ? p.ldl : V;
  BERT_CHECK(V > 0 && ld >= static_cast<size_t>(V), "cross-entropy rows of ", V, " logits in a stride of ", ld);
  for (int i = 0; i < M; ++i)
    if (p.loss_weight[i] != 0.0f || p.count_weight[i] != 0.0f) check_label(p.labels[i], i, V);
  // Per row: the weighted loss and the weighted hit, summed in row order after the parallel pass.
  BERT_CHECK(scratch.size() >= scratch_doubles(p), "cross-entropy over ", M, " rows handed ", scratch.size(),
             " partial sums");
  double* row_stats = scratch.data();
  using A = typename Types<T>::A;
  using F = typename Types<T>::F;
  const A* logits = static_cast<const A*>(p.logits);
  F* lse = static_cast<F*>(p.lse);
#pragma omp parallel for schedule(static) if (static_cast<size_t>(M) * V > kParallelMin)
  for (int i = 0; i < M; ++i) {
    const A* x = logits + i * ld;
    const auto m = row_max(x, V);
    const double row_lse = static_cast<double>(m) + std::log(static_cast<double>(row_exp_sum<ExpSum<T>>(x, m, V)));
    lse[i] = static_cast<F>(row_lse);
    const float lw = p.loss_weight[i], cw = p.count_weight[i];
    // A row of weight 0 adds nothing (its label need not be valid).
    row_stats[2 * i] =
        lw != 0.0f ? lw * kmath::cross_entropy_loss(row_lse, static_cast<double>(load(x[p.labels[i]]))) : 0.0;
    row_stats[2 * i + 1] = cw != 0.0f && first_index_of(x, m, V) == p.labels[i] ? static_cast<double>(cw) : 0.0;
  }
  double loss = 0, correct = 0;
  for (int i = 0; i < M; ++i) {
    loss += row_stats[2 * i];
    correct += row_stats[2 * i + 1];
  }
  p.stats[0] += loss;
  p.stats[1] += correct;
}

template <typename T>
void cross_entropy_backward(const ops::CrossEntropyBackward& p) {
  const int M = p.M, V = p.V;
  const size_t ld = p.ldl ? p.ldl : V;
  BERT_CHECK(V > 0 && ld >= static_cast<size_t>(V), "cross-entropy rows of ", V, " logits in a stride of ", ld);
  for (int i = 0; i < M; ++i)
    if (p.loss_weight[i] != 0.0f) check_label(p.labels[i], i, V);
  using A = typename Types<T>::A;
  using F = typename Types<T>::F;
  using R = typename Types<T>::R;
  const A* logits = static_cast<const A*>(p.logits);
  const F* lse = static_cast<const F*>(p.lse);
  A* dlogits = static_cast<A*>(p.dlogits);
#pragma omp parallel for schedule(static) if (static_cast<size_t>(M) * V > kParallelMin)
  for (int i = 0; i < M; ++i) {
    const A* x = logits + i * ld;
    A* dx = dlogits + i * ld;
    const R scale = static_cast<R>(p.scale) * static_cast<R>(p.loss_weight[i]);
    if (scale == R(0)) {
      std::fill(dx, dx + V, store<A>(R(0)));
      continue;
    }
    const R row_lse = lse[i];
    const int label = p.labels[i];
    // dx may be x: each element is read before it is written.
#pragma omp simd
    for (int j = 0; j < V; ++j)
      dx[j] = store<A>(kmath::cross_entropy_grad(load(x[j]), row_lse, j == label, scale, FastExp{}));
  }
}

#define BERTPERF_INSTANTIATE(T)                                                                         \
  template void argmax_rows<T>(int32_t*, const T*, int, int, int);                                     \
  template void cross_entropy_forward<T>(const ops::CrossEntropyForward&, std::span<double>);          \
  template void cross_entropy_backward<T>(const ops::CrossEntropyBackward&);
BERTPERF_INSTANTIATE(float)
BERTPERF_INSTANTIATE(double)
#undef BERTPERF_INSTANTIATE
template void cross_entropy_forward<bf16>(const ops::CrossEntropyForward&, std::span<double>);
template void cross_entropy_backward<bf16>(const ops::CrossEntropyBackward&);

}  // namespace bertperf::cpu
