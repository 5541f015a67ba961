// FP8 casts (fp8_cast.h): one kernel over 32 x 32 tiles; the transpose goes through shared memory so both writes
// stay coalesced.
#include "backends/cuda/fp8_cast.h"

#include "backends/cuda/cuda_common.cuh"
#include "backends/fp8.h"

namespace bertperf::cuda {

namespace {

constexpr int kTile = 32, kTileRows = 8;  // a block of 32 x 8 threads, each doing 4 rows of a tile

__global__ void fp8_cast_kernel(Fp8Cast c, Fp8Format f) {
  __shared__ uint8_t tile[kTile][kTile + 4];
  const int c0 = blockIdx.x * kTile, r0 = blockIdx.y * kTile;
  const bf16* src = static_cast<const bf16*>(c.src);
  const float s = *c.scale;
  float m = 0;
  const int col = c0 + threadIdx.x;
  for (int i = threadIdx.y; i < kTile; i += kTileRows) {
    const int row = r0 + i;
    uint8_t code = 0;
    if (row < c.rows && col < c.cols) {
      const float x = __bfloat162float(src[static_cast<size_t>(row) * c.ld_src + col]);
      m = fmaxf(m, fabsf(x));  // fmaxf passes a NaN over, as the twin's max does
      code = kmath::fp8_bits(x * s, f);
      if (c.out) c.out[static_cast<size_t>(row) * c.cols + col] = code;
    }
    tile[i][threadIdx.x] = code;
  }
  if (c.out_t) {
    __syncthreads();
    const int t_col = r0 + threadIdx.x;  // a row of the source is a column of the transpose
    for (int i = threadIdx.y; i < kTile; i += kTileRows) {
      const int t_row = c0 + i;
      if (t_row < c.cols && t_col < c.rows) c.out_t[static_cast<size_t>(t_row) * c.rows + t_col] = tile[threadIdx.x][i];
    }
  }
  if (c.amax) {
    m = warp_max(m);  // a warp is one threadIdx.y; amaxes are >= 0, so their bits order as ints
    if (threadIdx.x == 0 && m > 0) atomicMax(reinterpret_cast<int*>(c.amax), __float_as_int(m));
  }
  if (c.inv_scale && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0)
    *c.inv_scale = 1.0f / s;
}

}  // namespace

void fp8_cast(CudaContext& ctx, const Fp8Cast& c) {
  BERT_CHECK(c.format == DType::E4M3 || c.format == DType::E5M2, "fp8 cast to ", dtype_name(c.format));
  BERT_CHECK(c.rows >= 0 && c.cols >= 0 && c.ld_src >= static_cast<size_t>(c.cols) && c.scale, "fp8 cast of ",
             c.rows, " x ", c.cols, " at ld ", c.ld_src);
  if (c.rows == 0 || c.cols == 0) return;
  const dim3 grid(ceil_div(c.cols, kTile), ceil_div(c.rows, kTile)), block(kTile, kTileRows);
  fp8_cast_kernel<<<grid, block, 0, ctx.stream>>>(c, fp8_format(c.format));
  CUDA_CHECK_LAUNCH();
}

}  // namespace bertperf::cuda
