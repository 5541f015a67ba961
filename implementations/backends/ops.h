// The op vocabulary: every op the BERT model is built from, forward and backward side by side.
//
// The model (model/bert.cpp) is written once against these declarations. backends/cpu implements
// them in fp32 (OpenBLAS GEMM, OpenMP loops) and is both the no-GPU backend and the test oracle;
// a CUDA backend implements the same signatures over device pointers.
//
// Conventions
//  - Row-major, contiguous. Shapes are given beside each pointer: N rows of C channels = (N, C).
//  - Gradient semantics: every backward ACCUMULATES (+=) into every gradient it writes, parameter
//    and activation gradients alike. Callers zero gradient buffers once per step. Accumulation is
//    what tied weights, residual branches and gradient accumulation all need, with one rule.
//  - A null gradient pointer means "not needed" and is skipped.
//  - Numerics follow the MLPerf reference exactly: tanh-GELU, LayerNorm eps 1e-12 with biased
//    variance, additive -10000 attention mask, inverted dropout with Philox masks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/philox.h"

namespace bertperf::ops {

inline constexpr float kLayerNormEps = 1e-12f;
inline constexpr float kAttentionMaskValue = -10000.0f;

// How a weight matrix is stored. TF dense kernels are (in, out); the word-embedding table reused
// as the MLM decoder and the NSP output_weights are (out, in) and used transposed.
enum class WeightLayout { IN_OUT, OUT_IN };

// ---- linear: out = inp . W + bias --------------------------------------------------------------
void linear_forward(float* out,           // (N, O)
                    const float* inp,     // (N, I)
                    const float* weight,  // (I, O) for IN_OUT, (O, I) for OUT_IN
                    const float* bias,    // (O) or null
                    int N, int I, int O, WeightLayout layout);
void linear_backward(float* dinp,           // (N, I) or null
                     float* dweight,        // like weight, or null
                     float* dbias,          // (O) or null
                     const float* dout,     // (N, O)
                     const float* inp,      // (N, I)
                     const float* weight,   // like weight
                     int N, int I, int O, WeightLayout layout);

// ---- embeddings: out[t] = word[ids[t]] + type[types[t]] + pos[positions[t]] --------------------
// Positions are explicit so packed rows can restart them per sequence.
void embedding_forward(float* out,  // (N, C)
                       const int32_t* ids, const int32_t* types, const int32_t* positions,  // (N)
                       const float* word,   // (V, C)
                       const float* type,   // (T, C)
                       const float* pos,    // (P, C)
                       int N, int C);
void embedding_backward(float* dword, float* dtype, float* dpos,  // like the tables, or null
                        const float* dout,                         // (N, C)
                        const int32_t* ids, const int32_t* types, const int32_t* positions,
                        int N, int C);

// ---- LayerNorm over the last axis, eps 1e-12, biased variance ----------------------------------
// mean and rstd are saved for the backward.
void layernorm_forward(float* out, float* mean, float* rstd,  // (N, C), (N), (N)
                       const float* inp, const float* gamma, const float* beta,  // (N, C), (C), (C)
                       int N, int C);
void layernorm_backward(float* dinp, float* dgamma, float* dbeta,  // (N, C), (C), (C)
                        const float* dout, const float* inp, const float* gamma,
                        const float* mean, const float* rstd, int N, int C);

// ---- elementwise -------------------------------------------------------------------------------
// tanh-approximated GELU, as the reference: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_forward(float* out, const float* inp, size_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);
void tanh_forward(float* out, const float* inp, size_t n);
// Uses the forward output: d tanh = 1 - out^2.
void tanh_backward(float* dinp, const float* out, const float* dout, size_t n);

// out = dropout(inp) + residual, inverted dropout: kept elements are scaled by 1/(1-p).
// The mask is drawn from `key` (element index = flat index), so the backward regenerates it.
// p = 0 makes it a plain add. residual may be null (plain dropout).
void dropout_residual_forward(float* out, const float* inp, const float* residual, size_t n,
                              float drop_prob, RngKey key);
void dropout_residual_backward(float* dinp, float* dresidual, const float* dout, size_t n,
                               float drop_prob, RngKey key);

// ---- multi-head self-attention core ------------------------------------------------------------
// q, k, v, ctx are (B, S, A*D): head h owns channels h*D .. h*D+D-1 (the TF reshape).
// scores = q.k^T / sqrt(D) + mask; probs = softmax(scores) over keys; ctx = dropout(probs) . v.
// The mask comes from seq_id (B, S): 0 marks padding, k >= 1 the k-th sequence of a (packed) row.
// A key t is hidden from query f (adds -10000) when seq_id[t] == 0, or when both are real tokens
// of different sequences. For unpacked rows this is exactly the reference's key-only padding mask.
// probs (B, A, S, S) is saved (before dropout) for the backward; dropout on probs uses `key` with
// element index = flat index into probs.
void attention_forward(float* ctx, float* probs,
                       const float* q, const float* k, const float* v, const int32_t* seq_id,
                       int B, int S, int A, int D, float drop_prob, RngKey key);
// scratch: B*A*S*S floats of working memory owned by the caller.
void attention_backward(float* dq, float* dk, float* dv, float* scratch,
                        const float* dctx, const float* probs,
                        const float* q, const float* k, const float* v,
                        int B, int S, int A, int D, float drop_prob, RngKey key);

// ---- gather rows (the MLM head reads only the masked positions) --------------------------------
void gather_rows_forward(float* out, const float* inp, const int32_t* rows, int M, int C);  // (M, C) <- (., C)
void gather_rows_backward(float* dinp, const float* dout, const int32_t* rows, int M, int C);

// ---- softmax cross-entropy ---------------------------------------------------------------------
// losses[i] = -log softmax(logits[i])[labels[i]], computed stably in fp32 with a double sum.
void cross_entropy_forward(float* losses, const float* logits, const int32_t* labels, int M, int V);
// dlogits[i] += dlosses[i] * (softmax(logits[i]) - onehot(labels[i])). Recomputes the softmax.
void cross_entropy_backward(float* dlogits, const float* logits, const int32_t* labels,
                            const float* dlosses, int M, int V);
// argmax over each row (first maximum wins), for masked-LM accuracy.
void argmax_rows(int32_t* out, const float* logits, int M, int V);

}  // namespace bertperf::ops
