// CPU variable-length multi-head self-attention: scaled scores within each sequence, softmax, Philox dropout on
// the probabilities, and the backward (ops.h AttentionForward/Backward, cpu_ops.h).
//
// Work is split by (sequence, head): each pair owns a len x len block of the saved probabilities (and of the
// backward's workspace) and a disjoint set of q, k, v, ctx rows and channels, so pairs run in parallel with no
// synchronisation. Heads are read in place from the packed (N, 3H) qkv with leading dimension 3H; nothing is
// transposed. Inside the parallel loop BLAS runs single-threaded (the pairs already fill the cores).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_math.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/kernel_math.h"
#include "core/buffer.h"
#include "core/errors.h"

namespace bertperf::cpu {

namespace {

// Probability elements the dropout path of the forward stages on the stack at once.
constexpr size_t kTile = 16384;

// One (sequence, head) pair: its tokens and its block of saved / workspace memory.
struct Pair {
  int s, h;
  int first, len;   // tokens [first, first + len)
  size_t block;     // element offset of its len x len block
};

// The sequence layout, checked once per call (a broken layout would read and write out of bounds).
struct Layout {
  const int32_t* cu;
  int sequences, heads, max_seqlen;

  Layout(const int32_t* cu_seqlens, int N, int sequences_, int max_seqlen_, int heads_)
      : cu(cu_seqlens), sequences(sequences_), heads(heads_), max_seqlen(max_seqlen_) {
    BERT_CHECK(sequences >= 0 && heads > 0 && max_seqlen > 0, "attention: ", sequences, " sequences, ", heads,
               " heads, max_seqlen ", max_seqlen);
    BERT_CHECK(cu[0] == 0 && cu[sequences] <= N, "attention: sequences cover tokens [", cu[0], ", ", cu[sequences],
               ") of ", N);
    for (int s = 0; s < sequences; ++s) {
      const int len = cu[s + 1] - cu[s];
      BERT_CHECK(len >= 0 && len <= max_seqlen, "attention: sequence ", s, " has length ", len, ", outside [0, ",
                 max_seqlen, "]");
    }
  }
  int tokens() const { return cu[sequences]; }
  // Pair i = s * heads + h. Its block offset is heads * sum_{s' < s} len^2 + h * len^2, found by a walk over the
  // sequences before it (cheap next to the pair's products, and it keeps the ops free of allocations).
  Pair pair(int i) const {
    const int s = i / heads, h = i % heads;
    size_t before = 0;
    for (int t = 0; t < s; ++t) before += static_cast<size_t>(cu[t + 1] - cu[t]) * (cu[t + 1] - cu[t]);
    const int len = cu[s + 1] - cu[s];
    return {s, h, cu[s], len, (before * heads) + static_cast<size_t>(h) * len * len};
  }
  // Tiny problems (tests, toy models) stay on one thread: a parallel region costs more than the work.
  bool worth_parallel(int head_dim) const {
    double work = 0;
    for (int s = 0; s < sequences; ++s) work += static_cast<double>(cu[s + 1] - cu[s]) * (cu[s + 1] - cu[s]);
    return sequences * heads > 1 && work * heads * head_dim > 1e6;
  }
  // The first dropout element of row i of a pair: keys j follow it contiguously.
  uint64_t dropout_row(const Pair& pr, int i) const {
    return kmath::attention_dropout_element(pr.s, pr.h, i, 0, heads, max_seqlen);
  }
};

// Dropout multipliers of rows [f0, f0 + rows) of a pair, row after row in mult. The rows of a sequence as long as
// max_seqlen follow each other in the numbering, so they are one stream; shorter ones leave gaps, so row by row.
template <typename T>
void pair_multipliers(T* mult, const Layout& layout, const Pair& pr, int f0, int rows, float drop_prob, RngKey key,
                      T scale) {
  if (pr.len == layout.max_seqlen) {
    dropout_multipliers(mult, layout.dropout_row(pr, f0), static_cast<size_t>(rows) * pr.len, drop_prob, key, scale);
    return;
  }
  for (int r = 0; r < rows; ++r)
    dropout_multipliers(mult + static_cast<size_t>(r) * pr.len, layout.dropout_row(pr, f0 + r), pr.len, drop_prob,
                        key, scale);
}

// row = softmax(row) in place, over n keys.
template <typename T>
void softmax_row(T* row, int n) {
  const T row_max = max_of(row, n);
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int t = 0; t < n; ++t) {
    row[t] = exp_t<T>(row[t] - row_max);
    sum += row[t];
  }
  const T inv = T(1) / sum;
#pragma omp simd
  for (int t = 0; t < n; ++t) row[t] *= inv;
}

// Rows [n0, n) of an (n, cols) matrix set to 0: the filler tokens past the last sequence.
template <typename T>
void zero_rows(T* x, int n0, int n, size_t cols) {
  if (n > n0) std::memset(static_cast<void*>(x + n0 * cols), 0, (n - n0) * cols * sizeof(T));
}

}  // namespace

