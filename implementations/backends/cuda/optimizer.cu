// CUDA optimizer ops (optimizer.h). One block per chunk; per-chunk sums in f64 by a fixed tree, then finished in
// chunk order by the last block to arrive (a counter in scratch memory, zeroed by each call before its launch), so
// results do not depend on block timing. The element math is kernel_math.h's.
#include "backends/cuda/optimizer.h"

#include <cmath>

#include "backends/cuda/cuda_common.cuh"
#include "backends/fp8.h"

namespace bertperf::cuda {

namespace {

constexpr int kThreads = 256;

struct ChunkRange {
  size_t begin, n;
  int32_t tensor;
};

__device__ __forceinline__ ChunkRange chunk_at(const ops::Chunks& chunks, int c) {
  const int at = chunks.first + c;
  return {static_cast<size_t>(chunks.begin[at]), static_cast<size_t>(chunks.end[at] - chunks.begin[at]),
          chunks.tensor[at]};
}

// True in every thread of the last block to finish (after all blocks' writes of `partial` are visible; it reads
// them with __ldcg, past L1).
__device__ __forceinline__ bool last_block_done(int* counter) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1) == static_cast<int>(gridDim.x) - 1;
  __syncthreads();
  if (last) __threadfence();
  return last;
}

__device__ __forceinline__ void finish_clip(ops::StepScalars* s) {
  const double norm = sqrt(s->grad_norm_sq);
  const double max_norm = s->max_grad_norm;
  s->clip_scale = 1.0f;
  if (!isfinite(norm)) {
    ++s->nonfinite;
  } else if (norm > max_norm) {
    s->clip_scale = static_cast<float>(max_norm / norm);
  }
}

