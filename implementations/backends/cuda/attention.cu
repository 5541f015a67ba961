// CUDA variable-length multi-head self-attention (attention.h, attention_impl.h): the entry points that choose
// between cuDNN's fused SDPA and our kernel, the index tensors cuDNN reads, and our kernel, forward and backward.
//
// Our kernel, for each (sequence s, head h), with P = softmax(scale q.k^T) row by row, Z the dropout multipliers
// (0 or 1/(1-p), ops.h's Philox masks) and lse_i the log-sum-exp of row i:
//   forward   ctx_i = sum_j P_ij Z_ij v_j                         one warp per query row; saves lse_i
//   backward  D_i = dctx_i . ctx_i   (= sum_j P_ij dP_ij even with dropout, since ctx_i = sum_j P_ij Z_ij v_j)
//             dS_ij = P_ij (Z_ij dctx_i . v_j - D_i)
//             dq_i = scale sum_j dS_ij k_j                        one warp per query row; writes D_i to workspace
//             dk_j = scale sum_i dS_ij q_i, dv_j = sum_i P_ij Z_ij dctx_i   one warp per key row
// Lanes take 32 keys (or queries) at a time, each computing one score, then broadcast the weights with shuffles
// while every lane accumulates its channels (head_dim / 32 of them): no atomics, so results are deterministic.
#include "backends/cuda/attention.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/cuda/attention_impl.h"
#include "backends/kernel_math.h"
#include "core/buffer.h"

namespace bertperf::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 4;
constexpr int kMaxHeadDim = 128;               // our kernel keeps head_dim / 32 channels per lane in registers
constexpr int kMaxChannels = kMaxHeadDim / kWarp;

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float load(const bf16* x) { return __bfloat162float(*x); }

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xFFFFFFFFu, x, o);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xFFFFFFFFu, x, o));
  return x;
}

// What every kernel reads: the layout, the packed rows and the dropout key.
struct Params {
  const int32_t* cu;
  int sequences, heads, head_dim, max_seqlen;
  int H;                 // heads * head_dim
  float score_scale;     // 1 / sqrt(head_dim)
  float drop_prob, keep_scale;
  const ops::DropoutCounter* counter;  // null without dropout
  uint32_t step_offset, site;
};

__device__ __forceinline__ RngKey rng_key(const Params& p) {
  if (p.drop_prob == 0.0f) return RngKey{0, 0, p.site};
  return RngKey{p.counter->seed, p.counter->step + p.step_offset, p.site};
}

// Z_ij for (sequence s, head h, query i, key j).
__device__ __forceinline__ float dropout_z(const Params& p, RngKey key, int s, int h, int i, int j) {
  if (p.drop_prob == 0.0f) return 1.0f;
  return kmath::dropout_multiplier(key, kmath::attention_dropout_element(s, h, i, j, p.heads, p.max_seqlen),
                                   p.drop_prob, p.keep_scale);
}

// A warp's row: which (sequence, head, position) it owns, or none. Blocks are laid out (sequence, head, row tile).
struct Row {
  int s, h, i, len, first;
  bool valid;
};

