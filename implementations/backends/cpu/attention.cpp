// CPU multi-head self-attention core: scaled scores, seq_id mask, softmax, Philox dropout on the
// probabilities, and the backward (cpu_ops.h).
//
// Work is split by (batch row, head): each pair owns an S x S block of probs / scratch and a
// disjoint set of q, k, v, ctx channels, so pairs run in parallel with no synchronisation. Heads are
// read in place from the (B, S, A*D) layout with leading dimension A*D; nothing is transposed.
// Inside the parallel loop BLAS runs single-threaded (the pairs already fill the cores).
#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_math.h"
#include "backends/cpu/cpu_ops.h"
#include "core/errors.h"

namespace bertperf::cpu {

namespace {

// Probability elements the dropout path of the forward stages on the stack at once.
constexpr size_t kTile = 16384;

// Tiny problems (tests, toy models) stay on one thread: a parallel region costs more than the work.
inline bool worth_parallel(int B, int S, int A, int D) {
  return B * A > 1 && static_cast<double>(B) * A * S * S * D > 1e6;
}

// Whether key t is hidden from query f (see ops.h): padding keys always, and real tokens of a
// different sequence of the same packed row.
inline bool masked(int32_t query_seq, int32_t key_seq) {
  return key_seq == 0 || (query_seq != 0 && key_seq != query_seq);
}

// row = softmax(row + mask) in place, over S keys.
template <typename T>
void masked_softmax_row(T* row, const int32_t* seq, int32_t query_seq, int S) {
  const T mask_value = T(ops::kAttentionMaskValue);
#pragma omp simd
  for (int t = 0; t < S; ++t) row[t] += masked(query_seq, seq[t]) ? mask_value : T(0);
  const T row_max = max_of(row, S);
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int t = 0; t < S; ++t) {
    row[t] = exp_t<T>(row[t] - row_max);
    sum += row[t];
  }
  const T inv = T(1) / sum;
#pragma omp simd
  for (int t = 0; t < S; ++t) row[t] *= inv;
}

}  // namespace

template <typename T>
void attention_forward(T* ctx, T* probs, const T* q, const T* k, const T* v, const int32_t* seq_id, int B,
                       int S, int A, int D, float drop_prob, RngKey key) {
  const bool dropout = drop_prob > 0.0f;
  BERT_CHECK(!dropout || static_cast<size_t>(S) <= kTile, "attention dropout supports S <= ", kTile, ", got ", S);
  const int AD = A * D;
  const T score_scale = T(1) / std::sqrt(T(D));
  const T keep_scale = dropout_scale<T>(drop_prob);
  const size_t SS = static_cast<size_t>(S) * S;
  const bool parallel = worth_parallel(B, S, A, D);
  SingleThreadedBlas single(parallel);
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int bh = 0; bh < B * A; ++bh) {
    const int b = bh / A, h = bh % A;
    const size_t head = static_cast<size_t>(b) * S * AD + static_cast<size_t>(h) * D;
    T* P = probs + bh * SS;
    gemm<T>(false, true, S, S, D, score_scale, q + head, AD, k + head, AD, T(0), P, S);
    const int32_t* seq = seq_id + static_cast<size_t>(b) * S;
    for (int f = 0; f < S; ++f) masked_softmax_row(P + static_cast<size_t>(f) * S, seq, seq[f], S);
    if (!dropout) {
      gemm<T>(false, false, S, D, S, T(1), P, S, v + head, AD, T(0), ctx + head, AD);
      continue;
    }
    // ctx rows = (P * mask * scale) . V, a block of query rows at a time through a stack tile, since
    // probs must keep the values before dropout for the backward.
    T tile[kTile];
    const int rows_per_tile = static_cast<int>(kTile / S);
    for (int f0 = 0; f0 < S; f0 += rows_per_tile) {
      const int rows = std::min(rows_per_tile, S - f0);
      const size_t first = bh * SS + static_cast<size_t>(f0) * S;
      const size_t count = static_cast<size_t>(rows) * S;
      dropout_multipliers(tile, first, count, drop_prob, key, keep_scale);
      const T* src = P + static_cast<size_t>(f0) * S;
#pragma omp simd
      for (size_t i = 0; i < count; ++i) tile[i] *= src[i];
      gemm<T>(false, false, rows, D, S, T(1), tile, S, v + head, AD, T(0),
              ctx + head + static_cast<size_t>(f0) * AD, AD);
    }
  }
}