size_t attention_saved_elements(int tokens, int max_seqlen, int heads) {
  // sum len^2 <= max_seqlen * sum len <= max_seqlen * tokens.
  return static_cast<size_t>(heads) * tokens * max_seqlen;
}

template <typename T>
void attention_forward(const ops::AttentionForward& p) {
  const Layout layout(p.cu_seqlens, p.N, p.sequences, p.max_seqlen, p.heads);
  const float drop_prob = p.dropout.prob;
  const bool dropout = drop_prob > 0.0f;
  const T keep_scale = dropout_scale<T>(drop_prob);
  const RngKey key = dropout_key(p.dropout);
  BERT_CHECK(!dropout || static_cast<size_t>(p.max_seqlen) <= kTile, "attention dropout supports sequences up to ",
             kTile, " tokens, got ", p.max_seqlen);
  const int D = p.head_dim, H = p.heads * D, ld = 3 * H;
  const T score_scale = T(1) / std::sqrt(T(D));
  const T* qkv = static_cast<const T*>(p.qkv);
  T* ctx = static_cast<T*>(p.ctx);
  T* saved = static_cast<T*>(p.saved);
  const bool parallel = layout.worth_parallel(D);
  SingleThreadedBlas single(parallel);
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int i = 0; i < p.sequences * p.heads; ++i) {
    const Pair pr = layout.pair(i);
    const int L = pr.len;
    if (L == 0) continue;
    const T* q = qkv + static_cast<size_t>(pr.first) * ld + pr.h * D;
    const T* k = q + H;
    const T* v = q + 2 * H;
    T* out = ctx + static_cast<size_t>(pr.first) * H + pr.h * D;
    T* P = saved + pr.block;
    gemm<T>(false, true, L, L, D, score_scale, q, ld, k, ld, T(0), P, L);
    for (int f = 0; f < L; ++f) softmax_row(P + static_cast<size_t>(f) * L, L);
    if (!dropout) {
      gemm<T>(false, false, L, D, L, T(1), P, L, v, ld, T(0), out, H);
      continue;
    }
    // ctx rows = (P * mask * scale) . V, a block of query rows at a time through a stack tile, since the saved
    // probabilities must keep the values before dropout for the backward.
    T tile[kTile];
    const int rows_per_tile = static_cast<int>(kTile / L);
    for (int f0 = 0; f0 < L; f0 += rows_per_tile) {
      const int rows = std::min(rows_per_tile, L - f0);
      const size_t count = static_cast<size_t>(rows) * L;
      pair_multipliers(tile, layout, pr, f0, rows, drop_prob, key, keep_scale);
      const T* src = P + static_cast<size_t>(f0) * L;
#pragma omp simd
      for (size_t e = 0; e < count; ++e) tile[e] *= src[e];
      gemm<T>(false, false, rows, D, L, T(1), tile, L, v, ld, T(0), out + static_cast<size_t>(f0) * H, H);
    }
  }
  zero_rows(ctx, layout.tokens(), p.N, H);
}

