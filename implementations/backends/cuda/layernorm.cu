// CUDA LayerNorm kernels (layernorm.h): one warp per row, 16-byte packs of 8 bf16 when C is a multiple of 8 (the
// dropout element of a pack then starts on a Philox block boundary), the formulas kernel_math.h's. Rows are read
// again from global memory (L1/L2) in each pass rather than kept in registers, so any C runs without spills.
#include "backends/cuda/layernorm.h"

#include <algorithm>

#include "backends/cuda/elementwise.h"

namespace bertperf::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

// Where dropout sits: on the sub-layer output before the residual add (PRE), or on the LayerNorm output (POST, the
// embeddings).
enum class DropoutAt : uint8_t { NONE, PRE, POST };

// Calls body(c, count) for this lane's share of a row: packs of 8 columns at c = 8 * lane + 256 * j, or single
// columns at c = lane + 32 * j.
template <int PACK, typename Body>
__device__ __forceinline__ void for_lane(int C, Body body) {
  const int lane = threadIdx.x & 31;
  for (int c = lane * PACK; c < C; c += 32 * PACK) body(c);
}

template <int PACK>
__device__ __forceinline__ void load(float (&v)[PACK], const bf16* p) {
  if constexpr (PACK == 8) {
    load8(v, p);
  } else {
    v[0] = __bfloat162float(*p);
  }
}
template <int PACK>
__device__ __forceinline__ void store(bf16* p, const float (&v)[PACK]) {
  if constexpr (PACK == 8) {
    store8(p, v);
  } else {
    *p = __float2bfloat16_rn(v[0]);
  }
}
template <int PACK>
__device__ __forceinline__ void store(float* p, const float (&v)[PACK]) {
  if constexpr (PACK == 8) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    *p = v[0];
  }
}
template <int PACK>
__device__ __forceinline__ void masks(float (&m)[PACK], RngKey key, uint64_t e, const DeviceDropout& d) {
  if constexpr (PACK == 8) {
    dropout_mult8(m, key, e, d.prob, d.scale);
  } else {
    m[0] = dropout_mult1(key, e, d.prob, d.scale);
  }
}

// What the forward kernel normalises, row by row: x = dropout(inp + bias) + residual (PRE or NONE), or x =
// word[ids] + type[types] + pos[positions] (the embeddings, with tables set); out = LayerNorm(x), then dropout for
// POST. x is computed in fp32 in every pass (it is cheaper to recompute than to keep), saved to sum in bf16 when
// sum is set, and the statistics are those of the fp32 x.
struct ForwardArgs {
  bf16* out;
  bf16* sum;
  float* mean;
  float* rstd;
  const bf16* inp;
  const bf16* bias;
  const bf16* residual;
  const bf16* gamma;
  const bf16* beta;
  const int32_t* ids;
  const int32_t* types;
  const int32_t* positions;
  const bf16* word;
  const bf16* type;
  const bf16* pos;
  int N, C;
  DeviceDropout dropout;
  DropoutAt at;
};

template <int PACK>
__device__ __forceinline__ void row_input(float (&v)[PACK], const ForwardArgs& a, int row, size_t base, int c,
                                          RngKey key) {
  if (a.word) {
    float t[PACK], q[PACK];
    load<PACK>(v, a.word + static_cast<size_t>(a.ids[row]) * a.C + c);
    load<PACK>(t, a.type + static_cast<size_t>(a.types[row]) * a.C + c);
    load<PACK>(q, a.pos + static_cast<size_t>(a.positions[row]) * a.C + c);
#pragma unroll
    for (int i = 0; i < PACK; ++i) v[i] = v[i] + t[i] + q[i];
    return;
  }
  load<PACK>(v, a.inp + base + c);
  if (a.bias) {
    float b[PACK];
    load<PACK>(b, a.bias + c);
#pragma unroll
    for (int i = 0; i < PACK; ++i) v[i] += b[i];
  }
  if (a.at == DropoutAt::PRE) {
    float m[PACK];
    masks<PACK>(m, key, base + c, a.dropout);
#pragma unroll
    for (int i = 0; i < PACK; ++i) v[i] *= m[i];
  }
  if (a.residual) {
    float r[PACK];
    load<PACK>(r, a.residual + base + c);
#pragma unroll
    for (int i = 0; i < PACK; ++i) v[i] += r[i];
  }
}

