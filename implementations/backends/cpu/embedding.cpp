// CPU embeddings (lookup, LayerNorm, dropout) and row gather, with their scatter-add backwards (cpu_ops.h).
// The backwards scatter into rows that repeat (the same token id twice, the same position in
// every row), so they split work by column block rather than by row: no two threads ever add into
// the same element, and each sum is taken in token order.
#include <algorithm>

#include "backends/cpu/cpu_math.h"
#include "backends/cpu/cpu_ops.h"

namespace bertperf::cpu {

template <typename T>
void embedding_lookup(T* out, const int32_t* ids, const int32_t* types, const int32_t* positions,
                       const T* word, const T* type, const T* pos, int N, int C) {
  const size_t cs = static_cast<size_t>(C);
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * C > kParallelMin)
  for (int t = 0; t < N; ++t) {
    const T* w = word + ids[t] * cs;
    const T* ty = type + types[t] * cs;
    const T* p = pos + positions[t] * cs;
    T* o = out + t * cs;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = w[c] + ty[c] + p[c];
  }
}

namespace {

// table[index[t]] += dout[t] for t < N, restricted to columns [c0, c1).
template <typename T>
void scatter_add_columns(T* table, const int32_t* index, const T* dout, int N, int C, int c0, int c1) {
  const size_t cs = static_cast<size_t>(C);
  for (int t = 0; t < N; ++t) {
    T* dst = table + index[t] * cs;
    const T* src = dout + t * cs;
#pragma omp simd
    for (int c = c0; c < c1; ++c) dst[c] += src[c];
  }
}

}  // namespace

template <typename T>
void embedding_scatter_add(T* dword, T* dtype, T* dpos, const T* dout, const int32_t* ids, const int32_t* types,
                           const int32_t* positions, int N, int C) {
  for_column_blocks(C, 3 * static_cast<size_t>(N), [&](int c0, int c1) {
    if (dword) scatter_add_columns(dword, ids, dout, N, C, c0, c1);
    if (dtype) scatter_add_columns(dtype, types, dout, N, C, c0, c1);
    if (dpos) scatter_add_columns(dpos, positions, dout, N, C, c0, c1);
  });
}

template <typename T>
void gather_rows_forward(T* out, const T* inp, const int32_t* rows, int M, int C) {
  const size_t cs = static_cast<size_t>(C);
#pragma omp parallel for schedule(static) if (static_cast<size_t>(M) * C > kParallelMin)
  for (int m = 0; m < M; ++m) std::copy(inp + rows[m] * cs, inp + rows[m] * cs + cs, out + m * cs);
}

template <typename T>
void gather_rows_backward(T* dinp, const T* dout, const int32_t* rows, int M, int C) {
  for_column_blocks(C, M, [&](int c0, int c1) { scatter_add_columns(dinp, rows, dout, M, C, c0, c1); });
}

template <typename T>
void embedding_forward(const ops::EmbeddingForward& p) {
  T* sum = static_cast<T*>(p.sum);
  T* out = static_cast<T*>(p.out);
  embedding_lookup<T>(sum, p.ids, p.types, p.positions, static_cast<const T*>(p.word), static_cast<const T*>(p.type),
                      static_cast<const T*>(p.pos), p.N, p.C);
  layernorm_forward<T>(out, static_cast<T*>(p.mean), static_cast<T*>(p.rstd), sum, static_cast<const T*>(p.gamma),
                       static_cast<const T*>(p.beta), p.N, p.C);
  if (p.dropout.prob > 0.0f)
    bias_dropout_residual_forward<T>(out, out, nullptr, nullptr, p.N, p.C, p.dropout.prob, dropout_key(p.dropout));
}

template <typename T>
void embedding_backward(const ops::EmbeddingBackward& p) {
  const size_t n = static_cast<size_t>(p.N) * p.C;
  T* d_ln_out = static_cast<T*>(p.scratch);  // through dropout: the LayerNorm output's gradient
  T* d_sum = d_ln_out + n;                    // the LayerNorm input's
  const T* dout = static_cast<const T*>(p.dout);
  if (p.dropout.prob > 0.0f) {
    dropout_backward<T>(d_ln_out, dout, n, p.dropout.prob, dropout_key(p.dropout));
    dout = d_ln_out;
  }
  layernorm_backward<T>(d_sum, static_cast<T*>(p.dgamma), static_cast<T*>(p.dbeta), dout,
                        static_cast<const T*>(p.sum), static_cast<const T*>(p.gamma), static_cast<const T*>(p.mean),
                        static_cast<const T*>(p.rstd), p.N, p.C);
  embedding_scatter_add<T>(static_cast<T*>(p.dword), static_cast<T*>(p.dtype), static_cast<T*>(p.dpos), d_sum, p.ids,
                           p.types, p.positions, p.N, p.C);
}

template <typename T>
void gather_forward(const ops::GatherForward& p) {
  gather_rows_forward<T>(static_cast<T*>(p.out), static_cast<const T*>(p.inp), p.rows, p.M, p.C);
}

template <typename T>
void gather_backward(const ops::GatherBackward& p) {
  T* dinp = static_cast<T*>(p.dinp);
  if (!p.accumulate) {
    const size_t n = static_cast<size_t>(p.N) * p.C;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int r = 0; r < p.N; ++r) std::fill_n(dinp + static_cast<size_t>(r) * p.C, p.C, T(0));
  }
  gather_rows_backward<T>(dinp, static_cast<const T*>(p.dout), p.rows, p.M, p.C);
}

#define BERTPERF_INSTANTIATE(T)                                                                               \
  template void embedding_lookup<T>(T*, const int32_t*, const int32_t*, const int32_t*, const T*, const T*,  \
                                    const T*, int, int);                                                     \
  template void embedding_scatter_add<T>(T*, T*, T*, const T*, const int32_t*, const int32_t*, const int32_t*, \
                                         int, int);                                                          \
  template void gather_rows_forward<T>(T*, const T*, const int32_t*, int, int);                              \
  template void gather_rows_backward<T>(T*, const T*, const int32_t*, int, int);                             \
  template void embedding_forward<T>(const ops::EmbeddingForward&);                                          \
  template void embedding_backward<T>(const ops::EmbeddingBackward&);                                        \
  template void gather_forward<T>(const ops::GatherForward&);                                                \
  template void gather_backward<T>(const ops::GatherBackward&);
BERTPERF_INSTANTIATE(float)
BERTPERF_INSTANTIATE(double)
#undef BERTPERF_INSTANTIATE

}  // namespace bertperf::cpu
