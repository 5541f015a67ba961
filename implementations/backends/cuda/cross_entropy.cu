// CUDA softmax cross-entropy (cross_entropy.h): one block per row, an online max and exp-sum per thread combined
// with warp shuffles, the first argmax, and the row statistics summed in row order by a one-block finish.
#include "backends/cuda/cross_entropy.h"

#include <cmath>

#include "backends/cuda/cuda_common.cuh"

namespace bertperf::cuda {

namespace {

constexpr int kThreads = 256;

// Running (max, sum of exp(x - max)) pairs, and the first index of the maximum.
struct RowState {
  float max;
  float sum;
  float best;
  int best_index;
};

__device__ __forceinline__ RowState combine(RowState a, RowState b) {
  RowState r;
  r.max = fmaxf(a.max, b.max);
  r.sum = (a.sum > 0.0f ? a.sum * expf(a.max - r.max) : 0.0f) + (b.sum > 0.0f ? b.sum * expf(b.max - r.max) : 0.0f);
  const bool take_b = b.best > a.best || (b.best == a.best && b.best_index < a.best_index);
  r.best = take_b ? b.best : a.best;
  r.best_index = take_b ? b.best_index : a.best_index;
  return r;
}

__device__ __forceinline__ RowState shuffle(RowState s, int offset) {
  RowState o;
  o.max = __shfl_xor_sync(0xFFFFFFFFu, s.max, offset);
  o.sum = __shfl_xor_sync(0xFFFFFFFFu, s.sum, offset);
  o.best = __shfl_xor_sync(0xFFFFFFFFu, s.best, offset);
  o.best_index = __shfl_xor_sync(0xFFFFFFFFu, s.best_index, offset);
  return o;
}

__global__ void __launch_bounds__(kThreads)
    cross_entropy_forward_kernel(float* lse, double* row_stats, const bf16* logits, const int32_t* labels,
                                 const float* loss_weight, const float* count_weight, int V, size_t ld) {
  __shared__ RowState warp_states[kThreads / 32];
  const int row = blockIdx.x;
  const bf16* x = logits + static_cast<size_t>(row) * ld;
  RowState s{-INFINITY, 0.0f, -INFINITY, V};
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float v = __bfloat162float(x[j]);
    if (v > s.max) {
      s.sum = s.sum * expf(s.max - v) + 1.0f;
      s.max = v;
    } else {
      s.sum += expf(v - s.max);
    }
    if (v > s.best) {  // ascending j per thread: the first maximum
      s.best = v;
      s.best_index = j;
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) s = combine(s, shuffle(s, offset));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_states[warp] = s;
  __syncthreads();
  if (threadIdx.x != 0) return;
  RowState total = warp_states[0];
  for (int w = 1; w < kThreads / 32; ++w) total = combine(total, warp_states[w]);
  const double row_lse = static_cast<double>(total.max) + log(static_cast<double>(total.sum));
  lse[row] = static_cast<float>(row_lse);
  const float lw = loss_weight[row], cw = count_weight[row];
  const int label = labels[row];
  const bool weighted = lw != 0.0f || cw != 0.0f;
  if (weighted && (label < 0 || label >= V)) {
    row_stats[2 * row] = NAN;  // an invalid label: the loss turns NaN (cross_entropy.h)
    row_stats[2 * row + 1] = 0.0;
    return;
  }
  row_stats[2 * row] =
      lw != 0.0f ? lw * kmath::cross_entropy_loss(row_lse, static_cast<double>(__bfloat162float(x[label]))) : 0.0;
  row_stats[2 * row + 1] = cw != 0.0f && total.best_index == label ? static_cast<double>(cw) : 0.0;
}

// stats[k] += sum over rows of row_stats[2 row + k], one block, a fixed order.
__global__ void __launch_bounds__(1024) row_stats_finish_kernel(double* stats, const double* row_stats, int M) {
  __shared__ double shared[32];
  double loss = 0.0, hits = 0.0;
  for (int i = threadIdx.x; i < M; i += blockDim.x) {
    loss += row_stats[2 * i];
    hits += row_stats[2 * i + 1];
  }
  loss = block_sum(loss, shared);
  hits = block_sum(hits, shared);
  if (threadIdx.x == 0) {
    stats[0] += loss;
    stats[1] += hits;
  }
}

__global__ void __launch_bounds__(kThreads)
    cross_entropy_backward_kernel(bf16* dlogits, const bf16* logits, const float* lse, const int32_t* labels,
                                  const float* loss_weight, int V, size_t ld, float scale) {
  const int row = blockIdx.x;
  const bf16* x = logits + static_cast<size_t>(row) * ld;
  bf16* dx = dlogits + static_cast<size_t>(row) * ld;
  const float s = scale * loss_weight[row];
  const int label = labels[row];
  const float row_lse = lse[row];
  const bool bad = s != 0.0f && (label < 0 || label >= V);
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    // dx may be x: each element is read before this thread writes it.
    const float g = s == 0.0f ? 0.0f
                    : bad     ? NAN
                              : kmath::cross_entropy_grad(__bfloat162float(x[j]), row_lse, j == label, s, DeviceExp{});
    dx[j] = __float2bfloat16_rn(g);
  }
}

}  // namespace

void cross_entropy_forward(CudaContext& ctx, OpScratch& scratch, const ops::CrossEntropyForward& p) {
  const size_t ld = p.ldl ? p.ldl : p.V;
  BERT_CHECK(p.V > 0 && ld >= static_cast<size_t>(p.V), "cross-entropy rows of ", p.V, " logits in a stride of ", ld);
  if (p.M <= 0) return;
  double* row_stats = scratch.reduce.as<double>(2 * static_cast<size_t>(p.M));
  cross_entropy_forward_kernel<<<p.M, kThreads, 0, ctx.stream>>>(static_cast<float*>(p.lse), row_stats,
                                                                 static_cast<const bf16*>(p.logits), p.labels,
                                                                 p.loss_weight, p.count_weight, p.V, ld);
  CUDA_CHECK_LAUNCH();
  row_stats_finish_kernel<<<1, 1024, 0, ctx.stream>>>(p.stats, row_stats, p.M);
  CUDA_CHECK_LAUNCH();
}

void cross_entropy_backward(CudaContext& ctx, const ops::CrossEntropyBackward& p) {
  const size_t ld = p.ldl ? p.ldl : p.V;
  BERT_CHECK(p.V > 0 && ld >= static_cast<size_t>(p.V), "cross-entropy rows of ", p.V, " logits in a stride of ", ld);
  if (p.M <= 0) return;
  cross_entropy_backward_kernel<<<p.M, kThreads, 0, ctx.stream>>>(
      static_cast<bf16*>(p.dlogits), static_cast<const bf16*>(p.logits), static_cast<const float*>(p.lse), p.labels,
      p.loss_weight, p.V, ld, p.scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace bertperf::cuda