__device__ __forceinline__ Row warp_row(const Params& p) {
  const int tiles = (p.max_seqlen + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int b = blockIdx.x;
  Row r;
  r.s = b / (p.heads * tiles);
  r.h = (b / tiles) % p.heads;
  r.i = (b % tiles) * kWarpsPerBlock + static_cast<int>(threadIdx.x) / kWarp;
  r.first = p.cu[r.s];
  r.len = p.cu[r.s + 1] - r.first;
  r.valid = r.i < r.len;
  return r;
}

// Channels d = lane + 32 c of one head's row of a (N, ld) bf16 matrix, into registers.
__device__ __forceinline__ void load_row(float (&x)[kMaxChannels], const bf16* row, int head_dim, int lane) {
#pragma unroll
  for (int c = 0; c < kMaxChannels; ++c) {
    const int d = lane + c * kWarp;
    x[c] = d < head_dim ? load(row + d) : 0.0f;
  }
}

__device__ __forceinline__ float dot_row(const float (&x)[kMaxChannels], const bf16* row, int head_dim, int lane) {
  float acc = 0;
#pragma unroll
  for (int c = 0; c < kMaxChannels; ++c) {
    const int d = lane + c * kWarp;
    if (d < head_dim) acc += x[c] * load(row + d);
  }
  return warp_sum(acc);
}

// A full dot product of two head rows by one lane (the lane owns one key or query of a tile of 32).
__device__ __forceinline__ float lane_dot(const bf16* a, const bf16* b, int head_dim) {
  float acc = 0;
  for (int d = 0; d < head_dim; ++d) acc += load(a + d) * load(b + d);
  return acc;
}

// Forward: one warp per query row. Pass 1: the row's max and sum of exponentials; pass 2: ctx.
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock)
    attention_forward_kernel(Params p, bf16* ctx, float* stats, const bf16* qkv) {
  const Row r = warp_row(p);
  if (!r.valid) return;
  const int lane = static_cast<int>(threadIdx.x) % kWarp, D = p.head_dim, ld = 3 * p.H;
  const bf16* q = qkv + static_cast<size_t>(r.first + r.i) * ld + r.h * D;
  const bf16* k0 = qkv + static_cast<size_t>(r.first) * ld + p.H + r.h * D;
  const bf16* v0 = k0 + p.H;
  float row_max = -INFINITY, row_sum = 0;
  for (int j0 = 0; j0 < r.len; j0 += kWarp) {
    const int j = j0 + lane;
    const float score = j < r.len ? lane_dot(q, k0 + static_cast<size_t>(j) * ld, D) * p.score_scale : -INFINITY;
    const float tile_max = warp_max(score);
    const float new_max = fmaxf(row_max, tile_max);
    const float e = j < r.len ? __expf(score - new_max) : 0.0f;
    row_sum = row_sum * __expf(row_max - new_max) + warp_sum(e);
    row_max = new_max;
  }
  const float lse = row_max + __logf(row_sum);
  const RngKey key = rng_key(p);
  float acc[kMaxChannels] = {};
  for (int j0 = 0; j0 < r.len; j0 += kWarp) {
    const int j = j0 + lane;
    float w = 0;
    if (j < r.len) {
      const float score = lane_dot(q, k0 + static_cast<size_t>(j) * ld, D) * p.score_scale;
      w = __expf(score - lse) * dropout_z(p, key, r.s, r.h, r.i, j);
    }
    const int count = min(kWarp, r.len - j0);
    for (int t = 0; t < count; ++t) {
      const float wt = __shfl_sync(0xFFFFFFFFu, w, t);
      const bf16* v = v0 + static_cast<size_t>(j0 + t) * ld;
#pragma unroll
      for (int c = 0; c < kMaxChannels; ++c) {
        const int d = lane + c * kWarp;
        if (d < D) acc[c] += wt * load(v + d);
      }
    }
  }
  bf16* out = ctx + static_cast<size_t>(r.first + r.i) * p.H + r.h * D;
#pragma unroll
  for (int c = 0; c < kMaxChannels; ++c) {
    const int d = lane + c * kWarp;
    if (d < D) out[d] = __float2bfloat16(acc[c]);
  }
  if (lane == 0) stats[(static_cast<size_t>(r.s) * p.heads + r.h) * p.max_seqlen + r.i] = lse;
}

// Backward, query rows: D_i into `delta`, then dq_i.
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock)
    attention_backward_dq_kernel(Params p, bf16* dqkv, float* delta, const bf16* dctx, const bf16* ctx,
                                 const bf16* qkv, const float* stats) {
  const Row r = warp_row(p);
  if (!r.valid) return;
  const int lane = static_cast<int>(threadIdx.x) % kWarp, D = p.head_dim, ld = 3 * p.H;
  const size_t row = static_cast<size_t>(r.first + r.i);
  const bf16* q = qkv + row * ld + r.h * D;
  const bf16* k0 = qkv + static_cast<size_t>(r.first) * ld + p.H + r.h * D;
  const bf16* v0 = k0 + p.H;
  float dout[kMaxChannels];
  load_row(dout, dctx + row * p.H + r.h * D, D, lane);
  const float Di = dot_row(dout, ctx + row * p.H + r.h * D, D, lane);
  const size_t stat = (static_cast<size_t>(r.s) * p.heads + r.h) * p.max_seqlen + r.i;
  const float lse = stats[stat];
  if (lane == 0) delta[stat] = Di;
  const RngKey key = rng_key(p);
  const bf16* dout_row = dctx + row * p.H + r.h * D;
  float acc[kMaxChannels] = {};
  for (int j0 = 0; j0 < r.len; j0 += kWarp) {
    const int j = j0 + lane;
    float ds = 0;
    if (j < r.len) {
      const bf16* kj = k0 + static_cast<size_t>(j) * ld;
      const float P = __expf(lane_dot(q, kj, D) * p.score_scale - lse);
      const float dP = lane_dot(dout_row, v0 + static_cast<size_t>(j) * ld, D) * dropout_z(p, key, r.s, r.h, r.i, j);
      ds = P * (dP - Di);
    }
    const int count = min(kWarp, r.len - j0);
    for (int t = 0; t < count; ++t) {
      const float w = __shfl_sync(0xFFFFFFFFu, ds, t);
      const bf16* kt = k0 + static_cast<size_t>(j0 + t) * ld;
#pragma unroll
      for (int c = 0; c < kMaxChannels; ++c) {
        const int d = lane + c * kWarp;
        if (d < D) acc[c] += w * load(kt + d);
      }
    }
  }
  bf16* dq = dqkv + row * ld + r.h * D;
#pragma unroll
  for (int c = 0; c < kMaxChannels; ++c) {
    const int d = lane + c * kWarp;
    if (d < D) dq[d] = __float2bfloat16(acc[c] * p.score_scale);
  }
}

