// The CPU backend of the op vocabulary (backends/ops.h), as templates on the scalar type.
//
// Every op of ops.h exists here as cpu::op<T>, explicitly instantiated for float and double.
// float is the backend proper (bertperf::ops forwards to it); double exists so the tests can check
// every backward against central finite differences, which fp32 rounding would drown.
// Semantics, shapes and the accumulate-into-gradients rule are exactly those documented in ops.h;
// dropout draws and the keep test stay in fp32 for both types, so a float and a double run of the
// same op drop the same elements.
//
// Performance notes shared by all ops:
//  - OpenMP is the only thread pool. Products go to cblas (sgemm/dgemm) running single-threaded,
//    with a large product split into one block of C per OpenMP thread (see gemm below); loops run
//    under OpenMP over rows, attention over (batch row, head) pairs.
//  - Reductions over rows (bias, LayerNorm and embedding gradients) are split over column blocks,
//    so every sum is taken in one fixed order: results do not depend on the thread count and no
//    op needs scratch memory of its own.
//  - Nothing allocates; attention_backward works in the caller's scratch.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/ops.h"

namespace bertperf::cpu {

using ops::WeightLayout;

template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int I, int O,
                    WeightLayout layout);
template <typename T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N,
                     int I, int O, WeightLayout layout);

template <typename T>
void embedding_forward(T* out, const int32_t* ids, const int32_t* types, const int32_t* positions,
                       const T* word, const T* type, const T* pos, int N, int C);
template <typename T>
void embedding_backward(T* dword, T* dtype, T* dpos, const T* dout, const int32_t* ids,
                        const int32_t* types, const int32_t* positions, int N, int C);

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* gamma, const T* beta, int N, int C);
template <typename T>
void layernorm_backward(T* dinp, T* dgamma, T* dbeta, const T* dout, const T* inp, const T* gamma,
                        const T* mean, const T* rstd, int N, int C);

template <typename T>
void gelu_forward(T* out, const T* inp, size_t n);
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n);
template <typename T>
void tanh_forward(T* out, const T* inp, size_t n);
template <typename T>
void tanh_backward(T* dinp, const T* out, const T* dout, size_t n);

template <typename T>
void dropout_residual_forward(T* out, const T* inp, const T* residual, size_t n, float drop_prob, RngKey key);
template <typename T>
void dropout_residual_backward(T* dinp, T* dresidual, const T* dout, size_t n, float drop_prob, RngKey key);

template <typename T>
void attention_forward(T* ctx, T* probs, const T* q, const T* k, const T* v, const int32_t* seq_id, int B,
                       int S, int A, int D, float drop_prob, RngKey key);
template <typename T>
void attention_backward(T* dq, T* dk, T* dv, T* scratch, const T* dctx, const T* probs, const T* q,
                        const T* k, const T* v, int B, int S, int A, int D, float drop_prob, RngKey key);

template <typename T>
void gather_rows_forward(T* out, const T* inp, const int32_t* rows, int M, int C);
template <typename T>
void gather_rows_backward(T* dinp, const T* dout, const int32_t* rows, int M, int C);

template <typename T>
void cross_entropy_forward(T* losses, const T* logits, const int32_t* labels, int M, int V);
template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const int32_t* labels, const T* dlosses, int M, int V);
template <typename T>
void argmax_rows(int32_t* out, const T* logits, int M, int V);

// ---- building blocks, exposed for the tests and the microbenchmarks ---------------------------

// Time and FLOPs of the gemm() calls made outside parallel regions (the dense layers; attention's
// per-head GEMMs run inside its own parallel loop and count as attention). Off by default; the
// step benchmark switches it on to report the GEMM share of a step.
struct GemmProfile {
  bool enabled = false;
  double seconds = 0;
  double flops = 0;
};
GemmProfile& gemm_profile();

// C = alpha * op(A) . op(B) + beta * C, row-major, through cblas_sgemm / cblas_dgemm. Called outside
// a parallel region it splits C over the OpenMP threads; inside one it runs on the calling thread.
// Either way each element of C is the same BLAS dot product, so results are thread-count independent.
template <typename T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb,
          T beta, T* C, int ldc);

}  // namespace bertperf::cpu
