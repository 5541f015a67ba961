// CPU embeddings (lookup, LayerNorm, dropout) and row gather, with their scatter-add backwards (cpu_ops.h).
// The backwards scatter into rows that repeat (the same token id twice, the same position in
// every row), so they split work by column block rather than by row: no two threads ever add into
// the same element, and each sum is taken in token order.
#include <algorithm>
#include <utility>
#include <vector>

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

// ---- bf16 (ops.h's rounding table) ---------------------------------------------------------------------------
// Forward: x = word + type + pos in fp32 from the bf16 tables; sum = bf16(x); out = bf16(LayerNorm(x) * mask), the
// statistics x's. Backward: dy * mask and dx in fp32, dx kept in fp32 (ops.h's (2, N, C) bf16 scratch holds (N, C)
// floats) and scattered into the fp32 table gradients; dgamma, dbeta fp32 sums.

template <>
void embedding_forward<bf16>(const ops::EmbeddingForward& p) {
  const int N = p.N, C = p.C;
  check_ln_row(C);
  const float drop = p.dropout.prob;
  const float scale = dropout_scale<float>(drop);
  const RngKey key = dropout_key(p.dropout);
  const bf16* word = static_cast<const bf16*>(p.word);
  const bf16* type = static_cast<const bf16*>(p.type);
  const bf16* pos = static_cast<const bf16*>(p.pos);
  const size_t cs = static_cast<size_t>(C);
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * C > kParallelMin)
  for (int t = 0; t < N; ++t) {
    float x[kMaxLnRow], mult[kMaxLnRow];
    const bf16* w = word + p.ids[t] * cs;
    const bf16* ty = type + p.types[t] * cs;
    const bf16* ps = pos + p.positions[t] * cs;
    bf16* s = static_cast<bf16*>(p.sum) + t * cs;
#pragma omp simd
    for (int c = 0; c < C; ++c) {
      x[c] = to_float(w[c]) + to_float(ty[c]) + to_float(ps[c]);
      s[c] = to_bf16(x[c]);
    }
    if (drop > 0.0f) dropout_multipliers(mult, t * cs, cs, drop, key, scale);
    layernorm_row_bf16(static_cast<bf16*>(p.out) + t * cs, static_cast<float*>(p.mean) + t,
                       static_cast<float*>(p.rstd) + t, x, static_cast<const bf16*>(p.gamma),
                       static_cast<const bf16*>(p.beta), drop > 0.0f ? mult : nullptr, C);
  }
}

template <>
void embedding_backward<bf16>(const ops::EmbeddingBackward& p) {
  const int N = p.N, C = p.C;
  check_ln_row(C);
  const float drop = p.dropout.prob;
  const float scale = dropout_scale<float>(drop);
  const RngKey key = dropout_key(p.dropout);
  const bf16* dout = static_cast<const bf16*>(p.dout);
  const bf16* x = static_cast<const bf16*>(p.sum);
  const float* mean = static_cast<const float*>(p.mean);
  const float* rstd = static_cast<const float*>(p.rstd);
  float* d_sum = static_cast<float*>(p.scratch);
  const size_t cs = static_cast<size_t>(C);
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * C > kParallelMin)
  for (int t = 0; t < N; ++t) {
    float dy[kMaxLnRow];
    const bf16* d = dout + t * cs;
#pragma omp simd
    for (int c = 0; c < C; ++c) dy[c] = to_float(d[c]);
    if (drop > 0.0f) {
      float mult[kMaxLnRow];
      dropout_multipliers(mult, t * cs, cs, drop, key, scale);
#pragma omp simd
      for (int c = 0; c < C; ++c) dy[c] *= mult[c];
    }
    layernorm_dx_row_bf16(d_sum + t * cs, dy, x + t * cs, static_cast<const bf16*>(p.gamma), mean[t], rstd[t], C);
  }
  float* dgamma = static_cast<float*>(p.dgamma);
  float* dbeta = static_cast<float*>(p.dbeta);
  if (dgamma || dbeta) {
    for_column_blocks(C, 2 * static_cast<size_t>(N), [&](int c0, int c1) {
      float acc_gamma[kMaxColumnBlock] = {}, acc_beta[kMaxColumnBlock] = {}, mult[kMaxColumnBlock];
      const int w = c1 - c0;
      for (int t = 0; t < N; ++t) {
        const bf16* xr = x + t * cs + c0;
        const bf16* dr = dout + t * cs + c0;
        const float mu = mean[t], rs = rstd[t];
        if (drop > 0.0f) {
          dropout_multipliers(mult, t * cs + c0, static_cast<size_t>(w), drop, key, scale);
        } else {
          std::fill_n(mult, w, 1.0f);
        }
#pragma omp simd
        for (int c = 0; c < w; ++c) {
          const float g = to_float(dr[c]) * mult[c];
          acc_gamma[c] += g * (to_float(xr[c]) - mu) * rs;
          acc_beta[c] += g;
        }
      }
      for (int c = 0; c < w; ++c) {
        if (dgamma) dgamma[c0 + c] += acc_gamma[c];
        if (dbeta) dbeta[c0 + c] += acc_beta[c];
      }
    });
  }
  embedding_scatter_add<float>(static_cast<float*>(p.dword), static_cast<float*>(p.dtype), static_cast<float*>(p.dpos),
                               d_sum, p.ids, p.types, p.positions, N, C);
}

// dinp[rows[m]] = bf16(dinp (or 0) + the fp32 sum of the dout rows gathered from it, in m order), as the CUDA
// backend's sorted scatter: a row gathered twice rounds once.
template <>
void gather_backward<bf16>(const ops::GatherBackward& p) {
  bf16* dinp = static_cast<bf16*>(p.dinp);
  const bf16* dout = static_cast<const bf16*>(p.dout);
  const int M = p.M, C = p.C;
  const size_t cs = static_cast<size_t>(C);
  if (!p.accumulate) {
    const size_t n = static_cast<size_t>(p.N) * C;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int r = 0; r < p.N; ++r) std::fill_n(dinp + static_cast<size_t>(r) * C, C, bf16{0});
  }
  // (row, m) pairs in order: each run of one row lists its sources in m order.
  thread_local std::vector<std::pair<int32_t, int32_t>> sorted;
  std::vector<std::pair<int32_t, int32_t>>& order = sorted;  // this thread's, named so the workers share it
  order.resize(M);
  for (int m = 0; m < M; ++m) order[m] = {p.rows[m], m};
  std::sort(order.begin(), order.end());
  for_column_blocks(C, M, [&](int c0, int c1) {
    float acc[kMaxColumnBlock];
    const int w = c1 - c0;
    for (int i = 0; i < M;) {
      const int32_t row = order[i].first;
      std::fill_n(acc, w, 0.0f);
      for (; i < M && order[i].first == row; ++i) {
        const bf16* src = dout + order[i].second * cs + c0;
#pragma omp simd
        for (int c = 0; c < w; ++c) acc[c] += to_float(src[c]);
      }
      bf16* dst = dinp + row * cs + c0;
#pragma omp simd
      for (int c = 0; c < w; ++c) dst[c] = to_bf16(to_float(dst[c]) + acc[c]);
    }
  });
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
template void gather_rows_forward<bf16>(bf16*, const bf16*, const int32_t*, int, int);
template void gather_forward<bf16>(const ops::GatherForward&);

}  // namespace bertperf::cpu