template <typename T>
void attention_backward(T* dq, T* dk, T* dv, T* scratch, const T* dctx, const T* probs, const T* q,
                        const T* k, const T* v, int B, int S, int A, int D, float drop_prob, RngKey key) {
  const bool dropout = drop_prob > 0.0f;
  const int AD = A * D;
  const T score_scale = T(1) / std::sqrt(T(D));
  const T keep_scale = dropout_scale<T>(drop_prob);
  const size_t SS = static_cast<size_t>(S) * S;
  const bool parallel = worth_parallel(B, S, A, D);
  SingleThreadedBlas single(parallel);
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int bh = 0; bh < B * A; ++bh) {
    const int b = bh / A, h = bh % A;
    const size_t head = static_cast<size_t>(b) * S * AD + static_cast<size_t>(h) * D;
    const T* P = probs + bh * SS;
    T* W = scratch + bh * SS;
    // dV += dropout(P)^T . dctx
    if (dv) {
      const T* Pd = P;
      if (dropout) {
        dropout_multipliers(W, bh * SS, SS, drop_prob, key, keep_scale);
#pragma omp simd
        for (size_t i = 0; i < SS; ++i) W[i] *= P[i];
        Pd = W;
      }
      gemm<T>(true, false, S, D, S, T(1), Pd, S, dctx + head, AD, T(1), dv + head, AD);
    }
    if (!dq && !dk) continue;
    // dPd = dctx . V^T; dP = dPd * mask * scale; dScores = P * (dP - rowsum(dP * P)).
    gemm<T>(false, true, S, S, D, T(1), dctx + head, AD, v + head, AD, T(0), W, S);
    for (int f = 0; f < S; ++f) {
      T* row = W + static_cast<size_t>(f) * S;
      const T* p = P + static_cast<size_t>(f) * S;
      if (dropout) {
        T mult[kDropoutChunk];
        for (int t0 = 0; t0 < S; t0 += static_cast<int>(kDropoutChunk)) {
          const int count = std::min(static_cast<int>(kDropoutChunk), S - t0);
          dropout_multipliers(mult, bh * SS + static_cast<size_t>(f) * S + t0, count, drop_prob, key, keep_scale);
#pragma omp simd
          for (int t = 0; t < count; ++t) row[t0 + t] *= mult[t];
        }
      }
      T dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int t = 0; t < S; ++t) dot += row[t] * p[t];
#pragma omp simd
      for (int t = 0; t < S; ++t) row[t] = p[t] * (row[t] - dot);
    }
    // The mask is an additive constant, so it has no gradient; scores = scale * Q . K^T.
    if (dq) gemm<T>(false, false, S, D, S, score_scale, W, S, k + head, AD, T(1), dq + head, AD);
    if (dk) gemm<T>(true, false, S, D, S, score_scale, W, S, q + head, AD, T(1), dk + head, AD);
  }
}

#define BERTPERF_INSTANTIATE(T)                                                                              \
  template void attention_forward<T>(T*, T*, const T*, const T*, const T*, const int32_t*, int, int, int, int, \
                                     float, RngKey);                                                          \
  template void attention_backward<T>(T*, T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int,  \
                                      int, int, int, float, RngKey);
BERTPERF_INSTANTIATE(float)
BERTPERF_INSTANTIATE(double)
#undef BERTPERF_INSTANTIATE

}  // namespace bertperf::cpu
