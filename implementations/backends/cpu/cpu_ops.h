// The CPU implementation of the op vocabulary (backends/ops.h), as templates on the scalar type, and the kernels
// it is built from.
//
// Every op of ops.h exists here as cpu::op<T>(const ops::Op&), explicitly instantiated for float, double and bf16
// (the bf16 linear layers take the backend's GEMM context too).
// For float and double, T stands for every A, W and F pointer of the op (the backend's three dtypes are one): float
// is the backend proper ("cpu"); double is the oracle ("cpu-f64") the conformance test compares every backend with,
// and the type the tests check every backward in against central finite differences, which fp32 rounding would
// drown. T = bf16 is "cpu-bf16", the CUDA backend's numerics on the CPU: A and W bf16, F fp32 (bf16.h's Types<T>),
// rounding to bf16 exactly where ops.h's rounding table says. Ops whose rounding points change their structure
// (linear layers with GEMM epilogues, LayerNorm with statistics from the unrounded sum, attention as a
// flash-attention kernel rounds) have bf16 specialisations beside the generic code in the same file; the rest are
// the generic templates over Types<T>, loading and storing through bf16.h's load/store. Ops over F only (clipping,
// accumulation, LAMB moments) run their float versions.
// Semantics, shapes and the gradient rule (parameter gradients +=, activation gradients =) are exactly ops.h's;
// dropout draws and the keep test stay in fp32 for both types, so a float and a double run drop the same elements.
// The per-element formulas are kernel_math.h's, shared with the CUDA kernels, fed the fast exp and tanh of
// cpu_math.h.
//
// Performance notes shared by all ops:
//  - OpenMP is the only thread pool. Products go to cblas (sgemm/dgemm) running single-threaded,
//    with a large product split into one block of C per OpenMP thread (see gemm below); loops run
//    under OpenMP over rows, attention over (sequence, head) pairs, the optimizer over chunks.
//  - Reductions over rows (bias, LayerNorm and embedding gradients) are split over column blocks,
//    and sums over chunks or rows are taken per chunk or row and then in order, so results do not
//    depend on the thread count.
//  - Nothing allocates: attention works in the caller's saved and workspace memory, and the ops that
//    need per-row or per-chunk partial sums take them in `scratch`, at least scratch_doubles(p) of them, which
//    the backend keeps by backends/scratch_buffer.h's rule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/bf16.h"
#include "backends/ops.h"

namespace bertperf::cpu {

using ops::Activation;
using ops::WeightLayout;

// ---- the op vocabulary ----------------------------------------------------------------------------

template <typename T>
void linear_forward(const ops::LinearForward& p);
template <typename T>
void linear_backward(const ops::LinearBackward& p);
template <typename T>
void activation_backward(const ops::ActivationBackward& p);
template <typename T>
void embedding_forward(const ops::EmbeddingForward& p);
template <typename T>
void embedding_backward(const ops::EmbeddingBackward& p);
template <typename T>
void residual_layernorm_forward(const ops::ResidualLayerNormForward& p);
template <typename T>
void residual_layernorm_backward(const ops::ResidualLayerNormBackward& p);
// `saved` and the backward's `workspace` hold attention_saved_elements() elements of T: the probabilities of
// every (sequence, head) pair, sequence s at heads * sum_{s' < s} len_{s'}^2, head h then h * len_s^2 after it.
template <typename T>
void attention_forward(const ops::AttentionForward& p);
template <typename T>
void attention_backward(const ops::AttentionBackward& p);
template <typename T>
void gather_forward(const ops::GatherForward& p);
template <typename T>
void gather_backward(const ops::GatherBackward& p);
template <typename T>
void cross_entropy_forward(const ops::CrossEntropyForward& p, std::span<double> scratch);
template <typename T>
void cross_entropy_backward(const ops::CrossEntropyBackward& p);
template <typename T>
void gradient_clip(const ops::GradientClip& p, std::span<double> scratch);
void gradient_clip_finish(const ops::GradientClipFinish& p);
template <typename T>
void gradient_accumulate(const ops::GradientAccumulate& p);
template <typename T>
void lamb_moments(const ops::LambMoments& p, std::span<double> scratch);
template <typename T>
void lamb_apply(const ops::LambApply& p);
void fp8_scale_update(const ops::Fp8ScaleUpdate& p);  // f32 bookkeeping, the same for every backend
void schedule_step(const ops::ScheduleStep& p);  // f64 scalar arithmetic, the same for every backend
void record_step(const ops::RecordStep& p);      // the same for every backend

// The bf16 backend's specialisations (gather_forward, cross-entropy and lamb_apply are the generic templates
// instantiated for bf16; clipping, accumulation and lamb_moments run on F = fp32 as their float versions). Its
// attention saves and works in fp32 (attention_saved_elements() floats).
// Its linear layers run their products on the backend's GEMM context (gemm_bf16.h).
// With `fp8` (the FP8 twin, an op whose precision has a scale) they quantize their operands into it first, as ops.h's
// FP8 column says: room for the input (N, I), the weight (groups x I x O) and the output's gradient (N, ldo).
class Bf16GemmContext;
struct Fp8Work {
  bf16* inp;
  bf16* weight;
  bf16* dout;
};
void linear_forward(const ops::LinearForward& p, Bf16GemmContext& gemms, const Fp8Work* fp8 = nullptr);
void linear_backward(const ops::LinearBackward& p, Bf16GemmContext& gemms, const Fp8Work* fp8 = nullptr);
template <> void activation_backward<bf16>(const ops::ActivationBackward& p);
template <> void embedding_forward<bf16>(const ops::EmbeddingForward& p);
template <> void embedding_backward<bf16>(const ops::EmbeddingBackward& p);
template <> void residual_layernorm_forward<bf16>(const ops::ResidualLayerNormForward& p);
template <> void residual_layernorm_backward<bf16>(const ops::ResidualLayerNormBackward& p);
template <> void attention_forward<bf16>(const ops::AttentionForward& p);
template <> void attention_backward<bf16>(const ops::AttentionBackward& p);
template <> void gather_backward<bf16>(const ops::GatherBackward& p);
// The partial sums (doubles) the ops that reduce in order need in `scratch`: one loss and one hit per row, one sum
// of squares per chunk, two (weights and update) per chunk.
inline size_t scratch_doubles(const ops::CrossEntropyForward& p) { return 2 * static_cast<size_t>(p.M); }
inline size_t scratch_doubles(const ops::GradientClip& p) { return static_cast<size_t>(p.chunks.count); }
inline size_t scratch_doubles(const ops::LambMoments& p) { return 2 * static_cast<size_t>(p.chunks.count); }

// An upper bound of heads * sum(len^2) over any batch of `tokens` tokens in sequences of at most max_seqlen.
size_t attention_saved_elements(int tokens, int max_seqlen, int heads);

// ---- kernels the ops are built from, exposed for the tests and the microbenchmarks -------------

// out = word[ids] + type[types] + pos[positions], (N, C).
template <typename T>
void embedding_lookup(T* out, const int32_t* ids, const int32_t* types, const int32_t* positions, const T* word,
                      const T* type, const T* pos, int N, int C);
// The tables' gradients: dword[ids[t]] += dout[t], and so on; repeated ids add up.
template <typename T>
void embedding_scatter_add(T* dword, T* dtype, T* dpos, const T* dout, const int32_t* ids, const int32_t* types,
                           const int32_t* positions, int N, int C);

// LayerNorm over rows of C, eps 1e-12, biased variance; the backward writes dinp (=) and adds to dgamma, dbeta.
template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* gamma, const T* beta, int N, int C);
template <typename T>
void layernorm_backward(T* dinp, T* dgamma, T* dbeta, const T* dout, const T* inp, const T* gamma,
                        const T* mean, const T* rstd, int N, int C);

