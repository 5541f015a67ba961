// The op vocabulary: every op the BERT model and its optimizer are built from, forward and backward side by side,
// each as a plain parameter struct with shapes beside the pointers. A backend (backends/backend.h) implements
// every op; the model (model/bert.cpp) and the optimizer (optim/lamb.cpp) are written once against them.
//
// Conventions
//  - Row-major, contiguous unless a row stride is given. (N, C) is N rows of C channels.
//  - Element types, in the shape comments:
//      A    the backend's activation dtype (activations and their gradients)
//      W    the backend's weight dtype (the copy of the parameters that forward and backward read)
//      F    the backend's master dtype (parameter gradients, master weights, LAMB moments, saved statistics)
//      i32, f32, f64  fixed types (batch inputs are i32 and f32; loss statistics and norms are f64 everywhere)
//  - Every pointer is backend memory, including the batch inputs and the scalars (StepScalars).
//  - The gradient rule: parameter gradients ACCUMULATE (+=), so micro-batches and tied weights add up; activation
//    gradients are OVERWRITTEN (=), so the model never zeroes them, except where an op says "accumulate" (a
//    residual branch adds into the gradient its other branch wrote).
//  - A null output pointer means "not needed" and is skipped, where the comment says "or null".
//  - Numerics follow the MLPerf reference exactly: tanh-GELU, LayerNorm eps 1e-12 with biased variance, inverted
//    dropout with Philox masks (core/philox.h), keys masked across sequences, LAMB with the reference's exclusions.
//
// The rounding table: where a backend with bf16 activations rounds (the CUDA backend, and cpu-bf16, its numerics
// twin on the CPU, follow it op by op; the fp32 and fp64 CPU backends keep everything in their one type). "bf16(x)"
// is a store to bf16 (round to nearest even); everything between stores is fp32 arithmetic on the loaded values,
// unless a sum is marked f64. A = bf16 activations, W = bf16 weight copy, F = fp32.
//
//   op                   reads (bf16 unless said)     rounds to bf16                        fp32 / f64 kept
//   linear fwd           inp, weight, bias            out = bf16(acc + bias)                acc: the GEMM sum, fp32
//     GELU                                           pre = bf16(acc + bias),
//                                                    out = bf16(gelu(acc + bias))          (GELU of the fp32 sum)
//     TANH                                           out = bf16(tanh(bf16(acc + bias)))
//   linear bwd dinp      dout, weight                 bf16(acc (+ dinp)) after EACH group   (fused QKV: 3 roundings)
//     dinp_act GELU      + pre (saved)                bf16(acc * gelu'(pre))                (no rounding of acc)
//     dinp_act TANH      + out (saved)                bf16(bf16(acc) * (1 - out^2))
//   linear bwd dweight   dout, inp                    -                                     dweight += acc (F)
//   bias gradients       the bf16 rows                -                                     column sums in fp32 (F)
//   activation bwd       dout, saved                  dinp = bf16(dout * act'(saved))
//   embedding fwd        tables, gamma, beta          sum = bf16(x), out = bf16(LN(x) * Z)  x = word + type + pos;
//                                                                                          mean, rstd of x (F)
//   embedding bwd        dout, sum (rounded), gamma   -                                     dx = LN'(dout * Z) kept fp32
//                                                                                          and scattered into F tables
//   residual LN fwd      inp, bias, residual, g, b    sum = bf16(x), out = bf16(LN(x))      x = (inp + bias) * Z + res;
//                                                                                          mean, rstd of x (F)
//   residual LN bwd      dout, sum (rounded), gamma   dresidual = bf16(dx),                 dx fp32; dgamma, dbeta,
//                                                    dinp = bf16(dresidual * Z)            dbias fp32 sums (F)
//   attention fwd        qkv                          W = bf16(e * Z), ctx = bf16(W.v / l)  S = scale q.k, e =
//                                                    (as a flash-attention kernel)         exp(S - max), l = sum e
//   attention bwd        qkv, dctx, ctx, saved        dS = bf16(P (dP Z - D)), P Z rounded  D = dctx.ctx, dP =
//                                                    for dv; dq, dk, dv = bf16(...)        dctx.v, P: fp32
//   gather fwd / bwd     the bf16 rows                bwd: bf16(dinp + sum of its rows)     repeated rows summed fp32
//   cross-entropy fwd    logits                       -                                     exp-sum fp32, lse (F);
//                                                                                          loss, hits f64
//   cross-entropy bwd    logits, lse                  dlogits = bf16(grad)
//   clip, accumulate     gradients (F)                -                                     sums of squares f64
//   LAMB                 grads, master, m, v (F)      weight copy = bf16(new master)        norms f64
//
// FP8 (a backend's "precision": "fp8", backends/fp8.h; Transformer Engine's HYBRID recipe with delayed scaling): the
// encoder's linear layers (QKV, attention output, both FFN GEMMs: ops given a GemmPrecision) quantize their operands
// before the product and scale the sum back; everything else stays in the bf16 column above. q8(x, s) = fp8(x * s),
// the product x * s in fp32, rounded to nearest even and saturated to the format's largest finite value; s the
// operand's scale, 1/s its inverse in fp32.
//
//   op                   quantized (amax recorded)                 the sum and its epilogue
//   linear fwd           inp: q8 E4M3 (amax[INPUT] = max |inp|),  acc = the GEMM sum of q8(inp) . q8(W), fp32;
//                        W: q8 E4M3 (amax[WEIGHT] = max |W|)       then the bf16 column's epilogue on
//                                                                  acc * (1/s_inp * 1/s_W)
//   linear bwd dinp      dout: q8 E5M2 (amax[GRAD] = max |dout|),  acc * (1/s_dout * 1/s_W), then as bf16
//                        W: q8 E4M3 (the forward's scale, no amax)
//   linear bwd dweight   inp: q8 E4M3, dout: q8 E5M2               dweight += acc * (1/s_inp * 1/s_dout) (F)
//   bias gradients       -                                         from the bf16 dout, unquantized
//   scale update         -                                         per tensor, before each training forward:
//                                                                  s = fp8_max / max(history) / 2^margin (kept
//                                                                  when that amax is 0 or not finite), history
//                                                                  rolled, row 0 cleared (Fp8ScaleUpdate)
// amax is max |x| of the unscaled values, taken over the operand's elements (a saturating operand records its true
// amax); every FP8 value is a bf16 value, so cpu-bf16's FP8 twin runs its bf16 GEMMs on them, exactly. The CUDA
// backend quantizes with the same rule (kmath::fp8_bits) into FP8 copies and runs cuBLASLt's FP8 GEMMs with the
// inverse scales as their A and B scale pointers (its own order of the sum and of the scale product: held to the
// twin by the conformance test's twin rule).
//
// GEMM sums (acc) are fp32 over bf16 operands; cpu-bf16 takes them in one fixed order (backends/cpu/gemm_bf16.h),
// the GPU in cuBLASLt's. Dropout masks Z = 0 or 1/(1-p) in fp32. Where the CUDA backend leaves the table: its own
// GELU kernels (its option "gelu": "kernel", or a layer whose leading dimension is not a multiple of 8: GELU of the
// rounded pre-activation), and its attention kernel ("attention": "kernel": P and dS kept in fp32);
// tests/cpp/test_backend_ops.cpp names those cases and compares the rest with cpu-bf16.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/dtype.h"
#include "backends/kernel_math.h"
#include "core/philox.h"

