// cpu-bf16's GEMM (backends/cpu/gemm_bf16.h) beside oneDNN's plain bf16 matmul at the same shapes: the issue's "GEMM
// time at 80% or more of oneDNN's plain bf16 rate". Both take bf16 operands and write bf16 out = A.B + bias:
//   BM_Bf16Gemm:    a cpu-bf16 GEMM context (tiles, K chunks of 512, the order gemm_bf16.h defines) with the linear
//                   layer's epilogue (bias, round to bf16), on the path the backend's default options choose here
//                   (oneDNN brgemm, or the emulation)
//   BM_OnednnPlain: one oneDNN matmul primitive over the whole product with its bias post-op, oneDNN's own threads
//                   and order (what PyTorch's bf16 matmul calls)
// Shapes (M x N x K, row-major, B^T where marked): the linear layers of mini (hidden 128, FFN 512, 4,096 tokens,
// 640 predictions over the 30,522-word vocabulary), base (768, 3,072) and large (1,024, 4,096) forward, their
// input-gradient products (B^T) and weight-gradient products (A^T, K = tokens). Threads: OMP_NUM_THREADS.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "backends/cpu/bf16.h"
#include "backends/cpu/gemm_bf16.h"
#include "core/buffer.h"

#ifdef BERTPERF_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace bertperf {
namespace {

using cpu::bf16;

struct Operands {
  AlignedBuffer<bf16> a, b, bias, out;
};

Operands operands(int M, int N, int K) {
  Operands o{AlignedBuffer<bf16>(static_cast<size_t>(M) * K), AlignedBuffer<bf16>(static_cast<size_t>(K) * N),
             AlignedBuffer<bf16>(N), AlignedBuffer<bf16>(static_cast<size_t>(M) * N)};
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t i = 0; i < o.a.size(); ++i) o.a[i] = cpu::to_bf16(normal(rng));
  for (size_t i = 0; i < o.b.size(); ++i) o.b[i] = cpu::to_bf16(normal(rng) * 0.05f);
  for (size_t i = 0; i < o.bias.size(); ++i) o.bias[i] = cpu::to_bf16(normal(rng));
  return o;
}

void set_rate(benchmark::State& state, int M, int N, int K) {
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * M * N * K * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Bf16Gemm(benchmark::State& state) {
  const int M = static_cast<int>(state.range(0)), N = static_cast<int>(state.range(1)), K = static_cast<int>(state.range(2));
  const bool ta = state.range(3) != 0, tb = state.range(4) != 0;
  Operands o = operands(M, N, K);
  const cpu::Bf16Gemm g{M, N, K, o.a.data(), ta ? M : K, ta, o.b.data(), tb ? K : N, tb};
  bf16* out = o.out.data();
  const bf16* bias = o.bias.data();
  auto epilogue = [&](int m0, int rows, int n0, int cols, const float* acc, int ld) {
    for (int r = 0; r < rows; ++r) {
      const float* a = acc + static_cast<size_t>(r) * ld;
      bf16* y = out + static_cast<size_t>(m0 + r) * N + n0;
      const bf16* b = bias + n0;
#pragma omp simd
      for (int c = 0; c < cols; ++c) y[c] = cpu::to_bf16(a[c] + cpu::to_float(b[c]));
    }
  };
  static cpu::Bf16GemmContext gemms{CpuBf16Options{}};  // one for the program, as a backend has one
  gemms.run(g, epilogue);  // the shape's first call: its primitives and buffers
  for (auto _ : state) {
    gemms.run(g, epilogue);
    benchmark::DoNotOptimize(out);
  }
  set_rate(state, M, N, K);
  state.SetLabel(gemms.path() == cpu::GemmPath::ONEDNN ? "oneDNN brgemm tiles" : "emulated");
}

#ifdef BERTPERF_HAVE_DNNL
void BM_OnednnPlain(benchmark::State& state) {
  const int M = static_cast<int>(state.range(0)), N = static_cast<int>(state.range(1)), K = static_cast<int>(state.range(2));
  const bool ta = state.range(3) != 0, tb = state.range(4) != 0;
  Operands o = operands(M, N, K);
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const dnnl::memory::desc a({M, K}, dt::bf16, ta ? dims{1, M} : dims{K, 1}), b({K, N}, dt::bf16, tb ? dims{1, K} : dims{N, 1}),
      bias({1, N}, dt::bf16, dims{N, 1}), c({M, N}, dt::bf16, dims{N, 1});
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, bias, c), engine);
  dnnl::matmul matmul(pd);
  dnnl::memory am(a, engine, o.a.data()), bm(b, engine, o.b.data()), biasm(bias, engine, o.bias.data()),
      cm(c, engine, o.out.data());
  for (auto _ : state) {
    matmul.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_BIAS, biasm}, {DNNL_ARG_DST, cm}});
    stream.wait();
  }
  set_rate(state, M, N, K);
  state.SetLabel(pd.impl_info_str());
}
#endif

// {M, N, K, A^T, B^T}
void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "N", "K", "ta", "tb"});
  // mini: QKV, FFN up, FFN down forward; the decoder (tied, B^T); an input gradient; a weight gradient.
  b->Args({4096, 384, 128, 0, 0})->Args({4096, 512, 128, 0, 0})->Args({4096, 128, 512, 0, 0});
  b->Args({640, 30522, 128, 0, 1})->Args({4096, 128, 512, 0, 1})->Args({512, 128, 4096, 1, 0});
  // base (and the same at 4,096 tokens of large)
  b->Args({4096, 2304, 768, 0, 0})->Args({4096, 3072, 768, 0, 0})->Args({4096, 768, 3072, 0, 0});
  b->Args({4096, 768, 3072, 0, 1})->Args({768, 3072, 4096, 1, 0});
  b->Args({4096, 4096, 1024, 0, 0})->Args({4096, 1024, 4096, 0, 0})->Args({1024, 4096, 4096, 1, 0});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_Bf16Gemm)->Apply(shapes);
#ifdef BERTPERF_HAVE_DNNL
BENCHMARK(BM_OnednnPlain)->Apply(shapes);
#endif

}  // namespace
}  // namespace bertperf
