// CUDA embeddings and row gathers (embedding.h).
#include "backends/cuda/embedding.h"

#include <cub/device/device_radix_sort.cuh>

#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/layernorm.h"

namespace bertperf::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void iota_kernel(int32_t* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i;
}

// One block per sorted position; the first position of each run of equal indices sums the run's source rows in
// token order (the sort is stable) and adds the sum into its destination row.
template <typename Dst, typename Src>
__global__ void sorted_scatter_add_kernel(Dst* dst, const Src* src, const int32_t* sorted_index,
                                          const int32_t* sorted_source, int M, int C) {
  const int i = blockIdx.x;
  const int32_t index = sorted_index[i];
  if (i > 0 && sorted_index[i - 1] == index) return;
  int end = i + 1;
  while (end < M && sorted_index[end] == index) ++end;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float s = 0.0f;
    for (int j = i; j < end; ++j) s += to_float(src[static_cast<size_t>(sorted_source[j]) * C + c]);
    Dst* d = dst + static_cast<size_t>(index) * C + c;
    *d = from_float<Dst>(to_float(*d) + s);
  }
}

// dst[index[m]] += src[m] for m < M, rows of C, deterministic.
template <typename Dst, typename Src>
void sorted_scatter_add(CudaContext& ctx, DeviceScratch& scratch, Dst* dst, const Src* src, const int32_t* index,
                        int M, int C) {
  if (M <= 0 || C <= 0 || !dst) return;
  size_t temp_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, index, static_cast<int32_t*>(nullptr),
                                             static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), M,
                                             0, 32, ctx.stream));
  const size_t ints = (3 * static_cast<size_t>(M) + 63) / 64 * 64;
  char* base = static_cast<char*>(scratch.get(ints * sizeof(int32_t) + temp_bytes));
  int32_t* keys_out = reinterpret_cast<int32_t*>(base);
  int32_t* values_in = keys_out + M;
  int32_t* values_out = values_in + M;
  void* temp = base + ints * sizeof(int32_t);
  iota_kernel<<<ceil_div(M, kThreads), kThreads, 0, ctx.stream>>>(values_in, M);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, index, keys_out, values_in, values_out, M, 0, 32,
                                             ctx.stream));
  const int threads = C >= 1024 ? 1024 : (C + 31) / 32 * 32;
  sorted_scatter_add_kernel<Dst, Src><<<M, threads, 0, ctx.stream>>>(dst, src, keys_out, values_out, M, C);
  CUDA_CHECK_LAUNCH();
}

__global__ void gather_rows_kernel(bf16* out, const bf16* inp, const int32_t* rows, int M, int C, bool packs) {
  const int width = packs ? C / 8 : C;
  const size_t total = static_cast<size_t>(M) * width;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t m = i / width, col = i % width;
    const size_t src = static_cast<size_t>(rows[m]) * C;
    if (packs) {
      reinterpret_cast<Bf16x8*>(out + m * C)[col] = reinterpret_cast<const Bf16x8*>(inp + src)[col];
    } else {
      out[m * C + col] = inp[src + col];
    }
  }
}

}  // namespace

void embedding_forward(CudaContext& ctx, const ops::EmbeddingForward& p) { embedding_layernorm_forward(ctx, p); }

void embedding_backward(CudaContext& ctx, OpScratch& scratch, const ops::EmbeddingBackward& p) {
  if (p.N <= 0) return;
  // The LayerNorm input's gradient in fp32: ops.h's (2, N, C) bf16 scratch holds (N, C) floats.
  float* d_sum = static_cast<float*>(p.scratch);
  layernorm_dropout_backward(ctx, scratch.reduce, d_sum, static_cast<float*>(p.dgamma), static_cast<float*>(p.dbeta),
                             static_cast<const bf16*>(p.dout), static_cast<const bf16*>(p.sum),
                             static_cast<const float*>(p.mean), static_cast<const float*>(p.rstd),
                             static_cast<const bf16*>(p.gamma), p.N, p.C, p.dropout);
  sorted_scatter_add(ctx, scratch.sort, static_cast<float*>(p.dword), d_sum, p.ids, p.N, p.C);
  sorted_scatter_add(ctx, scratch.sort, static_cast<float*>(p.dtype), d_sum, p.types, p.N, p.C);
  sorted_scatter_add(ctx, scratch.sort, static_cast<float*>(p.dpos), d_sum, p.positions, p.N, p.C);
}

void gather_forward(CudaContext& ctx, const ops::GatherForward& p) {
  if (p.M <= 0 || p.C <= 0) return;
  const bool packs = p.C % 8 == 0 && aligned16(p.out) && aligned16(p.inp);
  const size_t work = static_cast<size_t>(p.M) * (packs ? p.C / 8 : p.C);
  gather_rows_kernel<<<grid_for(work, kThreads), kThreads, 0, ctx.stream>>>(
      static_cast<bf16*>(p.out), static_cast<const bf16*>(p.inp), p.rows, p.M, p.C, packs);
  CUDA_CHECK_LAUNCH();
}

void gather_backward(CudaContext& ctx, OpScratch& scratch, const ops::GatherBackward& p) {
  if (!p.accumulate && p.N > 0)
    CUDA_CHECK(cudaMemsetAsync(p.dinp, 0, static_cast<size_t>(p.N) * p.C * sizeof(bf16), ctx.stream));
  sorted_scatter_add(ctx, scratch.sort, static_cast<bf16*>(p.dinp), static_cast<const bf16*>(p.dout), p.rows, p.M,
                     p.C);
}

}  // namespace bertperf::cuda