// Backward, key rows: dk_j and dv_j (after the dq kernel wrote every D_i).
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock)
    attention_backward_dkv_kernel(Params p, bf16* dqkv, const float* delta, const bf16* dctx, const bf16* qkv,
                                  const float* stats) {
  const Row r = warp_row(p);  // r.i is the key j here
  if (!r.valid) return;
  const int lane = static_cast<int>(threadIdx.x) % kWarp, D = p.head_dim, ld = 3 * p.H;
  const int j = r.i;
  const size_t row = static_cast<size_t>(r.first + j);
  const bf16* q0 = qkv + static_cast<size_t>(r.first) * ld + r.h * D;
  const bf16* kj = qkv + row * ld + p.H + r.h * D;
  const bf16* vj = kj + p.H;
  const bf16* dout0 = dctx + static_cast<size_t>(r.first) * p.H + r.h * D;
  const size_t stat0 = (static_cast<size_t>(r.s) * p.heads + r.h) * p.max_seqlen;
  const RngKey key = rng_key(p);
  float dk[kMaxChannels] = {}, dv[kMaxChannels] = {};
  for (int i0 = 0; i0 < r.len; i0 += kWarp) {
    const int i = i0 + lane;
    float ds = 0, pz = 0;
    if (i < r.len) {
      const bf16* qi = q0 + static_cast<size_t>(i) * ld;
      const bf16* douti = dout0 + static_cast<size_t>(i) * p.H;
      const float P = __expf(lane_dot(qi, kj, D) * p.score_scale - stats[stat0 + i]);
      const float Z = dropout_z(p, key, r.s, r.h, i, j);
      pz = P * Z;
      ds = P * (lane_dot(douti, vj, D) * Z - delta[stat0 + i]);
    }
    const int count = min(kWarp, r.len - i0);
    for (int t = 0; t < count; ++t) {
      const float ws = __shfl_sync(0xFFFFFFFFu, ds, t), wp = __shfl_sync(0xFFFFFFFFu, pz, t);
      const bf16* qt = q0 + static_cast<size_t>(i0 + t) * ld;
      const bf16* dt = dout0 + static_cast<size_t>(i0 + t) * p.H;
#pragma unroll
      for (int c = 0; c < kMaxChannels; ++c) {
        const int d = lane + c * kWarp;
        if (d < D) {
          dk[c] += ws * load(qt + d);
          dv[c] += wp * load(dt + d);
        }
      }
    }
  }
  bf16* dk_row = dqkv + row * ld + p.H + r.h * D;
  bf16* dv_row = dk_row + p.H;
#pragma unroll
  for (int c = 0; c < kMaxChannels; ++c) {
    const int d = lane + c * kWarp;
    if (d < D) {
      dk_row[d] = __float2bfloat16(dk[c] * p.score_scale);
      dv_row[d] = __float2bfloat16(dv[c]);
    }
  }
}