template <int PACK>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) layernorm_forward_kernel(ForwardArgs a) {
  const int row = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= a.N) return;
  const int C = a.C;
  const size_t base = static_cast<size_t>(row) * C;
  const RngKey key = a.dropout.key();
  float s = 0.0f;
  for_lane<PACK>(C, [&](int c) {
    float v[PACK];
    row_input<PACK>(v, a, row, base, c, key);
    if (a.sum) store<PACK>(a.sum + base + c, v);
#pragma unroll
    for (int i = 0; i < PACK; ++i) s += v[i];
  });
  const float mu = warp_sum(s) / static_cast<float>(C);
  float sq = 0.0f;
  for_lane<PACK>(C, [&](int c) {
    float v[PACK];
    row_input<PACK>(v, a, row, base, c, key);
#pragma unroll
    for (int i = 0; i < PACK; ++i) sq += (v[i] - mu) * (v[i] - mu);
  });
  const float rs = kmath::layernorm_rstd(warp_sum(sq) / static_cast<float>(C), DeviceSqrt{});
  for_lane<PACK>(C, [&](int c) {
    float v[PACK], g[PACK], b[PACK];
    row_input<PACK>(v, a, row, base, c, key);
    load<PACK>(g, a.gamma + c);
    load<PACK>(b, a.beta + c);
#pragma unroll
    for (int i = 0; i < PACK; ++i) v[i] = kmath::layernorm_out(v[i], mu, rs, g[i], b[i]);
    if (a.at == DropoutAt::POST) {
      float m[PACK];
      masks<PACK>(m, key, base + c, a.dropout);
#pragma unroll
      for (int i = 0; i < PACK; ++i) v[i] *= m[i];
    }
    store<PACK>(a.out + base + c, v);
  });
  if ((threadIdx.x & 31) == 0) {
    a.mean[row] = mu;
    a.rstd[row] = rs;
  }
}

// dx = LayerNorm backward of dy' = dy * mask (POST) or dy; with PRE, dx goes to dsum (the residual's gradient,
// when set) and dinp = dx * mask.
template <int PACK, typename DX>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    layernorm_backward_kernel(DX* dinp, bf16* dsum, const bf16* dout, const bf16* x, const float* mean,
                              const float* rstd, const bf16* gamma, int N, int C, DeviceDropout dropout,
                              DropoutAt at) {
  const int row = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= N) return;
  const size_t base = static_cast<size_t>(row) * C;
  const RngKey key = dropout.key();
  const float mu = mean[row], rs = rstd[row];
  float g_sum = 0.0f, gx_sum = 0.0f;
  for_lane<PACK>(C, [&](int c) {
    float dy[PACK], v[PACK], g[PACK];
    load<PACK>(dy, dout + base + c);
    load<PACK>(v, x + base + c);
    load<PACK>(g, gamma + c);
    if (at == DropoutAt::POST) {
      float m[PACK];
      masks<PACK>(m, key, base + c, dropout);
#pragma unroll
      for (int i = 0; i < PACK; ++i) dy[i] *= m[i];
    }
#pragma unroll
    for (int i = 0; i < PACK; ++i) {
      const float gi = dy[i] * g[i];
      g_sum += gi;
      gx_sum += gi * (v[i] - mu) * rs;
    }
  });
  const float g_mean = warp_sum(g_sum) / static_cast<float>(C), gx_mean = warp_sum(gx_sum) / static_cast<float>(C);
  for_lane<PACK>(C, [&](int c) {
    float dy[PACK], v[PACK], g[PACK];
    load<PACK>(dy, dout + base + c);
    load<PACK>(v, x + base + c);
    load<PACK>(g, gamma + c);
    if (at == DropoutAt::POST) {
      float m[PACK];
      masks<PACK>(m, key, base + c, dropout);
#pragma unroll
      for (int i = 0; i < PACK; ++i) dy[i] *= m[i];
    }
    float dx[PACK];
#pragma unroll
    for (int i = 0; i < PACK; ++i) dx[i] = kmath::layernorm_dx(dy[i], g[i], (v[i] - mu) * rs, rs, g_mean, gx_mean);
    if (dsum) {
      store<PACK>(dsum + base + c, dx);
      if (at == DropoutAt::PRE) {
        // The dropout backward from the bf16 residual gradient, as a separate dropout op would see it.
        load<PACK>(dx, dsum + base + c);
        float m[PACK];
        masks<PACK>(m, key, base + c, dropout);
#pragma unroll
        for (int i = 0; i < PACK; ++i) dx[i] *= m[i];
      }
    }
    store<PACK>(dinp + base + c, dx);
  });
}