// Elementwise activations; backwards write dinp = dout * act'(x) (GELU from its input, tanh from its output).
template <typename T>
void gelu_forward(T* out, const T* inp, size_t n);
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n);
template <typename T>
void tanh_forward(T* out, const T* inp, size_t n);
template <typename T>
void tanh_backward(T* dinp, const T* out, const T* dout, size_t n);

// out = dropout(inp + bias) + residual over rows of C (bias (C) and residual (N, C) may be null), dropout element
// = flat index; out may be inp. The backward writes dinp = dout * mask * scale.
template <typename T>
void bias_dropout_residual_forward(T* out, const T* inp, const T* bias, const T* residual, int N, int C,
                                   float drop_prob, RngKey key);
template <typename T>
void dropout_backward(T* dinp, const T* dout, size_t n, float drop_prob, RngKey key);

// out[m] = inp[rows[m]], and its backward dinp[rows[m]] += dout[m] (repeated rows add up).
template <typename T>
void gather_rows_forward(T* out, const T* inp, const int32_t* rows, int M, int C);
template <typename T>
void gather_rows_backward(T* dinp, const T* dout, const int32_t* rows, int M, int C);

// dst = the value of fp8(src * scale) in `format` (E4M3 or E5M2: backends/fp8.h's rounding, as bf16, which holds it
// exactly) over `rows` rows of `cols` (row strides ldd and lds); returns max |src| over them.
float quantize_fp8(bf16* dst, size_t ldd, const bf16* src, size_t lds, int rows, int cols, float scale, DType format);

// The index of the first maximum of each row of V (row stride ld).
template <typename T>
void argmax_rows(int32_t* out, const T* logits, int M, int V, int ld);

// Time and FLOPs of the gemm() calls made outside parallel regions (the dense layers; attention's
// per-head GEMMs run inside its own parallel loop and count as attention): what the CPU backend's
// Backend::gemm_profile() hands out. Off by default; the step benchmark switches it on to report the
// GEMM share of a step.
using GemmProfile = Backend::GemmProfile;
GemmProfile& gemm_profile();

// C = alpha * op(A) . op(B) + beta * C, row-major, through cblas_sgemm / cblas_dgemm. Called outside
// a parallel region it splits C over the OpenMP threads; inside one it runs on the calling thread.
// Either way each element of C is the same BLAS dot product, so results are thread-count independent.
template <typename T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb,
          T beta, T* C, int ldc);

}  // namespace bertperf::cpu