// The index tensors cuDNN reads, from cu_seqlens; and cuDNN's dropout (seed, offset) from ops.h's key, so every
// (step, micro-batch, site) draws a fresh mask and a run is reproducible from its seed.
__global__ void attention_prepare_kernel(const int32_t* cu, int sequences, int H, int32_t* seq_len,
                                         int32_t* ragged_qkv, int32_t* ragged_ctx, int64_t* rng,
                                         const ops::DropoutCounter* counter, uint32_t step_offset, uint32_t site) {
  for (int s = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); s <= sequences;
       s += static_cast<int>(gridDim.x * blockDim.x)) {
    ragged_qkv[s] = cu[s] * 3 * H;
    ragged_ctx[s] = cu[s] * H;
    if (s < sequences) seq_len[s] = cu[s + 1] - cu[s];
    if (s == 0) {
      uint64_t seed = 0;
      if (counter) {
        const RngKey key{counter->seed, counter->step + step_offset, site};
        seed = (static_cast<uint64_t>(philox_bits(key, 1)) << 32) | philox_bits(key, 0);
      }
      rng[0] = static_cast<int64_t>(seed & 0x7FFFFFFFFFFFFFFFull);
      rng[1] = 0;
    }
  }
}

__global__ void zero_filler_kernel(bf16* x, const int32_t* cu, int sequences, int N, int cols) {
  const size_t begin = static_cast<size_t>(cu[sequences]) * cols, end = static_cast<size_t>(N) * cols;
  for (size_t e = begin + blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; e < end;
       e += static_cast<size_t>(gridDim.x) * blockDim.x)
    x[e] = __float2bfloat16(0.0f);
}

Params make_params(const int32_t* cu, int sequences, int heads, int head_dim, int max_seqlen,
                   const ops::Dropout& d) {
  Params p{};
  p.cu = cu;
  p.sequences = sequences;
  p.heads = heads;
  p.head_dim = head_dim;
  p.max_seqlen = max_seqlen;
  p.H = heads * head_dim;
  p.score_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  p.drop_prob = d.prob;
  p.keep_scale = d.prob > 0.0f ? 1.0f / (1.0f - d.prob) : 1.0f;
  p.counter = d.prob > 0.0f ? d.counter : nullptr;
  p.step_offset = d.step_offset;
  p.site = d.site;
  return p;
}

unsigned row_blocks(int sequences, int heads, int max_seqlen) {
  const size_t tiles = (static_cast<size_t>(max_seqlen) + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const size_t blocks = static_cast<size_t>(sequences) * heads * tiles;
  BERT_CHECK(blocks > 0 && blocks < (1u << 31), "attention: ", sequences, " sequences x ", heads,
             " heads x max_seqlen ", max_seqlen, " is outside the kernel's grid");
  return static_cast<unsigned>(blocks);
}

void check_shape(int N, int sequences, int max_seqlen, int heads, int head_dim, const ops::Dropout& d) {
  BERT_CHECK(N >= 0 && sequences > 0 && max_seqlen > 0 && heads > 0 && head_dim > 0, "attention: N ", N, ", ",
             sequences, " sequences, max_seqlen ", max_seqlen, ", ", heads, "x", head_dim);
  BERT_CHECK(static_cast<int64_t>(N) * 3 * heads * head_dim < (int64_t{1} << 31),
             "attention: ", N, " tokens of 3 x ", heads * head_dim, " channels overflow cuDNN's 32-bit offsets");
  BERT_CHECK(d.prob >= 0.0f && d.prob < 1.0f, "attention dropout probability ", d.prob, " is outside [0, 1)");
  BERT_CHECK(d.prob == 0.0f || d.counter, "attention dropout with probability ", d.prob, " has no counter");
}

}  // namespace

AttentionSaved::AttentionSaved(int sequences, int max_seqlen, int heads) {
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    const size_t here = at;
    at = align_up(at + bytes);
    return here;
  };
  stats = take(static_cast<size_t>(sequences) * heads * max_seqlen * sizeof(float));
  seq_len = take(static_cast<size_t>(sequences) * sizeof(int32_t));
  ragged_qkv = take((static_cast<size_t>(sequences) + 1) * sizeof(int32_t));
  ragged_ctx = take((static_cast<size_t>(sequences) + 1) * sizeof(int32_t));
  rng = take(2 * sizeof(int64_t));
  bytes = at;
}

void attention_prepare(CudaContext& ctx, const ops::AttentionForward& p, const AttentionSaved& l) {
  unsigned char* base = static_cast<unsigned char*>(p.saved);
  const int threads = 256;
  const int blocks = std::min((p.sequences + threads) / threads, 1024);
  attention_prepare_kernel<<<blocks, threads, 0, ctx.stream>>>(
      p.cu_seqlens, p.sequences, p.heads * p.head_dim, reinterpret_cast<int32_t*>(base + l.seq_len),
      reinterpret_cast<int32_t*>(base + l.ragged_qkv), reinterpret_cast<int32_t*>(base + l.ragged_ctx),
      reinterpret_cast<int64_t*>(base + l.rng), p.dropout.prob > 0.0f ? p.dropout.counter : nullptr,
      p.dropout.step_offset, p.dropout.site);
  CUDA_CHECK_LAUNCH();
}

