// The FP8 twin's kernels (cpu_ops.h): quantizing a bf16 tensor to FP8 values with its amax, and the delayed-scaling
// update op (backends/fp8.h), which is f32 bookkeeping on every CPU backend.
#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_math.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/fp8.h"

namespace bertperf::cpu {

float quantize_fp8(bf16* dst, size_t ldd, const bf16* src, size_t lds, int rows, int cols, float scale,
                   DType format) {
  const Fp8Format f = fp8_format(format);
  float amax = 0;
#pragma omp parallel for schedule(static) reduction(max : amax) if (static_cast<size_t>(rows) * cols > kParallelMin)
  for (int r = 0; r < rows; ++r) {
    const bf16* s = src + r * lds;
    bf16* d = dst + r * ldd;
    float m = 0;
#pragma omp simd reduction(max : m)
    for (int c = 0; c < cols; ++c) {
      const float x = to_float(s[c]);
      m = std::max(m, std::fabs(x));
      d[c] = to_bf16(kmath::fp8_round(x * scale, f));  // exact: an FP8 value is a bf16 value
    }
    amax = std::max(amax, m);
  }
  return amax;
}

void fp8_scale_update(const ops::Fp8ScaleUpdate& p) {
  Fp8Recipe recipe;
  recipe.history = p.history_len;
  recipe.margin = p.margin;
  BERT_CHECK(p.count >= 0 && p.history_len >= 1, "fp8 scale update of ", p.count, " tensors, history ", p.history_len);
  DelayedScaling(recipe).update(p.scale, p.history, p.count);
}

}  // namespace bertperf::cpu