template <typename T>
void attention_backward(const ops::AttentionBackward& p) {
  const Layout layout(p.cu_seqlens, p.N, p.sequences, p.max_seqlen, p.heads);
  const float drop_prob = p.dropout.prob;
  const bool dropout = drop_prob > 0.0f;
  const T keep_scale = dropout_scale<T>(drop_prob);
  const RngKey key = dropout_key(p.dropout);
  const int D = p.head_dim, H = p.heads * D, ld = 3 * H;
  const T score_scale = T(1) / std::sqrt(T(D));
  const T* qkv = static_cast<const T*>(p.qkv);
  const T* dctx = static_cast<const T*>(p.dctx);
  const T* saved = static_cast<const T*>(p.saved);
  T* dqkv = static_cast<T*>(p.dqkv);
  T* workspace = static_cast<T*>(p.workspace);
  const bool parallel = layout.worth_parallel(D);
  SingleThreadedBlas single(parallel);
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int i = 0; i < p.sequences * p.heads; ++i) {
    const Pair pr = layout.pair(i);
    const int L = pr.len;
    if (L == 0) continue;
    const size_t LL = static_cast<size_t>(L) * L;
    const size_t q_at = static_cast<size_t>(pr.first) * ld + pr.h * D;
    const T* q = qkv + q_at;
    const T* k = q + H;
    const T* v = q + 2 * H;
    T* dq = dqkv + q_at;
    T* dk = dq + H;
    T* dv = dq + 2 * H;
    const T* dout = dctx + static_cast<size_t>(pr.first) * H + pr.h * D;
    const T* P = saved + pr.block;
    T* W = workspace + pr.block;
    // dV = dropout(P)^T . dctx
    const T* Pd = P;
    if (dropout) {
      pair_multipliers(W, layout, pr, 0, L, drop_prob, key, keep_scale);
#pragma omp simd
      for (size_t e = 0; e < LL; ++e) W[e] *= P[e];
      Pd = W;
    }
    gemm<T>(true, false, L, D, L, T(1), Pd, L, dout, H, T(0), dv, ld);
    // dPd = dctx . V^T; dP = dPd * mask * scale; dScores = P * (dP - rowsum(dP * P)).
    gemm<T>(false, true, L, L, D, T(1), dout, H, v, ld, T(0), W, L);
    for (int f = 0; f < L; ++f) {
      T* row = W + static_cast<size_t>(f) * L;
      const T* prob = P + static_cast<size_t>(f) * L;
      if (dropout) {
        T mult[kDropoutChunk];
        for (int t0 = 0; t0 < L; t0 += static_cast<int>(kDropoutChunk)) {
          const int count = std::min(static_cast<int>(kDropoutChunk), L - t0);
          dropout_multipliers(mult, layout.dropout_row(pr, f) + t0, count, drop_prob, key, keep_scale);
#pragma omp simd
          for (int t = 0; t < count; ++t) row[t0 + t] *= mult[t];
        }
      }
      T dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int t = 0; t < L; ++t) dot += row[t] * prob[t];
#pragma omp simd
      for (int t = 0; t < L; ++t) row[t] = prob[t] * (row[t] - dot);
    }
    // scores = scale * Q . K^T
    gemm<T>(false, false, L, D, L, score_scale, W, L, k, ld, T(0), dq, ld);
    gemm<T>(true, false, L, D, L, score_scale, W, L, q, ld, T(0), dk, ld);
  }
  zero_rows(dqkv, layout.tokens(), p.N, static_cast<size_t>(ld));
}

// ---- bf16 (ops.h's rounding table): as a flash-attention kernel (cuDNN's SDPA) rounds -------------------------
// Per (sequence, head), from bf16 q, k, v: scores S = scale q.k^T and the softmax in fp32 (e = exp(S - rowmax),
// l = sum e); the unnormalised weights rounded to bf16 with their dropout, W = bf16(e * Z), and ctx = bf16((W . v) / l).
// The probabilities P = e / l are saved in fp32 (what a fused kernel recomputes from the log-sum-exp). Backward:
// D_i = dctx_i . ctx_i (the bf16 output), dP = dctx . v^T in fp32, dS = bf16(P * (dP * Z - D)), dv = bf16(bf16(P * Z)^T
// . dctx), dq = bf16(scale dS . k), dk = bf16(scale dS^T . q). The per-pair products are fp32 GEMMs (OpenBLAS) on
// the bf16 values, whose products are exact in fp32.