// dgamma, dbeta partial sums over a chunk of rows: partial[chunk][c] and partial[chunk][C + c].
__global__ void layernorm_param_partials_kernel(float* partial, const bf16* dout, const bf16* x, const float* mean,
                                                const float* rstd, int N, int C, int rows_per_chunk,
                                                DeviceDropout dropout, bool post_dropout) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const RngKey key = dropout.key();
  const int r0 = blockIdx.y * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
  float acc_g = 0.0f, acc_b = 0.0f;
  for (int r = r0; r < r1; ++r) {
    const size_t at = static_cast<size_t>(r) * C + c;
    float dy = __bfloat162float(dout[at]);
    if (post_dropout) dy *= dropout_mult1(key, at, dropout.prob, dropout.scale);
    acc_g += dy * (__bfloat162float(x[at]) - mean[r]) * rstd[r];
    acc_b += dy;
  }
  partial[static_cast<size_t>(blockIdx.y) * 2 * C + c] = acc_g;
  partial[static_cast<size_t>(blockIdx.y) * 2 * C + C + c] = acc_b;
}

__global__ void layernorm_param_finish_kernel(float* dgamma, float* dbeta, const float* partial, int C, int chunks) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float g = 0.0f, b = 0.0f;
  for (int k = 0; k < chunks; ++k) {
    g += partial[static_cast<size_t>(k) * 2 * C + c];
    b += partial[static_cast<size_t>(k) * 2 * C + C + c];
  }
  if (dgamma) dgamma[c] += g;
  if (dbeta) dbeta[c] += b;
}

bool rows_pack(int C, std::initializer_list<const void*> ptrs) {
  if (C % 8 != 0) return false;
  for (const void* p : ptrs)
    if (p && !aligned16(p)) return false;
  return true;
}

void launch_forward(CudaContext& ctx, ForwardArgs a, const ops::Dropout& dropout) {
  if (a.N <= 0) return;
  BERT_CHECK(a.C > 0, "LayerNorm over rows of ", a.C);
  a.dropout = device_dropout(dropout);
  if (a.dropout.prob == 0.0f) a.at = DropoutAt::NONE;
  const unsigned blocks = ceil_div(a.N, kWarpsPerBlock);
  if (rows_pack(a.C, {a.out, a.sum, a.inp, a.bias, a.residual, a.gamma, a.beta, a.word, a.type, a.pos})) {
    layernorm_forward_kernel<8><<<blocks, kWarpsPerBlock * 32, 0, ctx.stream>>>(a);
  } else {
    layernorm_forward_kernel<1><<<blocks, kWarpsPerBlock * 32, 0, ctx.stream>>>(a);
  }
  CUDA_CHECK_LAUNCH();
}