void attention_zero_filler(CudaContext& ctx, void* x, const int32_t* cu_seqlens, int sequences, int N, int cols) {
  if (N == 0) return;
  const int threads = 256;
  const size_t elements = static_cast<size_t>(N) * cols;
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>((elements + threads - 1) / threads, 4096));
  zero_filler_kernel<<<blocks, threads, 0, ctx.stream>>>(static_cast<bf16*>(x), cu_seqlens, sequences, N, cols);
  CUDA_CHECK_LAUNCH();
}

void kernel_attention_forward(CudaContext& ctx, const ops::AttentionForward& p, const AttentionSaved& l) {
  BERT_CHECK(p.head_dim <= kMaxHeadDim, "the attention kernel takes head sizes up to ", kMaxHeadDim, ", not ",
             p.head_dim);
  const Params k = make_params(p.cu_seqlens, p.sequences, p.heads, p.head_dim, p.max_seqlen, p.dropout);
  attention_forward_kernel<<<row_blocks(p.sequences, p.heads, p.max_seqlen), kWarp * kWarpsPerBlock, 0,
                             ctx.stream>>>(k, static_cast<bf16*>(p.ctx),
                                           reinterpret_cast<float*>(static_cast<unsigned char*>(p.saved) + l.stats),
                                           static_cast<const bf16*>(p.qkv));
  CUDA_CHECK_LAUNCH();
}

void kernel_attention_backward(CudaContext& ctx, const ops::AttentionBackward& p, const AttentionSaved& l) {
  BERT_CHECK(p.head_dim <= kMaxHeadDim, "the attention kernel takes head sizes up to ", kMaxHeadDim, ", not ",
             p.head_dim);
  const Params k = make_params(p.cu_seqlens, p.sequences, p.heads, p.head_dim, p.max_seqlen, p.dropout);
  const float* stats = reinterpret_cast<const float*>(static_cast<const unsigned char*>(p.saved) + l.stats);
  float* delta = static_cast<float*>(p.workspace);  // (sequences, heads, max_seqlen) f32
  const unsigned blocks = row_blocks(p.sequences, p.heads, p.max_seqlen);
  attention_backward_dq_kernel<<<blocks, kWarp * kWarpsPerBlock, 0, ctx.stream>>>(
      k, static_cast<bf16*>(p.dqkv), delta, static_cast<const bf16*>(p.dctx), static_cast<const bf16*>(p.ctx),
      static_cast<const bf16*>(p.qkv), stats);
  CUDA_CHECK_LAUNCH();
  attention_backward_dkv_kernel<<<blocks, kWarp * kWarpsPerBlock, 0, ctx.stream>>>(
      k, static_cast<bf16*>(p.dqkv), delta, static_cast<const bf16*>(p.dctx), static_cast<const bf16*>(p.qkv),
      stats);
  CUDA_CHECK_LAUNCH();
}

size_t attention_saved_bytes(int tokens, int sequences, int max_seqlen, int heads) {
  (void)tokens;
  return AttentionSaved(sequences, max_seqlen, heads).bytes;
}

size_t attention_workspace_bytes(int tokens, int sequences, int max_seqlen, int heads) {
  (void)tokens;
  return static_cast<size_t>(sequences) * heads * max_seqlen * sizeof(float);  // the kernel's D_i
}

AttentionRunner::AttentionRunner(const CudaContext& ctx, AttentionImpl mode, size_t cudnn_workspace_cap)
    : mode_(mode), cudnn_workspace_cap_(cudnn_workspace_cap), cudnn_(std::make_unique<CudnnAttention>(ctx)) {}

AttentionRunner::~AttentionRunner() = default;