namespace {

struct PairBuffers {
  AlignedBuffer<float> q, k, v, o, w, rows;
};

PairBuffers& pair_buffers(int L, int D) {
  thread_local PairBuffers b;
  const size_t ld = static_cast<size_t>(L) * D, ll = static_cast<size_t>(L) * L;
  for (AlignedBuffer<float>* x : {&b.q, &b.k, &b.v, &b.o})
    if (x->size() < ld) x->resize(ld);
  if (b.w.size() < ll) b.w.resize(ll);
  if (b.rows.size() < static_cast<size_t>(L)) b.rows.resize(L);
  return b;
}

// Rows [0, L) of one head (D channels from `src`, row stride ld) into a dense (L, D) fp32 block.
void load_head(float* dst, const bf16* src, int L, int D, size_t ld) {
  for (int i = 0; i < L; ++i) {
    const bf16* row = src + i * ld;
    float* out = dst + static_cast<size_t>(i) * D;
#pragma omp simd
    for (int d = 0; d < D; ++d) out[d] = to_float(row[d]);
  }
}

void store_head(bf16* dst, const float* src, int L, int D, size_t ld, const float* row_scale = nullptr) {
  for (int i = 0; i < L; ++i) {
    bf16* row = dst + i * ld;
    const float* in = src + static_cast<size_t>(i) * D;
    const float s = row_scale ? row_scale[i] : 1.0f;
    if (row_scale) {
#pragma omp simd
      for (int d = 0; d < D; ++d) row[d] = to_bf16(in[d] * s);
    } else {
#pragma omp simd
      for (int d = 0; d < D; ++d) row[d] = to_bf16(in[d]);
    }
  }
}

}  // namespace

template <>
void attention_forward<bf16>(const ops::AttentionForward& p) {
  const Layout layout(p.cu_seqlens, p.N, p.sequences, p.max_seqlen, p.heads);
  const float drop_prob = p.dropout.prob;
  const bool dropout = drop_prob > 0.0f;
  const float keep_scale = dropout_scale<float>(drop_prob);
  const RngKey key = dropout_key(p.dropout);
  const int D = p.head_dim, H = p.heads * D, ld = 3 * H;
  const float score_scale = 1.0f / std::sqrt(static_cast<float>(D));
  const bf16* qkv = static_cast<const bf16*>(p.qkv);
  bf16* ctx = static_cast<bf16*>(p.ctx);
  float* saved = static_cast<float*>(p.saved);
  const bool parallel = layout.worth_parallel(D);
  SingleThreadedBlas single(parallel);
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int i = 0; i < p.sequences * p.heads; ++i) {
    const Pair pr = layout.pair(i);
    const int L = pr.len;
    if (L == 0) continue;
    PairBuffers& b = pair_buffers(L, D);
    const bf16* q = qkv + static_cast<size_t>(pr.first) * ld + pr.h * D;
    load_head(b.q.data(), q, L, D, ld);
    load_head(b.k.data(), q + H, L, D, ld);
    load_head(b.v.data(), q + 2 * H, L, D, ld);
    float* P = saved + pr.block;
    float* W = b.w.data();
    gemm<float>(false, true, L, L, D, score_scale, b.q.data(), D, b.k.data(), D, 0.0f, P, L);
    if (dropout) pair_multipliers(W, layout, pr, 0, L, drop_prob, key, keep_scale);
    for (int f = 0; f < L; ++f) {
      float* row = P + static_cast<size_t>(f) * L;
      float* w = W + static_cast<size_t>(f) * L;
      const float row_max = max_of(row, L);
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int t = 0; t < L; ++t) {
        row[t] = exp_approx(row[t] - row_max);
        sum += row[t];
      }
      const float inv = 1.0f / sum;
      b.rows[f] = inv;
      if (dropout) {
#pragma omp simd
        for (int t = 0; t < L; ++t) w[t] = round_to_bf16(row[t] * w[t]);
      } else {
#pragma omp simd
        for (int t = 0; t < L; ++t) w[t] = round_to_bf16(row[t]);
      }
#pragma omp simd
      for (int t = 0; t < L; ++t) row[t] *= inv;
    }
    gemm<float>(false, false, L, D, L, 1.0f, W, L, b.v.data(), D, 0.0f, b.o.data(), D);
    store_head(ctx + static_cast<size_t>(pr.first) * H + pr.h * D, b.o.data(), L, D, H, b.rows.data());
  }
  zero_rows(ctx, layout.tokens(), p.N, H);
}

