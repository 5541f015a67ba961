// CUDA elementwise kernels and column sums (elementwise.h). The formulas are kernel_math.h's.
#include "backends/cuda/elementwise.h"

#include <algorithm>

namespace bertperf::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float act_forward(float x, ops::Activation act) {
  return act == ops::Activation::GELU ? kmath::gelu(x, DeviceTanh{}) : tanhf(x);
}
__device__ __forceinline__ float act_grad(float saved, ops::Activation act) {
  return act == ops::Activation::GELU ? kmath::gelu_grad(saved, DeviceTanh{}) : kmath::tanh_grad_from_output(saved);
}

// Over N rows of `cols` at stride ld; `packs` set when cols and ld are multiples of 8 and the pointers 16-byte
// aligned, so each thread handles 8 elements with one load per operand.
__global__ void activation_forward_kernel(bf16* out, const bf16* inp, int N, int cols, size_t ld,
                                          ops::Activation act, bool packs) {
  const int width = packs ? cols / 8 : cols;
  const size_t total = static_cast<size_t>(N) * width;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t row = i / width, col = i % width;
    if (packs) {
      const size_t at = row * ld + col * 8;
      float x[8];
      load8(x, inp + at);
#pragma unroll
      for (int j = 0; j < 8; ++j) x[j] = act_forward(x[j], act);
      store8(out + at, x);
    } else {
      const size_t at = row * ld + col;
      out[at] = __float2bfloat16_rn(act_forward(__bfloat162float(inp[at]), act));
    }
  }
}

__global__ void broadcast_row_kernel(bf16* out, const bf16* row, int N, int cols, size_t ld) {
  const size_t total = static_cast<size_t>(N) * cols;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i / cols * ld + i % cols] = row[i % cols];
}

__global__ void activation_backward_kernel(bf16* dinp, const bf16* dout, const bf16* saved, int N, int cols,
                                           size_t ld, ops::Activation act, bool packs) {
  const int width = packs ? cols / 8 : cols;
  const size_t total = static_cast<size_t>(N) * width;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t row = i / width, col = i % width;
    if (packs) {
      const size_t at = row * ld + col * 8;
      float dy[8], x[8];
      load8(dy, dout + at);
      load8(x, saved + at);
#pragma unroll
      for (int j = 0; j < 8; ++j) dy[j] *= act_grad(x[j], act);
      store8(dinp + at, dy);
    } else {
      const size_t at = row * ld + col;
      dinp[at] = __float2bfloat16_rn(__bfloat162float(dout[at]) * act_grad(__bfloat162float(saved[at]), act));
    }
  }
}

// Column sums in two passes: partial[chunk][c] = sum of the chunk's rows (in row order), then sums[c] += the
// partials in chunk order. Threads run along columns, so loads coalesce.
__global__ void column_partials_kernel(float* partial, const bf16* x, int N, int C, size_t ld, int rows_per_chunk) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int r0 = blockIdx.y * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
  float s = 0.0f;
  for (int r = r0; r < r1; ++r) s += __bfloat162float(x[static_cast<size_t>(r) * ld + c]);
  partial[static_cast<size_t>(blockIdx.y) * C + c] = s;
}

__global__ void column_finish_kernel(float* sums, const float* partial, int C, int chunks) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int k = 0; k < chunks; ++k) s += partial[static_cast<size_t>(k) * C + c];
  sums[c] += s;
}

template <typename D, typename S>
__global__ void convert_kernel(D* dst, const S* src, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if constexpr (std::is_same_v<D, bf16> && std::is_same_v<S, double>) {
      dst[i] = __ushort_as_bfloat16(kmath::bf16_bits(src[i]));  // one rounding, not two through float
    } else if constexpr (std::is_same_v<D, bf16>) {
      dst[i] = __float2bfloat16_rn(to_float(src[i]));
    } else if constexpr (std::is_same_v<S, bf16>) {
      dst[i] = static_cast<D>(__bfloat162float(src[i]));
    } else {
      dst[i] = static_cast<D>(src[i]);
    }
  }
}

template <typename D>
void convert_from(CudaContext& ctx, D* dst, const void* src, DType src_type, size_t n) {
  const unsigned blocks = grid_for(n, kThreads);
  switch (src_type) {
    case DType::F32: convert_kernel<<<blocks, kThreads, 0, ctx.stream>>>(dst, static_cast<const float*>(src), n); break;
    case DType::F64: convert_kernel<<<blocks, kThreads, 0, ctx.stream>>>(dst, static_cast<const double*>(src), n); break;
    case DType::BF16: convert_kernel<<<blocks, kThreads, 0, ctx.stream>>>(dst, static_cast<const bf16*>(src), n); break;
    case DType::E4M3: case DType::E5M2:
      BERT_CHECK(false, "no plain conversion from ", dtype_name(src_type), ": FP8 values are cast with their scales");
  }
  CUDA_CHECK_LAUNCH();
}