__global__ void __launch_bounds__(kThreads)
    gradient_clip_kernel(ops::StepScalars* scalars, double* partial_out, const float* grads, ops::Chunks chunks,
                         double* partial, int* counter) {
  __shared__ double shared[32];
  const ChunkRange r = chunk_at(chunks, blockIdx.x);
  const float* g = grads + r.begin;
  double s = 0.0;
  for (size_t i = threadIdx.x; i < r.n; i += blockDim.x) s += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  s = block_sum(s, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
  if (!last_block_done(counter)) return;
  double total = 0.0;
  for (int c = threadIdx.x; c < chunks.count; c += blockDim.x) total += __ldcg(partial + c);
  total = block_sum(total, shared);
  if (threadIdx.x != 0) return;
  if (partial_out) {
    *partial_out = total;
    return;
  }
  scalars->grad_norm_sq = total;
  finish_clip(scalars);
}

__global__ void gradient_clip_finish_kernel(ops::StepScalars* scalars) { finish_clip(scalars); }

__global__ void __launch_bounds__(kThreads)
    gradient_accumulate_kernel(float* sum, const float* grads, const ops::StepScalars* scalars, ops::Chunks chunks,
                               float scale) {
  if (!isfinite(scalars->grad_norm_sq)) return;
  const float clip = scalars->clip_scale;
  const ChunkRange r = chunk_at(chunks, blockIdx.x);
  const float* x = grads + r.begin;
  float* y = sum + r.begin;
  for (size_t i = threadIdx.x; i < r.n; i += blockDim.x) y[i] += x[i] * clip * scale;
}

struct LambMomentArgs {
  float* m;
  float* v;
  double* norms;
  const float* grads;
  const float* master;
  const uint8_t* excluded;
  const float* grad_scale;
  const ops::StepScalars* scalars;
  ops::Chunks chunks;
  float beta1, beta2, epsilon, weight_decay, one_minus_beta1, one_minus_beta2;
};

__global__ void __launch_bounds__(kThreads) lamb_moments_kernel(LambMomentArgs a, double* partial, int* counter) {
  __shared__ double shared[32];
  if (a.scalars->nonfinite > 0) return;  // every block returns: nothing is finished either
  const ChunkRange r = chunk_at(a.chunks, blockIdx.x);
  const kmath::LambElementParams e{a.beta1,
                                   a.one_minus_beta1,
                                   a.beta2,
                                   a.one_minus_beta2,
                                   a.scalars->inv_bias_correction1,
                                   a.scalars->inv_bias_correction2,
                                   a.epsilon,
                                   a.excluded[r.tensor] ? 0.0f : a.weight_decay};
  const float scale = a.grad_scale ? *a.grad_scale : 1.0f;
  const float* g = a.grads + r.begin;
  const float* w = a.master + r.begin;
  float* m = a.m + r.begin;
  float* v = a.v + r.begin;
  double w_sq = 0.0, u_sq = 0.0;
  for (size_t i = threadIdx.x; i < r.n; i += blockDim.x) {
    float mi = m[i], vi = v[i];
    const float wi = w[i];
    kmath::lamb_moments(mi, vi, a.grad_scale ? g[i] * scale : g[i], e);
    m[i] = mi;
    v[i] = vi;
    const float u = kmath::lamb_direction(mi, vi, wi, e, DeviceSqrt{});
    w_sq += static_cast<double>(wi) * static_cast<double>(wi);
    u_sq += static_cast<double>(u) * static_cast<double>(u);
  }
  w_sq = block_sum(w_sq, shared);
  u_sq = block_sum(u_sq, shared);
  if (threadIdx.x == 0) {
    partial[2 * blockIdx.x] = w_sq;
    partial[2 * blockIdx.x + 1] = u_sq;
  }
  if (!last_block_done(counter)) return;
  // The segmented reduction: the thread at the first chunk of each tensor's run sums the run in chunk order.
  const int count = a.chunks.count;
  const int32_t* tensor = a.chunks.tensor + a.chunks.first;
  for (int c = threadIdx.x; c < count; c += blockDim.x) {
    if (c > 0 && tensor[c - 1] == tensor[c]) continue;
    double ws = 0.0, us = 0.0;
    for (int k = c; k < count && tensor[k] == tensor[c]; ++k) {
      ws += __ldcg(partial + 2 * k);
      us += __ldcg(partial + 2 * k + 1);
    }
    a.norms[2 * tensor[c]] += ws;
    a.norms[2 * tensor[c] + 1] += us;
  }
}

struct LambApplyArgs {
  float* master;
  bf16* weights;
  const float* m;
  const float* v;
  const double* norms;
  const uint8_t* excluded;
  const ops::StepScalars* scalars;
  ops::Chunks chunks;
  float epsilon, weight_decay;
};

__global__ void __launch_bounds__(kThreads) lamb_apply_kernel(LambApplyArgs a) {
  if (a.scalars->nonfinite > 0) return;
  const ChunkRange r = chunk_at(a.chunks, blockIdx.x);
  const bool excluded = a.excluded[r.tensor] != 0;
  // The moments' betas play no part here.
  const kmath::LambElementParams e{0, 0, 0, 0, a.scalars->inv_bias_correction1, a.scalars->inv_bias_correction2,
                                   a.epsilon, excluded ? 0.0f : a.weight_decay};
  const float ratio =
      kmath::lamb_trust_ratio(sqrt(a.norms[2 * r.tensor]), sqrt(a.norms[2 * r.tensor + 1]), excluded);
  const float step = ratio * a.scalars->learning_rate;
  float* w = a.master + r.begin;
  const float* m = a.m + r.begin;
  const float* v = a.v + r.begin;
  bf16* copy = a.weights ? a.weights + r.begin : nullptr;
  for (size_t i = threadIdx.x; i < r.n; i += blockDim.x) {
    const float wi = w[i] - step * kmath::lamb_direction(m[i], v[i], w[i], e, DeviceSqrt{});
    w[i] = wi;
    if (copy) copy[i] = __float2bfloat16_rn(wi);
  }
}

// The completion counter (zeroed here, on the stream) and `doubles` partial sums.
double* partials_and_counter(CudaContext& ctx, OpScratch& scratch, size_t doubles, int** counter) {
  char* base = static_cast<char*>(scratch.optimizer.get(256 + doubles * sizeof(double)));
  *counter = reinterpret_cast<int*>(base);
  CUDA_CHECK(cudaMemsetAsync(*counter, 0, sizeof(int), ctx.stream));
  return reinterpret_cast<double*>(base + 256);
}

}  // namespace

