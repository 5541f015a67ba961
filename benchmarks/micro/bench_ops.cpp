// Microbenchmarks of the CPU op vocabulary at BERT-base shapes (B=32, S=128, H=768, A=12,
// FFN 3072, vocabulary 30522, 20 masked positions per sequence): the SGEMMs behind the linear
// layers (GFLOP/s), and every op forward and backward (elements/s, or GFLOP/s where a GEMM
// dominates). Threads: the OpenMP default (all cores unless OMP_NUM_THREADS says otherwise); the CPU
// backend runs its BLAS calls on the OpenMP threads. Read the CPU-time column with OMP_NUM_THREADS=1
// for per-core figures on a busy machine.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>

#include "backends/cpu/cpu_ops.h"
#include "backends/ops.h"
#include "core/buffer.h"

namespace bertperf {
namespace {

constexpr int kBatch = 32, kSeq = 128, kHidden = 768, kHeads = 12, kHeadDim = 64, kFfn = 3072;
constexpr int kTokens = kBatch * kSeq;
constexpr int kVocab = 30522, kPredictions = kBatch * 20;
constexpr RngKey kKey{42, 1, 0};

AlignedBuffer<float> random_buffer(size_t n, float lo = -1.0f, float hi = 1.0f, uint64_t seed = 1) {
  AlignedBuffer<float> b(n);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> dist(lo, hi);
  for (size_t i = 0; i < n; ++i) b[i] = dist(rng);
  return b;
}

AlignedBuffer<int32_t> random_ids(size_t n, int32_t bound, uint64_t seed = 2) {
  AlignedBuffer<int32_t> b(n);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int32_t> dist(0, bound - 1);
  for (size_t i = 0; i < n; ++i) b[i] = dist(rng);
  return b;
}

void set_flops(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iteration * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- SGEMM: M x N x K = tokens x out x in -------------------------------------------------------

void BM_Sgemm(benchmark::State& state) {
  const int M = static_cast<int>(state.range(0)), N = static_cast<int>(state.range(1)),
            K = static_cast<int>(state.range(2));
  auto a = random_buffer(static_cast<size_t>(M) * K), b = random_buffer(static_cast<size_t>(K) * N);
  AlignedBuffer<float> c(static_cast<size_t>(M) * N);
  for (auto _ : state) {
    cpu::gemm<float>(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(state, 2.0 * M * N * K);
}
BENCHMARK(BM_Sgemm)
    ->ArgNames({"M", "N", "K"})
    ->Args({kTokens, kHidden, kHidden})
    ->Args({kTokens, kFfn, kHidden})
    ->Args({kTokens, kHidden, kFfn})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// ---- linear (FFN up-projection shape, and the tied MLM decoder) --------------------------------

void BM_Linear(benchmark::State& state) {
  const int N = static_cast<int>(state.range(0)), I = static_cast<int>(state.range(1)),
            O = static_cast<int>(state.range(2));
  const bool backward = state.range(3) != 0;
  const auto layout = state.range(4) ? ops::WeightLayout::OUT_IN : ops::WeightLayout::IN_OUT;
  auto x = random_buffer(static_cast<size_t>(N) * I), w = random_buffer(static_cast<size_t>(I) * O),
       b = random_buffer(O), dout = random_buffer(static_cast<size_t>(N) * O);
  AlignedBuffer<float> out(static_cast<size_t>(N) * O), dx(static_cast<size_t>(N) * I),
      dw(static_cast<size_t>(I) * O), db(O);
  for (auto _ : state) {
    if (backward) {
      ops::linear_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), N, I, O, layout);
    } else {
      ops::linear_forward(out.data(), x.data(), w.data(), b.data(), N, I, O, layout);
    }
    benchmark::ClobberMemory();
  }
  set_flops(state, (backward ? 4.0 : 2.0) * N * I * O);
}
BENCHMARK(BM_Linear)
    ->ArgNames({"N", "I", "O", "bwd", "out_in"})
    ->Args({kTokens, kHidden, kFfn, 0, 0})
    ->Args({kTokens, kHidden, kFfn, 1, 0})
    ->Args({kPredictions, kHidden, kVocab, 0, 1})
    ->Args({kPredictions, kHidden, kVocab, 1, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// ---- a whole FFN sub-block, forward and backward --------------------------------------------------
// GEMMs interleaved with elementwise loops, as the model runs them: shows the cost of switching
// threads between BLAS and OpenMP loops, which the per-op benchmarks do not.

void BM_FfnBlock(benchmark::State& state) {
  const size_t nh = static_cast<size_t>(kTokens) * kHidden, nf = static_cast<size_t>(kTokens) * kFfn;
  auto x = random_buffer(nh), w1 = random_buffer(static_cast<size_t>(kHidden) * kFfn, -0.05f, 0.05f),
       b1 = random_buffer(kFfn), w2 = random_buffer(static_cast<size_t>(kFfn) * kHidden, -0.05f, 0.05f),
       b2 = random_buffer(kHidden), g = random_buffer(kHidden), be = random_buffer(kHidden),
       dy = random_buffer(nh);
  AlignedBuffer<float> h(nf), a(nf), o(nh), r(nh), y(nh), mean(kTokens), rstd(kTokens);
  AlignedBuffer<float> dr(nh), dx(nh), dout(nh), da(nf), dh(nf), dw1(w1.size()), db1(kFfn), dw2(w2.size()),
      db2(kHidden), dg(kHidden), dbe(kHidden);
  const RngKey key = kKey;
  for (auto _ : state) {
    ops::linear_forward(h.data(), x.data(), w1.data(), b1.data(), kTokens, kHidden, kFfn, ops::WeightLayout::IN_OUT);
    ops::gelu_forward(a.data(), h.data(), nf);
    ops::linear_forward(o.data(), a.data(), w2.data(), b2.data(), kTokens, kFfn, kHidden, ops::WeightLayout::IN_OUT);
    ops::dropout_residual_forward(r.data(), o.data(), x.data(), nh, 0.1f, key);
    ops::layernorm_forward(y.data(), mean.data(), rstd.data(), r.data(), g.data(), be.data(), kTokens, kHidden);
    ops::layernorm_backward(dr.data(), dg.data(), dbe.data(), dy.data(), r.data(), g.data(), mean.data(),
                            rstd.data(), kTokens, kHidden);
    ops::dropout_residual_backward(dout.data(), dx.data(), dr.data(), nh, 0.1f, key);
    ops::linear_backward(da.data(), dw2.data(), db2.data(), dout.data(), a.data(), w2.data(), kTokens, kFfn,
                         kHidden, ops::WeightLayout::IN_OUT);
    ops::gelu_backward(dh.data(), h.data(), da.data(), nf);
    ops::linear_backward(dx.data(), dw1.data(), db1.data(), dh.data(), x.data(), w1.data(), kTokens, kHidden,
                         kFfn, ops::WeightLayout::IN_OUT);
    benchmark::ClobberMemory();
  }
  set_flops(state, 6.0 * 2 * kTokens * kHidden * kFfn);  // the GEMMs only
}
BENCHMARK(BM_FfnBlock)->Unit(benchmark::kMillisecond)->UseRealTime();

// ---- attention core ------------------------------------------------------------------------------

void BM_Attention(benchmark::State& state) {
  const bool backward = state.range(0) != 0;
  const float p = static_cast<float>(state.range(1)) / 100.0f;
  const size_t n = static_cast<size_t>(kTokens) * kHidden;
  const size_t np = static_cast<size_t>(kBatch) * kHeads * kSeq * kSeq;
  auto q = random_buffer(n, -1, 1, 3), k = random_buffer(n, -1, 1, 4), v = random_buffer(n, -1, 1, 5),
       dctx = random_buffer(n, -1, 1, 6);
  AlignedBuffer<float> ctx(n), probs(np), scratch(np), dq(n), dk(n), dv(n);
  AlignedBuffer<int32_t> seq(kTokens);
  for (int b = 0; b < kBatch; ++b)  // a realistic padding pattern: rows 60%..100% full
    for (int s = 0; s < kSeq; ++s) seq[b * kSeq + s] = s < kSeq * (60 + 40 * b / kBatch) / 100 ? 1 : 0;
  ops::attention_forward(ctx.data(), probs.data(), q.data(), k.data(), v.data(), seq.data(), kBatch, kSeq,
                         kHeads, kHeadDim, p, kKey);
  for (auto _ : state) {
    if (backward) {
      ops::attention_backward(dq.data(), dk.data(), dv.data(), scratch.data(), dctx.data(), probs.data(),
                              q.data(), k.data(), v.data(), kBatch, kSeq, kHeads, kHeadDim, p, kKey);
    } else {
      ops::attention_forward(ctx.data(), probs.data(), q.data(), k.data(), v.data(), seq.data(), kBatch, kSeq,
                             kHeads, kHeadDim, p, kKey);
    }
    benchmark::ClobberMemory();
  }
  // Two S x S x D products forward, four backward.
  set_flops(state, (backward ? 8.0 : 4.0) * kBatch * kHeads * kSeq * kSeq * kHeadDim);
}
BENCHMARK(BM_Attention)
    ->ArgNames({"bwd", "drop%"})
    ->Args({0, 0})
    ->Args({0, 10})
    ->Args({1, 0})
    ->Args({1, 10})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// ---- row-wise and elementwise ops (elements/s) --------------------------------------------------

void BM_LayerNorm(benchmark::State& state) {
  const bool backward = state.range(0) != 0;
  const size_t n = static_cast<size_t>(kTokens) * kHidden;
  auto x = random_buffer(n), g = random_buffer(kHidden), b = random_buffer(kHidden), dout = random_buffer(n);
  AlignedBuffer<float> out(n), mean(kTokens), rstd(kTokens), dx(n), dg(kHidden), db(kHidden);
  ops::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), kTokens, kHidden);
  for (auto _ : state) {
    if (backward) {
      ops::layernorm_backward(dx.data(), dg.data(), db.data(), dout.data(), x.data(), g.data(), mean.data(),
                              rstd.data(), kTokens, kHidden);
    } else {
      ops::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), kTokens, kHidden);
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_LayerNorm)->ArgName("bwd")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Gelu(benchmark::State& state) {
  const bool backward = state.range(0) != 0;
  const size_t n = static_cast<size_t>(kTokens) * kFfn;
  auto x = random_buffer(n, -4, 4), dout = random_buffer(n);
  AlignedBuffer<float> out(n);
  for (auto _ : state) {
    if (backward) {
      ops::gelu_backward(out.data(), x.data(), dout.data(), n);
    } else {
      ops::gelu_forward(out.data(), x.data(), n);
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_Gelu)->ArgName("bwd")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_DropoutResidual(benchmark::State& state) {
  const bool backward = state.range(0) != 0;
  const float p = static_cast<float>(state.range(1)) / 100.0f;
  const size_t n = static_cast<size_t>(kTokens) * kHidden;
  auto x = random_buffer(n), r = random_buffer(n);
  AlignedBuffer<float> out(n), dx(n), dr(n);
  for (auto _ : state) {
    if (backward) {
      ops::dropout_residual_backward(dx.data(), dr.data(), x.data(), n, p, kKey);
    } else {
      ops::dropout_residual_forward(out.data(), x.data(), r.data(), n, p, kKey);
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_DropoutResidual)
    ->ArgNames({"bwd", "drop%"})
    ->Args({0, 10})
    ->Args({1, 10})
    ->Args({0, 0})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_Embedding(benchmark::State& state) {
  const bool backward = state.range(0) != 0;
  const size_t n = static_cast<size_t>(kTokens) * kHidden;
  auto word = random_buffer(static_cast<size_t>(kVocab) * kHidden), type = random_buffer(2 * kHidden),
       pos = random_buffer(512 * kHidden), dout = random_buffer(n);
  auto ids = random_ids(kTokens, kVocab), types = random_ids(kTokens, 2), positions = random_ids(kTokens, kSeq);
  AlignedBuffer<float> out(n), dword(static_cast<size_t>(kVocab) * kHidden), dtype(2 * kHidden),
      dpos(512 * kHidden);
  for (auto _ : state) {
    if (backward) {
      ops::embedding_backward(dword.data(), dtype.data(), dpos.data(), dout.data(), ids.data(), types.data(),
                              positions.data(), kTokens, kHidden);
    } else {
      ops::embedding_forward(out.data(), ids.data(), types.data(), positions.data(), word.data(), type.data(),
                             pos.data(), kTokens, kHidden);
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_Embedding)->ArgName("bwd")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_CrossEntropy(benchmark::State& state) {
  const bool backward = state.range(0) != 0;
  const size_t n = static_cast<size_t>(kPredictions) * kVocab;
  auto logits = random_buffer(n, -8, 8), dlosses = random_buffer(kPredictions);
  auto labels = random_ids(kPredictions, kVocab);
  AlignedBuffer<float> losses(kPredictions), dlogits(n);
  for (auto _ : state) {
    if (backward) {
      ops::cross_entropy_backward(dlogits.data(), logits.data(), labels.data(), dlosses.data(), kPredictions, kVocab);
    } else {
      ops::cross_entropy_forward(losses.data(), logits.data(), labels.data(), kPredictions, kVocab);
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_CrossEntropy)->ArgName("bwd")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace bertperf