bool packs_fit(int cols, size_t ld, std::initializer_list<const void*> ptrs) {
  if (cols % 8 != 0 || ld % 8 != 0) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}

}  // namespace

void activation_forward_rows(CudaContext& ctx, bf16* out, const bf16* inp, int N, int cols, size_t ld,
                             ops::Activation act) {
  BERT_CHECK(act != ops::Activation::NONE, "activation forward needs an activation");
  if (N <= 0 || cols <= 0) return;
  const bool packs = packs_fit(cols, ld, {out, inp});
  const size_t work = static_cast<size_t>(N) * (packs ? cols / 8 : cols);
  activation_forward_kernel<<<grid_for(work, kThreads), kThreads, 0, ctx.stream>>>(out, inp, N, cols, ld, act, packs);
  CUDA_CHECK_LAUNCH();
}

void broadcast_row(CudaContext& ctx, bf16* out, const bf16* row, int N, int cols, size_t ld) {
  if (N <= 0 || cols <= 0) return;
  const size_t work = static_cast<size_t>(N) * cols;
  broadcast_row_kernel<<<grid_for(work, kThreads), kThreads, 0, ctx.stream>>>(out, row, N, cols, ld);
  CUDA_CHECK_LAUNCH();
}

void activation_backward_rows(CudaContext& ctx, bf16* dinp, const bf16* dout, const bf16* saved, int N, int cols,
                              size_t ld, ops::Activation act) {
  BERT_CHECK(act != ops::Activation::NONE, "activation backward needs an activation");
  if (N <= 0 || cols <= 0) return;
  const bool packs = packs_fit(cols, ld, {dinp, dout, saved});
  const size_t work = static_cast<size_t>(N) * (packs ? cols / 8 : cols);
  activation_backward_kernel<<<grid_for(work, kThreads), kThreads, 0, ctx.stream>>>(dinp, dout, saved, N, cols, ld,
                                                                                     act, packs);
  CUDA_CHECK_LAUNCH();
}

void activation_backward(CudaContext& ctx, const ops::ActivationBackward& p) {
  // A flat vector is one row; split into rows of 8 * 1024 when that divides it, so the packed path applies.
  const size_t n = p.n;
  if (n == 0) return;
  const int cols = n % 8192 == 0 ? 8192 : static_cast<int>(std::min<size_t>(n, 1u << 30));
  BERT_CHECK(n % static_cast<size_t>(cols) == 0, "activation backward of ", n, " elements is too long");
  activation_backward_rows(ctx, static_cast<bf16*>(p.dinp), static_cast<const bf16*>(p.dout),
                           static_cast<const bf16*>(p.saved), static_cast<int>(n / cols), cols, cols, p.act);
}

void add_column_sums(CudaContext& ctx, DeviceScratch& scratch, float* sums, const bf16* x, int N, int C, size_t ld) {
  if (N <= 0 || C <= 0) return;
  // The split depends on N only, so a given shape always sums in the same order.
  const int chunks = std::min(128, std::max(1, (N + 31) / 32));
  const int rows_per_chunk = (N + chunks - 1) / chunks;
  float* partial = scratch.as<float>(static_cast<size_t>(chunks) * C);
  column_partials_kernel<<<dim3(ceil_div(C, kThreads), chunks), kThreads, 0, ctx.stream>>>(partial, x, N, C, ld,
                                                                                          rows_per_chunk);
  CUDA_CHECK_LAUNCH();
  column_finish_kernel<<<ceil_div(C, kThreads), kThreads, 0, ctx.stream>>>(sums, partial, C, chunks);
  CUDA_CHECK_LAUNCH();
}

void convert(CudaContext& ctx, void* dst, DType dst_type, const void* src, DType src_type, size_t n) {
  if (n == 0) return;
  if (dst_type == src_type) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n * dtype_size(dst_type), cudaMemcpyDeviceToDevice, ctx.stream));
    return;
  }
  switch (dst_type) {
    case DType::F32: convert_from(ctx, static_cast<float*>(dst), src, src_type, n); return;
    case DType::F64: convert_from(ctx, static_cast<double*>(dst), src, src_type, n); return;
    case DType::BF16: convert_from(ctx, static_cast<bf16*>(dst), src, src_type, n); return;
    case DType::E4M3: case DType::E5M2:
      BERT_CHECK(false, "no plain conversion to ", dtype_name(dst_type), ": FP8 values are cast with their scales");
  }
}

}  // namespace bertperf::cuda