template <typename DX>
void launch_backward(CudaContext& ctx, DeviceScratch& scratch, DX* dinp, bf16* dsum, float* dgamma, float* dbeta,
                     const bf16* dout, const bf16* x, const float* mean, const float* rstd, const bf16* gamma, int N,
                     int C, const ops::Dropout& dropout, DropoutAt at) {
  if (N <= 0) return;
  BERT_CHECK(C > 0, "LayerNorm over rows of ", C);
  const DeviceDropout d = device_dropout(dropout);
  if (d.prob == 0.0f) at = DropoutAt::NONE;
  const unsigned blocks = ceil_div(N, kWarpsPerBlock);
  if (rows_pack(C, {dinp, dsum, dout, x, gamma})) {
    layernorm_backward_kernel<8, DX><<<blocks, kWarpsPerBlock * 32, 0, ctx.stream>>>(dinp, dsum, dout, x, mean, rstd,
                                                                                 gamma, N, C, d, at);
  } else {
    layernorm_backward_kernel<1, DX><<<blocks, kWarpsPerBlock * 32, 0, ctx.stream>>>(dinp, dsum, dout, x, mean, rstd,
                                                                                 gamma, N, C, d, at);
  }
  CUDA_CHECK_LAUNCH();
  if (!dgamma && !dbeta) return;
  const int chunks = std::min(128, std::max(1, (N + 31) / 32));
  const int rows_per_chunk = (N + chunks - 1) / chunks;
  float* partial = scratch.as<float>(static_cast<size_t>(chunks) * 2 * C);
  constexpr int kThreads = 256;
  layernorm_param_partials_kernel<<<dim3(ceil_div(C, kThreads), chunks), kThreads, 0, ctx.stream>>>(
      partial, dout, x, mean, rstd, N, C, rows_per_chunk, d, at == DropoutAt::POST);
  CUDA_CHECK_LAUNCH();
  layernorm_param_finish_kernel<<<ceil_div(C, kThreads), kThreads, 0, ctx.stream>>>(dgamma, dbeta, partial, C, chunks);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

DeviceDropout device_dropout(const ops::Dropout& d) {
  BERT_CHECK(d.prob >= 0.0f && d.prob < 1.0f, "dropout probability ", d.prob, " is outside [0, 1)");
  BERT_CHECK(d.prob == 0.0f || d.counter, "dropout with probability ", d.prob, " has no counter");
  return {d.prob, 1.0f / (1.0f - d.prob), d.prob > 0.0f ? d.counter : nullptr, d.step_offset, d.site};
}

void residual_layernorm_forward(CudaContext& ctx, const ops::ResidualLayerNormForward& p) {
  const bool fused = p.bias || p.residual || p.dropout.prob > 0.0f;
  BERT_CHECK(!fused || p.sum, "residual LayerNorm with a bias, residual or dropout must save its sum");
  bf16* sum = static_cast<bf16*>(p.sum);
  if (!fused && sum && p.sum != p.inp) {
    CUDA_CHECK(cudaMemcpyAsync(sum, p.inp, static_cast<size_t>(p.N) * p.C * sizeof(bf16), cudaMemcpyDeviceToDevice,
                               ctx.stream));
  }
  ForwardArgs a{};
  a.out = static_cast<bf16*>(p.out);
  a.sum = fused ? sum : nullptr;
  a.mean = static_cast<float*>(p.mean);
  a.rstd = static_cast<float*>(p.rstd);
  a.inp = static_cast<const bf16*>(p.inp);
  a.bias = static_cast<const bf16*>(p.bias);
  a.residual = static_cast<const bf16*>(p.residual);
  a.gamma = static_cast<const bf16*>(p.gamma);
  a.beta = static_cast<const bf16*>(p.beta);
  a.N = p.N;
  a.C = p.C;
  a.at = DropoutAt::PRE;
  launch_forward(ctx, a, p.dropout);
}

void residual_layernorm_backward(CudaContext& ctx, OpScratch& scratch, const ops::ResidualLayerNormBackward& p) {
  BERT_CHECK(p.dresidual || (!p.dbias && p.dropout.prob == 0.0f),
             "residual LayerNorm backward with a bias or dropout needs dresidual");
  launch_backward(ctx, scratch.reduce, static_cast<bf16*>(p.dinp), static_cast<bf16*>(p.dresidual),
                  static_cast<float*>(p.dgamma), static_cast<float*>(p.dbeta), static_cast<const bf16*>(p.dout),
                  static_cast<const bf16*>(p.sum), static_cast<const float*>(p.mean),
                  static_cast<const float*>(p.rstd), static_cast<const bf16*>(p.gamma), p.N, p.C, p.dropout,
                  DropoutAt::PRE);
  if (p.dbias)
    add_column_sums(ctx, scratch.bias_grad, static_cast<float*>(p.dbias), static_cast<const bf16*>(p.dinp), p.N, p.C,
                    p.C);
}

void embedding_layernorm_forward(CudaContext& ctx, const ops::EmbeddingForward& p) {
  ForwardArgs a{};
  a.out = static_cast<bf16*>(p.out);
  a.sum = static_cast<bf16*>(p.sum);
  a.mean = static_cast<float*>(p.mean);
  a.rstd = static_cast<float*>(p.rstd);
  a.gamma = static_cast<const bf16*>(p.gamma);
  a.beta = static_cast<const bf16*>(p.beta);
  a.ids = p.ids;
  a.types = p.types;
  a.positions = p.positions;
  a.word = static_cast<const bf16*>(p.word);
  a.type = static_cast<const bf16*>(p.type);
  a.pos = static_cast<const bf16*>(p.pos);
  a.N = p.N;
  a.C = p.C;
  a.at = DropoutAt::POST;
  launch_forward(ctx, a, p.dropout);
}

void layernorm_dropout_backward(CudaContext& ctx, DeviceScratch& scratch, float* dx, float* dgamma, float* dbeta,
                                const bf16* dy, const bf16* x, const float* mean, const float* rstd,
                                const bf16* gamma, int N, int C, const ops::Dropout& dropout) {
  launch_backward(ctx, scratch, dx, nullptr, dgamma, dbeta, dy, x, mean, rstd, gamma, N, C, dropout,
                  DropoutAt::POST);
}

}  // namespace bertperf::cuda