template <>
void attention_backward<bf16>(const ops::AttentionBackward& p) {
  const Layout layout(p.cu_seqlens, p.N, p.sequences, p.max_seqlen, p.heads);
  const float drop_prob = p.dropout.prob;
  const bool dropout = drop_prob > 0.0f;
  const float keep_scale = dropout_scale<float>(drop_prob);
  const RngKey key = dropout_key(p.dropout);
  const int D = p.head_dim, H = p.heads * D, ld = 3 * H;
  const float score_scale = 1.0f / std::sqrt(static_cast<float>(D));
  const bf16* qkv = static_cast<const bf16*>(p.qkv);
  const bf16* dctx = static_cast<const bf16*>(p.dctx);
  const bf16* ctx = static_cast<const bf16*>(p.ctx);
  const float* saved = static_cast<const float*>(p.saved);
  bf16* dqkv = static_cast<bf16*>(p.dqkv);
  float* workspace = static_cast<float*>(p.workspace);
  const bool parallel = layout.worth_parallel(D);
  SingleThreadedBlas single(parallel);
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int i = 0; i < p.sequences * p.heads; ++i) {
    const Pair pr = layout.pair(i);
    const int L = pr.len;
    if (L == 0) continue;
    const size_t LL = static_cast<size_t>(L) * L;
    PairBuffers& b = pair_buffers(L, D);
    const size_t q_at = static_cast<size_t>(pr.first) * ld + pr.h * D;
    const size_t o_at = static_cast<size_t>(pr.first) * H + pr.h * D;
    load_head(b.q.data(), qkv + q_at, L, D, ld);
    load_head(b.k.data(), qkv + q_at + H, L, D, ld);
    load_head(b.v.data(), qkv + q_at + 2 * H, L, D, ld);
    load_head(b.o.data(), dctx + o_at, L, D, H);
    const float* P = saved + pr.block;
    float* Z = b.w.data();
    float* dS = workspace + pr.block;
    // D_i = dctx_i . ctx_i
    for (int f = 0; f < L; ++f) {
      const bf16* c = ctx + o_at + static_cast<size_t>(f) * H;
      const float* d = b.o.data() + static_cast<size_t>(f) * D;
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int e = 0; e < D; ++e) dot += d[e] * to_float(c[e]);
      b.rows[f] = dot;
    }
    if (dropout) {
      pair_multipliers(Z, layout, pr, 0, L, drop_prob, key, keep_scale);
    } else {
      std::fill_n(Z, LL, 1.0f);
    }
    // dP = dctx . v^T, then dS = bf16(P * (dP * Z - D)).
    gemm<float>(false, true, L, L, D, 1.0f, b.o.data(), D, b.v.data(), D, 0.0f, dS, L);
    for (int f = 0; f < L; ++f) {
      float* row = dS + static_cast<size_t>(f) * L;
      const float* prob = P + static_cast<size_t>(f) * L;
      const float* z = Z + static_cast<size_t>(f) * L;
      const float Df = b.rows[f];
#pragma omp simd
      for (int t = 0; t < L; ++t) row[t] = round_to_bf16(prob[t] * (row[t] * z[t] - Df));
    }
    // dv = bf16(P * Z)^T . dctx (into v's buffer, no longer needed).
#pragma omp simd
    for (size_t e = 0; e < LL; ++e) Z[e] = round_to_bf16(P[e] * Z[e]);
    gemm<float>(true, false, L, D, L, 1.0f, Z, L, b.o.data(), D, 0.0f, b.v.data(), D);
    store_head(dqkv + q_at + 2 * H, b.v.data(), L, D, ld);
    // dq = scale dS . k (into dctx's buffer), dk = scale dS^T . q (into k's).
    gemm<float>(false, false, L, D, L, score_scale, dS, L, b.k.data(), D, 0.0f, b.o.data(), D);
    store_head(dqkv + q_at, b.o.data(), L, D, ld);
    gemm<float>(true, false, L, D, L, score_scale, dS, L, b.q.data(), D, 0.0f, b.k.data(), D);
    store_head(dqkv + q_at + H, b.k.data(), L, D, ld);
  }
  zero_rows(dqkv, layout.tokens(), p.N, static_cast<size_t>(ld));
}

#define BERTPERF_INSTANTIATE(T)                                             \
  template void attention_forward<T>(const ops::AttentionForward&);        \
  template void attention_backward<T>(const ops::AttentionBackward&);
BERTPERF_INSTANTIATE(float)
BERTPERF_INSTANTIATE(double)
#undef BERTPERF_INSTANTIATE

}  // namespace bertperf::cpu