namespace bertperf::ops {

inline constexpr float kLayerNormEps = 1e-12f;

// ---- the op list, written once --------------------------------------------------------------------------------
// BERTPERF_OPS(X) calls X(ENUMERATOR, method, Struct) for every op of the vocabulary, in one order: the Op enum and
// op_name below, the Backend's methods (backend.h) and cpu-async's forwarders (cpu/cpu_async.cpp) are made from it.
// Adding an op is a line here and its parameter struct below, then its implementation in every backend (a backend
// without it does not compile: its method is pure virtual) and a case in every per-op switch (the conformance
// test's, the benchmarks': -Werror=switch refuses a switch without one; tests/compile/lists.cpp shows both).
#define BERTPERF_OPS(X)                                                                       \
  X(LINEAR_FORWARD, linear_forward, LinearForward)                                            \
  X(LINEAR_BACKWARD, linear_backward, LinearBackward)                                         \
  X(ACTIVATION_BACKWARD, activation_backward, ActivationBackward)                             \
  X(EMBEDDING_FORWARD, embedding_forward, EmbeddingForward)                                   \
  X(EMBEDDING_BACKWARD, embedding_backward, EmbeddingBackward)                                \
  X(RESIDUAL_LAYERNORM_FORWARD, residual_layernorm_forward, ResidualLayerNormForward)         \
  X(RESIDUAL_LAYERNORM_BACKWARD, residual_layernorm_backward, ResidualLayerNormBackward)      \
  X(ATTENTION_FORWARD, attention_forward, AttentionForward)                                   \
  X(ATTENTION_BACKWARD, attention_backward, AttentionBackward)                                \
  X(GATHER_FORWARD, gather_forward, GatherForward)                                            \
  X(GATHER_BACKWARD, gather_backward, GatherBackward)                                         \
  X(CROSS_ENTROPY_FORWARD, cross_entropy_forward, CrossEntropyForward)                        \
  X(CROSS_ENTROPY_BACKWARD, cross_entropy_backward, CrossEntropyBackward)                     \
  X(GRADIENT_CLIP, gradient_clip, GradientClip)                                               \
  X(GRADIENT_CLIP_FINISH, gradient_clip_finish, GradientClipFinish)                           \
  X(GRADIENT_ACCUMULATE, gradient_accumulate, GradientAccumulate)                             \
  X(LAMB_MOMENTS, lamb_moments, LambMoments)                                                  \
  X(LAMB_APPLY, lamb_apply, LambApply)                                                        \
  X(FP8_SCALE_UPDATE, fp8_scale_update, Fp8ScaleUpdate)                                      \
  X(SCHEDULE_STEP, schedule_step, ScheduleStep)                                               \
  X(RECORD_STEP, record_step, RecordStep)

// Every op of the vocabulary, by name: for what a backend declares of its ops (device.h: Capabilities) and the
// per-op tables of the tests and benchmarks.
enum class Op : uint8_t {
#define BERTPERF_OP_ENUMERATOR(enumerator, method, Struct) enumerator,
  BERTPERF_OPS(BERTPERF_OP_ENUMERATOR)
#undef BERTPERF_OP_ENUMERATOR
};

// The op's method name ("linear_forward").
inline constexpr const char* kOpNames[] = {
#define BERTPERF_OP_NAME(enumerator, method, Struct) #method,
    BERTPERF_OPS(BERTPERF_OP_NAME)
#undef BERTPERF_OP_NAME
};
inline constexpr int kOpCount = static_cast<int>(sizeof kOpNames / sizeof kOpNames[0]);
constexpr const char* op_name(Op op) { return kOpNames[static_cast<int>(op)]; }

// No two ops share a name (the per-op tables are looked up by it).
constexpr bool op_names_distinct() {
  for (int a = 0; a < kOpCount; ++a)
    for (int b = a + 1; b < kOpCount; ++b) {
      const char *x = kOpNames[a], *y = kOpNames[b];
      while (*x && *x == *y) ++x, ++y;
      if (*x == *y) return false;
    }
  return true;
}
static_assert(op_names_distinct(), "two ops of BERTPERF_OPS share a name");

// A set of ops.
struct OpMask {
  static_assert(kOpCount <= 32, "an OpMask holds 32 ops");
  uint32_t bits = 0;
  constexpr bool has(Op op) const { return (bits >> static_cast<int>(op)) & 1u; }
  constexpr OpMask& add(Op op) {
    bits |= 1u << static_cast<int>(op);
    return *this;
  }
  constexpr bool empty() const { return bits == 0; }
  constexpr bool intersects(OpMask o) const { return (bits & o.bits) != 0; }
};

// How a weight matrix is stored. TF dense kernels are (in, out); the word-embedding table reused as the MLM
// decoder and the NSP output_weights are (out, in) and used transposed.
enum class WeightLayout : uint8_t { IN_OUT, OUT_IN };

// Activations fused into a linear layer. GELU is the reference's tanh form,
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
enum class Activation : uint8_t { NONE, GELU, TANH };

// ---- per-step scalars in backend memory --------------------------------------------------------------------
// A step that is captured once and replayed (a CUDA graph) cannot take its step-varying values as arguments, so
// ops read them from here: the host writes the first part before each step, ops write the second part.

// The run's dropout seed and the global index of the step's first micro-batch on this rank.
struct DropoutCounter {
  uint64_t seed = 0;
  uint32_t step = 0;
  uint32_t reserved = 0;
};

struct StepScalars {
  // Written by the host at the run's first step (and where it resumes), then by ScheduleStep from `updates`.
  DropoutCounter dropout;
  int64_t updates = 0;              // steps made before this one (the reference's global_step; RecordStep advances it)
  float learning_rate = 0;          // of the update this step makes
  float inv_bias_correction1 = 1;   // 1 / (1 - beta1^t), t = the update's 1-based index
  float inv_bias_correction2 = 1;   // 1 / (1 - beta2^t)
  float max_grad_norm = 1;          // the clip threshold
  // Written by ops during the step.
  double grad_norm_sq = 0;          // sum of squares of the gradient last clipped (GradientClip)
  float clip_scale = 1;             // what that gradient is multiplied by: max_norm / norm above max_norm, else 1
  double nonfinite = 0;             // clips that saw a non-finite norm, added to what the last step's RecordStep
                                    // left (0 after a finite step); LAMB updates nothing when > 0. A double, so the
                                    // record sums it across ranks with the losses
};

// Where a dropout mask comes from: Philox keyed by (counter->seed, counter->step + step_offset, site, element).
// prob 0 is no dropout (then counter may be null). Kept elements are scaled by 1 / (1 - prob).
struct Dropout {
  float prob = 0;
  const DropoutCounter* counter = nullptr;
  uint32_t step_offset = 0;  // the micro-batch's offset from the step's first (a static value)
  uint32_t site = 0;         // one stream per place a mask is drawn
};

// ---- the precision of a GEMM-carrying op ---------------------------------------------------------------------
// Null scale: the op runs at the backend's own types (A and W). Otherwise the op runs its GEMMs in FP8 (ops.h's
// rounding table, FP8 column): its three operands are quantized with scale[k] to fp8_type(k) (backends/fp8.h: input
// and weight E4M3, the gradient E5M2), and the output is A as always. Where amax is not null the op records the
// operands it quantizes first in this call (the forward: input and weight; the backward: the gradient) as
// amax[k] = max(amax[k], max |x|). Only a backend with an FP8 recipe (Backend::fp8_recipe) takes a scale.
struct GemmPrecision {
  const float* scale = nullptr;  // (3) f32: input, weight, gradient (fp8.h: Fp8Operand)
  float* amax = nullptr;         // (3) f32, or null
};

// ---- linear: out = act(inp . W + bias) ---------------------------------------------------------------------
// `groups` G > 1 computes G linears of one input side by side: group g reads weight + g * weight_stride and bias
// + g * bias_stride (elements), and writes columns [g*O, g*O + O) of out. The fused QKV projection is G = 3 (the
// q, k and v kernels are separate TF tensors at a uniform stride in the flat buffer).
struct LinearForward {
  void* out;                 // (N, ldo) A, columns [0, G*O) written
  void* pre;                 // (N, ldo) A: inp . W + bias, saved for GELU's backward; null unless act == GELU
  const void* inp;           // (N, I) A
  const void* weight;        // (I, O) for IN_OUT, (O, I) for OUT_IN, W
  const void* bias;          // (O) W, or null
  int N = 0, I = 0, O = 0;
  int groups = 1;
  size_t weight_stride = 0, bias_stride = 0;
  int ldo = 0;               // row stride of out and pre; 0 means groups * O
  WeightLayout layout = WeightLayout::IN_OUT;
  Activation act = Activation::NONE;
  GemmPrecision precision = {};
};

// The backward of a linear. dout is the gradient of the pre-activation inp . W + bias (a linear with an
// activation gets that from the op downstream of it: see dinp_act, or ActivationBackward).
//   dinp  = dout . W^T summed over groups (+= with accumulate_dinp)
//   dweight += inp^T . dout (IN_OUT) or dout^T . inp (OUT_IN), per group
//   dbias   += column sums of dout, per group
// dinp_act fuses the backward of the activation that produced inp (the FFN's GELU, the pooler's tanh):
//   dinp = (dout . W^T) * act'(x), x = dinp_act_saved (GELU: its pre-activation; TANH: its output), and
//   dinp_act_dbias += column sums of that dinp (the producing linear's bias gradient).
struct LinearBackward {
  void* dinp;                // (N, I) A, or null
  void* dweight;             // like weight, F, or null
  void* dbias;               // (O) F per group, or null
  const void* dout;          // (N, ldo) A
  const void* inp;           // (N, I) A
  const void* weight;        // W
  int N = 0, I = 0, O = 0;
  int groups = 1;
  size_t weight_stride = 0, bias_stride = 0;
  int ldo = 0;
  WeightLayout layout = WeightLayout::IN_OUT;
  bool accumulate_dinp = false;
  Activation dinp_act = Activation::NONE;  // with accumulate_dinp false
  const void* dinp_act_saved = nullptr;    // (N, I) A
  void* dinp_act_dbias = nullptr;          // (I) F, or null
  GemmPrecision precision = {};            // the forward's scales; amax[GRAD] records dout
};

// dinp = dout * act'(x) elementwise, x = saved (GELU: the pre-activation; TANH: the output).
struct ActivationBackward {
  void* dinp;                // (n) A
  const void* dout;          // (n) A
  const void* saved;         // (n) A
  size_t n = 0;
  Activation act = Activation::GELU;
};

// ---- embeddings: out = dropout(LayerNorm(word[ids] + type[types] + pos[positions])) ----------------------
// Positions are explicit: they restart at 0 in every sequence.
struct EmbeddingForward {
  void* out;                 // (N, C) A
  void* sum;                 // (N, C) A: the LayerNorm input, saved
  void* mean; void* rstd;    // (N) F, saved
  const int32_t* ids; const int32_t* types; const int32_t* positions;  // (N) i32
  const void* word;          // (V, C) W
  const void* type;          // (T, C) W
  const void* pos;           // (P, C) W
  const void* gamma; const void* beta;  // (C) W
  int N = 0, C = 0;
  Dropout dropout;           // element = flat index into out
};

struct EmbeddingBackward {
  void* dword; void* dtype; void* dpos;    // like the tables, F, accumulated; or null
  void* dgamma; void* dbeta;               // (C) F, accumulated
  void* scratch;                           // (2, N, C) A working memory
  const void* dout;                        // (N, C) A
  const void* sum; const void* mean; const void* rstd;
  const void* gamma;
  const int32_t* ids; const int32_t* types; const int32_t* positions;
  int N = 0, C = 0;
  Dropout dropout;
};

// ---- out = LayerNorm(dropout(inp + bias) + residual) ------------------------------------------------------
// The post-LN sub-layer end (twice per encoder layer), and with no bias, residual or dropout the MLM head's plain
// LayerNorm. LayerNorm over the last axis, eps 1e-12, biased variance.
struct ResidualLayerNormForward {
  void* out;                 // (N, C) A
  void* sum;                 // (N, C) A: the LayerNorm input, saved; null only when bias and residual are null
                             // and dropout is off (the input is then inp itself)
  void* mean; void* rstd;    // (N) F, saved
  const void* inp;           // (N, C) A
  const void* bias;          // (C) W, or null
  const void* residual;      // (N, C) A, or null
  const void* gamma; const void* beta;  // (C) W
  int N = 0, C = 0;
  Dropout dropout;           // element = flat index into inp
};

// dinp = gradient of inp (through dropout), dresidual = gradient of residual (= the LayerNorm input's gradient).
// dresidual is required whenever bias, residual or dropout is present.
struct ResidualLayerNormBackward {
  void* dinp;                // (N, C) A
  void* dresidual;           // (N, C) A, or null
  void* dbias;               // (C) F, accumulated; or null
  void* dgamma; void* dbeta; // (C) F, accumulated
  const void* dout;          // (N, C) A
  const void* sum;           // (N, C) A: the forward's sum (or its inp when sum was null)
  const void* mean; const void* rstd;
  const void* gamma;
  int N = 0, C = 0;
  Dropout dropout;
};

// ---- variable-length multi-head self-attention ---------------------------------------------------------------
// Sequences are compacted end to end: sequence s owns tokens [cu_seqlens[s], cu_seqlens[s+1]). Each query attends to
// the keys of its own sequence only, with scores q.k / sqrt(D), softmax over keys, dropout on the probabilities, and
// ctx = probs . v. Tokens at or past cu_seqlens[sequences] (the filler of a fixed token budget) get ctx 0, and
// sequences may have length 0. The dropout element of (sequence s, head h, query i, key j), positions within the
// sequence, is ((s * heads + h) * max_seqlen + i) * max_seqlen + j, so every backend draws the same mask.
// `saved` holds what the backend keeps for the backward (Backend::attention_saved_bytes): the probabilities on
// the CPU, per-row softmax statistics on a fused GPU kernel.
struct AttentionForward {
  void* ctx;                 // (N, H) A, H = heads * head_dim
  void* saved;
  const void* qkv;           // (N, 3H) A: q | k | v per token, head h at channels h*D .. h*D+D-1 of each third
  const int32_t* cu_seqlens; // (sequences + 1) i32
  int N = 0, sequences = 0;
  int max_seqlen = 0;        // longest sequence a batch may hold (the run's seq_len)
  int heads = 0, head_dim = 0;
  Dropout dropout;
};

struct AttentionBackward {
  void* dqkv;                // (N, 3H) A
  void* workspace;           // Backend::attention_workspace_bytes
  const void* dctx;          // (N, H) A
  const void* ctx;           // (N, H) A, the forward's output
  const void* qkv;           // (N, 3H) A
  const void* saved;
  const int32_t* cu_seqlens;
  int N = 0, sequences = 0, max_seqlen = 0, heads = 0, head_dim = 0;
  Dropout dropout;
};

// ---- rows of an activation (the heads read only the [CLS] tokens and the masked positions) -----------------
struct GatherForward {
  void* out;                 // (M, C) A
  const void* inp;           // (N, C) A
  const int32_t* rows;       // (M) i32, each in [0, N)
  int M = 0, C = 0;
};

// dinp = the scatter of dout into the gathered rows, zero elsewhere (+= with accumulate); repeated rows add up.
struct GatherBackward {
  void* dinp;                // (N, C) A
  const void* dout;          // (M, C) A
  const int32_t* rows;       // (M) i32
  int M = 0, N = 0, C = 0;
  bool accumulate = false;
};

// ---- softmax cross-entropy with its loss statistics ----------------------------------------------------------
// Rows of V logits (the MLM decoder's vocabulary, NSP's 2 classes), row stride ldl >= V (padded rows stay
// aligned). With loss_i = logsumexp(logits_i) - logits_i[label_i] and argmax_i the first maximum:
//   stats[0] += sum_i loss_weight_i * loss_i
//   stats[1] += sum_i count_weight_i * [argmax_i == label_i]
// A label outside [0, V) is an error on every row whose loss_weight or count_weight is not 0.
struct CrossEntropyForward {
  void* lse;                   // (M) F: the log-sum-exp of each row, saved
  double* stats;               // (2) f64, accumulated
  const void* logits;          // (M, ldl) A
  const int32_t* labels;       // (M) i32
  const float* loss_weight;    // (M) f32
  const float* count_weight;   // (M) f32
  int M = 0, V = 0, ldl = 0;
};

// dlogits = scale * loss_weight_i * (softmax(logits_i) - onehot(label_i)); dlogits may be logits itself.
struct CrossEntropyBackward {
  void* dlogits;               // (M, ldl) A
  const void* logits;          // (M, ldl) A
  const void* lse;             // (M) F
  const int32_t* labels;
  const float* loss_weight;
  int M = 0, V = 0, ldl = 0;
  float scale = 1;
};

// ---- the optimizer: global-norm clipping, gradient accumulation and LAMB, over flat buffers -----------------
// A flat buffer (core/tensor_table.h) is walked in chunks: a chunk is a slice [begin, end) of one tensor, so one
// chunk is one unit of parallel work and sums are taken per chunk, then in chunk order: results do not depend on
// how the work is spread. The chunk list lives in backend memory; an op may cover a sub-range of it (a ZeRO shard).
struct Chunks {
  const int32_t* tensor;       // (count) i32: the table index of each chunk's tensor
  const int64_t* begin;        // (count) i64: flat element offsets
  const int64_t* end;
  int first = 0, count = 0;    // the chunks this call covers: [first, first + count)
};

// The reference's tf.clip_by_global_norm over the chunks of g: scalars->grad_norm_sq = sum of g^2 (f64, chunk
// order), scalars->clip_scale = max_grad_norm / norm when norm > max_grad_norm, else 1; a non-finite norm counts
// in scalars->nonfinite (and clip_scale is left at 1). With `partial` set the op only writes the sum of squares
// into *partial (a shard's share, for the caller to sum across ranks and finish with GradientClipFinish).
struct GradientClip {
  StepScalars* scalars;
  double* partial;             // (1) f64, or null for the whole clip
  const void* grads;           // flat F
  Chunks chunks;
};

// Finishes a clip from the total sum of squares in scalars->grad_norm_sq (after a cross-rank sum of partials).
struct GradientClipFinish {
  StepScalars* scalars;
};

// sum += g * scalars->clip_scale * scale over the chunks, unless the last clip's norm (scalars->grad_norm_sq) is
// not finite.
// (Gradient accumulation as the reference's: each micro-batch clipped on its own, then added as g / n.)
struct GradientAccumulate {
  void* sum;                   // flat F
  const void* grads;           // flat F
  const StepScalars* scalars;
  Chunks chunks;
  float scale = 1;
};

// LAMB, stage 1: with g = grads * (*grad_scale, or 1 when null),
//   m = b1 m + (1 - b1) g,   v = b2 v + (1 - b2) g^2,
//   u = (m * inv_bias_correction1) / (sqrt(v * inv_bias_correction2) + eps) + decay * w,
// decay = weight_decay, or 0 for a tensor the table marks lamb_excluded; and per tensor of the chunks
//   norms[2t] += |w|^2, norms[2t + 1] += |u|^2   (f64, chunk order; w before the update).
// Does nothing when scalars->nonfinite > 0.
struct LambMoments {
  void* m; void* v;            // flat F
  double* norms;               // (2 * tensors) f64, accumulated
  const void* grads;           // flat F
  const void* master;          // flat F
  const uint8_t* excluded;     // (tensors) per tensor of the table
  const float* grad_scale;     // f32 in backend memory (a clip scale), or null
  const StepScalars* scalars;
  Chunks chunks;
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-6f, weight_decay = 0.01f;
  float one_minus_beta1 = 0.1f, one_minus_beta2 = 0.001f;  // formed in double by the caller, as the reference
};

// LAMB, stage 2: r = excluded or |w| = 0 or |u| = 0 ? 1 : |w| / |u| per tensor, then w -= r * learning_rate * u
// (u recomputed from m, v and the old w), and the weight copy (W) written from the new w when it is a separate
// buffer. Does nothing when scalars->nonfinite > 0.
struct LambApply {
  void* master;                // flat F
  void* weights;               // flat W, or null when the ops read the master weights directly
  const void* m; const void* v;
  const double* norms;         // (2 * tensors) f64, the totals over the whole buffer
  const uint8_t* excluded;
  const StepScalars* scalars;
  Chunks chunks;
  float epsilon = 1e-6f, weight_decay = 0.01f;
};

// ---- FP8 delayed scaling ---------------------------------------------------------------------------------------
// The scale update of `count` FP8 tensors (backends/fp8.h: DelayedScaling), tensor t being operand t % 3 of its GEMM:
// per tensor, a = the largest of its H history entries (NaN if any is NaN), scale = fp8_max / a / 2^margin where a
// is positive and finite and the result finite, else unchanged; then the history rolls one row (row h <- row h + 1,
// the last row <- row 0) and row 0, where the GEMMs record their amaxes (GemmPrecision::amax), is cleared.
struct Fp8ScaleUpdate {
  float* scale;                // (count) f32
  float* history;              // (history_len, count) f32
  int count = 0, history_len = 1;
  float margin = 0;
};

// ---- the step's schedule on the device -------------------------------------------------------------------------
// The step's scheduled scalars from the device's count of updates made, scalars->updates: learning_rate and the bias
// corrections by kmath::step_schedule_at (the host's optim/lr_schedule computes with the same function), and
// dropout.step = updates * dropout_stride + dropout_offset (mod 2^32); and the clip's fields start again
// (grad_norm_sq 0, clip_scale 1; nonfinite is the last record's, RecordStep). The step's first op, so a replayed step
// needs no upload.
struct ScheduleStep {
  StepScalars* scalars;
  kmath::StepSchedule schedule;  // schedule.train_steps > 0
  uint32_t dropout_stride = 0;   // dropout steps an update draws: micro-batches x ranks
  uint32_t dropout_offset = 0;   // this rank's first: its rank
};

// What ScheduleStep writes, for the CPU backend and the CUDA kernel alike.
BERT_HOST_DEVICE void apply_schedule_step(const ScheduleStep& p) {
  StepScalars& s = *p.scalars;
  const kmath::StepScheduleValues v = kmath::step_schedule_at(p.schedule, s.updates);
  s.learning_rate = static_cast<float>(v.learning_rate);
  s.inv_bias_correction1 = static_cast<float>(v.inv_bias_correction1);
  s.inv_bias_correction2 = static_cast<float>(v.inv_bias_correction2);
  s.dropout.step = static_cast<uint32_t>(static_cast<uint64_t>(s.updates) * p.dropout_stride + p.dropout_offset);
  s.grad_norm_sq = 0;
  s.clip_scale = 1;
}

// ---- the step's record on the device ---------------------------------------------------------------------------
// What the host learns of a step, without waiting for it: the step's last op files a StepRecord in slot
// scalars->updates % slots of a ring in backend memory, and the host reads the ring at its log points
// (harness/train_step.h). The first kRecordSums doubles are the step's sums across ranks.
inline constexpr int kRecordSums = 5;
struct StepRecord {
  double mlm_loss = 0, mlm_correct = 0, nsp_loss = 0, nsp_correct = 0;  // the model's LossStats, in its order
  double nonfinite = 0;     // clips that saw a non-finite norm, or 1 for a loss that is not finite (> 0: skipped)
  double grad_norm_sq = 0;  // of the gradient last clipped
  int64_t updates = 0;      // the update count the step ran at (its index in the run)
  float learning_rate = 0;  // the step's
  int32_t reserved = 0;
};

// Files the step's record and advances the update count:
//   ring[scalars->updates % slots] = {sums[0, kRecordSums), scalars' grad_norm_sq, updates and learning_rate},
// where sums are the step's LossStats and its non-finite count (after a cross-rank sum where there are ranks); the
// record's nonfinite is also set where the summed loss is not finite; then scalars->updates += 1 and
// scalars->nonfinite = 1 where the record is not finite, else 0. The step's last op. So a step that was not finite
// halts the updates on every rank alike: each later step counts as not finite and updates nothing, until the host,
// which learns of it at its next read and ends the run there, uploads the scalars again; the run stops with the
// parameters of that step.
struct RecordStep {
  StepScalars* scalars;
  const double* sums;          // (kRecordSums) f64
  StepRecord* ring;            // (slots)
  int slots = 1;
};

// What RecordStep writes, for the CPU backend and the CUDA kernel alike.
BERT_HOST_DEVICE void apply_record_step(const RecordStep& p) {
  StepScalars& s = *p.scalars;
  StepRecord& r = p.ring[static_cast<uint64_t>(s.updates) % static_cast<uint64_t>(p.slots)];
  r.mlm_loss = p.sums[0];
  r.mlm_correct = p.sums[1];
  r.nsp_loss = p.sums[2];
  r.nsp_correct = p.sums[3];
  const double loss = p.sums[0] + p.sums[2];
  r.nonfinite = p.sums[4] > 0 ? p.sums[4] : (loss - loss == 0 ? 0.0 : 1.0);  // x - x is 0 for finite x only
  r.grad_norm_sq = s.grad_norm_sq;
  r.updates = s.updates;
  r.learning_rate = s.learning_rate;
  s.updates += 1;
  s.nonfinite = r.nonfinite > 0 ? 1.0 : 0.0;  // 1, not the count: a halted step's count is not summed into the next
}

}  // namespace bertperf::ops