void gradient_clip(CudaContext& ctx, OpScratch& scratch, const ops::GradientClip& p) {
  if (p.chunks.count <= 0) {
    // No chunks: a zero sum, finished as the CPU finishes it.
    if (p.partial) {
      CUDA_CHECK(cudaMemsetAsync(p.partial, 0, sizeof(double), ctx.stream));
    } else {
      CUDA_CHECK(cudaMemsetAsync(&p.scalars->grad_norm_sq, 0, sizeof(double), ctx.stream));
      gradient_clip_finish(ctx, {p.scalars});
    }
    return;
  }
  int* counter = nullptr;
  double* partial = partials_and_counter(ctx, scratch, static_cast<size_t>(p.chunks.count), &counter);
  gradient_clip_kernel<<<p.chunks.count, kThreads, 0, ctx.stream>>>(p.scalars, p.partial,
                                                                    static_cast<const float*>(p.grads), p.chunks,
                                                                    partial, counter);
  CUDA_CHECK_LAUNCH();
}

void gradient_clip_finish(CudaContext& ctx, const ops::GradientClipFinish& p) {
  gradient_clip_finish_kernel<<<1, 1, 0, ctx.stream>>>(p.scalars);
  CUDA_CHECK_LAUNCH();
}

void gradient_accumulate(CudaContext& ctx, const ops::GradientAccumulate& p) {
  if (p.chunks.count <= 0) return;
  gradient_accumulate_kernel<<<p.chunks.count, kThreads, 0, ctx.stream>>>(
      static_cast<float*>(p.sum), static_cast<const float*>(p.grads), p.scalars, p.chunks, p.scale);
  CUDA_CHECK_LAUNCH();
}

void lamb_moments(CudaContext& ctx, OpScratch& scratch, const ops::LambMoments& p) {
  if (p.chunks.count <= 0) return;
  int* counter = nullptr;
  double* partial = partials_and_counter(ctx, scratch, 2 * static_cast<size_t>(p.chunks.count), &counter);
  const LambMomentArgs a{static_cast<float*>(p.m), static_cast<float*>(p.v), p.norms,
                         static_cast<const float*>(p.grads), static_cast<const float*>(p.master), p.excluded,
                         p.grad_scale, p.scalars, p.chunks, p.beta1, p.beta2, p.epsilon, p.weight_decay,
                         p.one_minus_beta1, p.one_minus_beta2};
  lamb_moments_kernel<<<p.chunks.count, kThreads, 0, ctx.stream>>>(a, partial, counter);
  CUDA_CHECK_LAUNCH();
}

void lamb_apply(CudaContext& ctx, const ops::LambApply& p) {
  if (p.chunks.count <= 0) return;
  const LambApplyArgs a{static_cast<float*>(p.master),
                        p.weights == p.master ? nullptr : static_cast<bf16*>(p.weights),
                        static_cast<const float*>(p.m),
                        static_cast<const float*>(p.v),
                        p.norms,
                        p.excluded,
                        p.scalars,
                        p.chunks,
                        p.epsilon,
                        p.weight_decay};
  lamb_apply_kernel<<<p.chunks.count, kThreads, 0, ctx.stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

namespace {

__global__ void fp8_scale_update_kernel(ops::Fp8ScaleUpdate p) {
  const size_t t = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < static_cast<size_t>(p.count))
    kmath::delayed_scaling_update(p.scale, p.history, p.count, t, p.history_len, p.margin);
}

}  // namespace

namespace {

__global__ void schedule_step_kernel(ops::ScheduleStep p) {
  ops::apply_schedule_step(p);
}

__global__ void record_step_kernel(ops::RecordStep p) {
  ops::apply_record_step(p);
}

}  // namespace

void schedule_step(CudaContext& ctx, const ops::ScheduleStep& p) {
  BERT_CHECK(p.schedule.train_steps > 0, "the step's schedule needs train_steps > 0, got ", p.schedule.train_steps);
  schedule_step_kernel<<<1, 1, 0, ctx.stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

void record_step(CudaContext& ctx, const ops::RecordStep& p) {
  BERT_CHECK(p.slots > 0, "a ring of step records needs a slot, got ", p.slots);
  record_step_kernel<<<1, 1, 0, ctx.stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

void fp8_scale_update(CudaContext& ctx, const ops::Fp8ScaleUpdate& p) {
  BERT_CHECK(p.count >= 0 && p.history_len >= 1, "fp8 scale update of ", p.count, " tensors, history ", p.history_len);
  if (p.count == 0) return;
  fp8_scale_update_kernel<<<ceil_div(p.count, kThreads), kThreads, 0, ctx.stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace bertperf::cuda