// The implementation a shape runs on, decided at its first call.
bool AttentionRunner::use_cudnn(CudaContext& ctx, const AttentionShape& s) {
  auto found = on_cudnn_.find(s);
  if (found != on_cudnn_.end()) return found->second;
  // Every layout here may hold a zero-length sequence: ops.h allows them anywhere, and a static-shape batch fills
  // its spare sequence slots with them, so the shape alone cannot rule them out.
  const bool may_hold_empty = true;
  const CudnnShapeOps ops{[&] { return cudnn_->build(ctx, s); }, [&](size_t bytes) { cudnn_->reserve(bytes); }};
  const AttentionChoice choice = choose_attention(mode_, s.head_dim, static_cast<int>(cudnnGetVersion()), may_hold_empty,
                                                  cudnn_workspace_cap_, ops);
  // Once per shape: which implementation, and why not cuDNN where it could have been.
  const std::string shape = cat("cuda backend: attention of ", s.N, " tokens in ", s.sequences, " sequences of up to ",
                                s.max_seqlen, ", ", s.heads, " heads of ", s.head_dim, ", dropout ", s.drop_prob, ": ");
  if (choice.cudnn) {
    std::fprintf(stderr, "%scuDNN's fused SDPA (%s forward), %zu bytes of workspace%s%s%s\n", shape.c_str(),
                 family_name(choice.family), choice.workspace,
                 s.drop_prob > 0.0f ? "" : " for the forward (the backward's graph is built at its first call)",
                 choice.note.empty() ? "" : "; ", choice.note.c_str());
  } else if (!choice.note.empty()) {
    std::fprintf(stderr, "%sthis backend's kernel, not cuDNN's fused SDPA: %s\n", shape.c_str(), choice.note.c_str());
  }
  return on_cudnn_.emplace(s, choice.cudnn).first->second;
}

std::string AttentionRunner::path() const {
  bool cudnn = false, kernel = false;
  for (const auto* choices : {&on_cudnn_, &backward_on_cudnn_})
    for (const auto& [shape, on_cudnn] : *choices) (on_cudnn ? cudnn : kernel) = true;
  return cudnn && kernel ? "cudnn and kernel" : cudnn ? "cudnn" : kernel ? "kernel" : "";
}

void AttentionRunner::forward(CudaContext& ctx, const ops::AttentionForward& p) {
  check_shape(p.N, p.sequences, p.max_seqlen, p.heads, p.head_dim, p.dropout);
  const AttentionSaved layout(p.sequences, p.max_seqlen, p.heads);
  attention_prepare(ctx, p, layout);
  if (use_cudnn(ctx, {p.N, p.sequences, p.max_seqlen, p.heads, p.head_dim, p.dropout.prob}))
    cudnn_->forward(ctx, p, layout);
  else
    kernel_attention_forward(ctx, p, layout);
  attention_zero_filler(ctx, p.ctx, p.cu_seqlens, p.sequences, p.N, p.heads * p.head_dim);
}

// Whether a shape's backward runs on cuDNN, decided at its first backward. The forward chose for the shape; with
// dropout its backward was built with it and follows it (the masks must agree). Without, the backward's graph is built
// now, under the same rule; where cuDNN cannot run it, the kernel's backward reads the statistics cuDNN's forward
// saved (the same layout), and that is said once.
bool AttentionRunner::backward_on_cudnn(CudaContext& ctx, const AttentionShape& s) {
  if (!use_cudnn(ctx, s)) return false;
  if (s.drop_prob > 0.0f) return true;
  auto found = backward_on_cudnn_.find(s);
  if (found != backward_on_cudnn_.end()) return found->second;
  const CudnnShapeOps ops{[&] { return cudnn_->build_backward(ctx, s); },
                          [&](size_t bytes) { cudnn_->reserve(bytes); }};
  const AttentionChoice choice = choose_attention(mode_, s.head_dim, static_cast<int>(cudnnGetVersion()), true,
                                                  cudnn_workspace_cap_, ops);
  if (!choice.cudnn)
    std::fprintf(stderr, "cuda backend: attention backward of %d tokens in %d sequences of up to %d, %d heads of %d: "
                 "this backend's kernel after cuDNN's forward: %s\n", s.N, s.sequences, s.max_seqlen, s.heads,
                 s.head_dim, choice.note.c_str());
  return backward_on_cudnn_.emplace(s, choice.cudnn).first->second;
}

void AttentionRunner::backward(CudaContext& ctx, const ops::AttentionBackward& p) {
  check_shape(p.N, p.sequences, p.max_seqlen, p.heads, p.head_dim, p.dropout);
  const AttentionSaved layout(p.sequences, p.max_seqlen, p.heads);
  if (backward_on_cudnn(ctx, {p.N, p.sequences, p.max_seqlen, p.heads, p.head_dim, p.dropout.prob}))
    cudnn_->backward(ctx, p, layout);
  else
    kernel_attention_backward(ctx, p, layout);
  attention_zero_filler(ctx, p.dqkv, p.cu_seqlens, p.sequences, p.N, 3 * p.heads * p.head_dim);
}

}  // namespace bertperf::cuda
