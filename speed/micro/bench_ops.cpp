// Microbenchmarks of the CPU backend's ops (backends/ops.h through make_cpu_backend, as the model calls them) at
// BERT-base shapes (B=32, S=128, H=768, A=12, FFN 3072, vocabulary 30522, 20 masked positions per sequence): the
// SGEMMs behind the linear layers (GFLOP/s), every op forward and backward (elements/s, or GFLOP/s where a GEMM
// dominates), and the optimizer ops over the BERT-base parameter sizes (parameters/s). Threads: the OpenMP default
// (all cores unless OMP_NUM_THREADS says otherwise); the CPU backend runs its BLAS calls on the OpenMP threads.
// Read the CPU-time column with OMP_NUM_THREADS=1 for per-core figures on a busy machine. Every op of the list has a
// benchmark here (benchmark_of, at the end, names it: an op without one does not compile).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/ops.h"
#include "core/buffer.h"

namespace bertperf {
namespace {

using ops::Activation;
using ops::WeightLayout;

constexpr int kBatch = 32, kSeq = 128, kHidden = 768, kHeads = 12, kHeadDim = 64, kFfn = 3072;
constexpr int kTokens = kBatch * kSeq;
constexpr int kVocab = 30522, kPredictions = kBatch * 20;
const ops::DropoutCounter kCounter{42, 1, 0};

ops::Dropout dropout(float p, uint32_t site = 0) { return {p, &kCounter, 0, site}; }

Backend& cpu_backend() {
  static std::unique_ptr<Backend> backend = make_cpu_backend(DType::F32, 0);
  return *backend;
}

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
  const auto layout = state.range(4) ? WeightLayout::OUT_IN : WeightLayout::IN_OUT;
  auto x = random_buffer(static_cast<size_t>(N) * I), w = random_buffer(static_cast<size_t>(I) * O),
       b = random_buffer(O), dout = random_buffer(static_cast<size_t>(N) * O);
  AlignedBuffer<float> out(static_cast<size_t>(N) * O), dx(static_cast<size_t>(N) * I),
      dw(static_cast<size_t>(I) * O), db(O);
  Backend& be = cpu_backend();
  for (auto _ : state) {
    if (backward) {
      be.linear_backward({dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), N, I, O, 1, 0, 0, 0, layout});
    } else {
      be.linear_forward({out.data(), nullptr, x.data(), w.data(), b.data(), N, I, O, 1, 0, 0, 0, layout});
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
// GEMMs interleaved with elementwise loops, as the model runs them: up-projection with GELU, down-projection, the
// sub-layer end (bias, dropout, residual, LayerNorm), and back through them with the GELU backward fused into the
// down-projection's. Shows the cost of switching threads between BLAS and OpenMP loops, which the per-op
// benchmarks do not.

void BM_FfnBlock(benchmark::State& state) {
  const size_t nh = static_cast<size_t>(kTokens) * kHidden, nf = static_cast<size_t>(kTokens) * kFfn;
  auto x = random_buffer(nh), w1 = random_buffer(static_cast<size_t>(kHidden) * kFfn, -0.05f, 0.05f),
       b1 = random_buffer(kFfn), w2 = random_buffer(static_cast<size_t>(kFfn) * kHidden, -0.05f, 0.05f),
       b2 = random_buffer(kHidden), g = random_buffer(kHidden), be_ = random_buffer(kHidden), dy = random_buffer(nh);
  AlignedBuffer<float> h(nf), a(nf), o(nh), r(nh), y(nh), mean(kTokens), rstd(kTokens);
  AlignedBuffer<float> dx(nh), dres(nh), dout(nh), dh(nf), dw1(w1.size()), db1(kFfn), dw2(w2.size()),
      db2(kHidden), dg(kHidden), dbe(kHidden);
  Backend& be = cpu_backend();
  for (auto _ : state) {
    be.linear_forward({a.data(), h.data(), x.data(), w1.data(), b1.data(), kTokens, kHidden, kFfn, 1, 0, 0, 0,
                       WeightLayout::IN_OUT, Activation::GELU});
    be.linear_forward({o.data(), nullptr, a.data(), w2.data(), nullptr, kTokens, kFfn, kHidden});
    be.residual_layernorm_forward({y.data(), r.data(), mean.data(), rstd.data(), o.data(), b2.data(), x.data(),
                                   g.data(), be_.data(), kTokens, kHidden, dropout(0.1f)});
    be.residual_layernorm_backward({dout.data(), dres.data(), db2.data(), dg.data(), dbe.data(), dy.data(), r.data(),
                                    mean.data(), rstd.data(), g.data(), kTokens, kHidden, dropout(0.1f)});
    ops::LinearBackward down{dh.data(), dw2.data(), nullptr, dout.data(), a.data(), w2.data(), kTokens, kFfn, kHidden};
    down.dinp_act = Activation::GELU;
    down.dinp_act_saved = h.data();
    down.dinp_act_dbias = db1.data();
    be.linear_backward(down);
    be.linear_backward({dx.data(), dw1.data(), nullptr, dh.data(), x.data(), w1.data(), kTokens, kHidden, kFfn, 1, 0,
                        0, 0, WeightLayout::IN_OUT, true});
    benchmark::ClobberMemory();
  }
  set_flops(state, 6.0 * 2 * kTokens * kHidden * kFfn);  // the GEMMs only
}
BENCHMARK(BM_FfnBlock)->Unit(benchmark::kMillisecond)->UseRealTime();

// ---- attention core ------------------------------------------------------------------------------
// kBatch sequences, compacted: of lengths 60%..100% of kSeq (a realistic unpadded batch), or all kSeq long (the
// work a padded (B, S) layout does).

void BM_Attention(benchmark::State& state) {
  const bool backward = state.range(0) != 0;
  const float p = static_cast<float>(state.range(1)) / 100.0f;
  const bool full = state.range(2) != 0;
  AlignedBuffer<int32_t> cu(kBatch + 1);
  double pairs_work = 0;
  for (int b = 0; b < kBatch; ++b) {
    const int len = full ? kSeq : kSeq * (60 + 40 * b / kBatch) / 100;
    cu[b + 1] = cu[b] + len;
    pairs_work += static_cast<double>(len) * len;
  }
  const int N = kTokens, H = kHeads * kHeadDim;
  const size_t n = static_cast<size_t>(N) * H;
  auto qkv = random_buffer(3 * n, -1, 1, 3), dctx = random_buffer(n, -1, 1, 6);
  Backend& be = cpu_backend();
  const size_t saved_bytes = be.attention_saved_bytes(N, kBatch, kSeq, kHeads);
  AlignedBuffer<float> ctx(n), saved(saved_bytes / sizeof(float)), work(saved_bytes / sizeof(float)), dqkv(3 * n);
  const ops::AttentionForward fwd{ctx.data(), saved.data(), qkv.data(), cu.data(), N, kBatch, kSeq, kHeads, kHeadDim,
                                  dropout(p, 1)};
  be.attention_forward(fwd);
  for (auto _ : state) {
    if (backward) {
      be.attention_backward({dqkv.data(), work.data(), dctx.data(), ctx.data(), qkv.data(), saved.data(), cu.data(), N,
                             kBatch, kSeq, kHeads, kHeadDim, dropout(p, 1)});
    } else {
      be.attention_forward(fwd);
    }
    benchmark::ClobberMemory();
  }
  // Two len x len x D products forward, four backward, per (sequence, head).
  set_flops(state, (backward ? 8.0 : 4.0) * kHeads * pairs_work * kHeadDim);
}
BENCHMARK(BM_Attention)
    ->ArgNames({"bwd", "drop%", "full"})
    ->Args({0, 0, 0})
    ->Args({0, 10, 0})
    ->Args({1, 0, 0})
    ->Args({1, 10, 0})
    ->Args({0, 10, 1})
    ->Args({1, 10, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// ---- row-wise and elementwise ops (elements/s) --------------------------------------------------

void BM_LayerNorm(benchmark::State& state) {
  const bool backward = state.range(0) != 0;
  const size_t n = static_cast<size_t>(kTokens) * kHidden;
  auto x = random_buffer(n), g = random_buffer(kHidden), b = random_buffer(kHidden), dout = random_buffer(n);
  AlignedBuffer<float> out(n), mean(kTokens), rstd(kTokens), dx(n), dg(kHidden), db(kHidden);
  cpu::layernorm_forward<float>(out.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), kTokens, kHidden);
  for (auto _ : state) {
    if (backward) {
      cpu::layernorm_backward<float>(dx.data(), dg.data(), db.data(), dout.data(), x.data(), g.data(), mean.data(),
                                     rstd.data(), kTokens, kHidden);
    } else {
      cpu::layernorm_forward<float>(out.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), kTokens,
                                    kHidden);
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_LayerNorm)->ArgName("bwd")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The sub-layer end: LayerNorm(dropout(inp + bias) + residual), and its backward (dinp, dresidual, dbias, dgamma,
// dbeta).
void BM_ResidualLayerNorm(benchmark::State& state) {
  const bool backward = state.range(0) != 0;
  const float p = static_cast<float>(state.range(1)) / 100.0f;
  const size_t n = static_cast<size_t>(kTokens) * kHidden;
  auto x = random_buffer(n), bias = random_buffer(kHidden), res = random_buffer(n), g = random_buffer(kHidden),
       b = random_buffer(kHidden), dout = random_buffer(n);
  AlignedBuffer<float> out(n), sum(n), mean(kTokens), rstd(kTokens), dx(n), dres(n), dbias(kHidden), dg(kHidden),
      db(kHidden);
  Backend& be = cpu_backend();
  const ops::ResidualLayerNormForward fwd{out.data(), sum.data(), mean.data(), rstd.data(), x.data(), bias.data(),
                                          res.data(), g.data(), b.data(), kTokens, kHidden, dropout(p, 2)};
  be.residual_layernorm_forward(fwd);
  for (auto _ : state) {
    if (backward) {
      be.residual_layernorm_backward({dx.data(), dres.data(), dbias.data(), dg.data(), db.data(), dout.data(),
                                      sum.data(), mean.data(), rstd.data(), g.data(), kTokens, kHidden, dropout(p, 2)});
    } else {
      be.residual_layernorm_forward(fwd);
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_ResidualLayerNorm)
    ->ArgNames({"bwd", "drop%"})
    ->Args({0, 10})
    ->Args({1, 10})
    ->Args({0, 0})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// GELU forward (the kernel a linear layer applies after its product) and the activation_backward op.
void BM_Gelu(benchmark::State& state) {
  const bool backward = state.range(0) != 0;
  const size_t n = static_cast<size_t>(kTokens) * kFfn;
  auto x = random_buffer(n, -4, 4), dout = random_buffer(n);
  AlignedBuffer<float> out(n);
  Backend& be = cpu_backend();
  for (auto _ : state) {
    if (backward) {
      be.activation_backward({out.data(), dout.data(), x.data(), n, Activation::GELU});
    } else {
      cpu::gelu_forward<float>(out.data(), x.data(), n);
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
  AlignedBuffer<float> out(n), dx(n);
  const RngKey key{kCounter.seed, kCounter.step, 0};
  for (auto _ : state) {
    if (backward) {
      cpu::dropout_backward<float>(dx.data(), x.data(), n, p, key);
    } else {
      cpu::bias_dropout_residual_forward<float>(out.data(), x.data(), nullptr, r.data(), kTokens, kHidden, p, key);
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

// The embedding op: lookup, LayerNorm and dropout; the backward through them into the three tables.
void BM_Embedding(benchmark::State& state) {
  const bool backward = state.range(0) != 0;
  const size_t n = static_cast<size_t>(kTokens) * kHidden;
  auto word = random_buffer(static_cast<size_t>(kVocab) * kHidden), type = random_buffer(2 * kHidden),
       pos = random_buffer(512 * kHidden), g = random_buffer(kHidden), b = random_buffer(kHidden),
       dout = random_buffer(n);
  auto ids = random_ids(kTokens, kVocab), types = random_ids(kTokens, 2), positions = random_ids(kTokens, kSeq);
  AlignedBuffer<float> out(n), sum(n), mean(kTokens), rstd(kTokens), scratch(2 * n),
      dword(static_cast<size_t>(kVocab) * kHidden), dtype(2 * kHidden), dpos(512 * kHidden), dg(kHidden), db(kHidden);
  Backend& be = cpu_backend();
  const ops::EmbeddingForward fwd{out.data(), sum.data(), mean.data(), rstd.data(), ids.data(), types.data(),
                                  positions.data(), word.data(), type.data(), pos.data(), g.data(), b.data(),
                                  kTokens, kHidden, dropout(0.1f, 3)};
  be.embedding_forward(fwd);
  for (auto _ : state) {
    if (backward) {
      be.embedding_backward({dword.data(), dtype.data(), dpos.data(), dg.data(), db.data(), scratch.data(),
                             dout.data(), sum.data(), mean.data(), rstd.data(), g.data(), ids.data(), types.data(),
                             positions.data(), kTokens, kHidden, dropout(0.1f, 3)});
    } else {
      be.embedding_forward(fwd);
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_Embedding)->ArgName("bwd")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The rows the heads read: the masked positions of every sequence gathered (MLM), and scattered back with their
// gradients added up.
void BM_Gather(benchmark::State& state) {
  const bool backward = state.range(0) != 0;
  const size_t n = static_cast<size_t>(kPredictions) * kHidden;
  auto x = random_buffer(static_cast<size_t>(kTokens) * kHidden), dout = random_buffer(n);
  auto rows = random_ids(kPredictions, kTokens);
  AlignedBuffer<float> out(n), dx(static_cast<size_t>(kTokens) * kHidden);
  Backend& be = cpu_backend();
  for (auto _ : state) {
    if (backward) {
      be.gather_backward({dx.data(), dout.data(), rows.data(), kPredictions, kTokens, kHidden, false});
    } else {
      be.gather_forward({out.data(), x.data(), rows.data(), kPredictions, kHidden});
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_Gather)->ArgName("bwd")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The masked-LM cross-entropy: forward (log-sum-exp, loss and accuracy statistics), backward from the saved
// log-sum-exp, in place as the model runs it.
void BM_CrossEntropy(benchmark::State& state) {
  const bool backward = state.range(0) != 0;
  const size_t n = static_cast<size_t>(kPredictions) * kVocab;
  auto logits = random_buffer(n, -8, 8), weights = random_buffer(kPredictions, 0, 1);
  auto labels = random_ids(kPredictions, kVocab);
  AlignedBuffer<float> lse(kPredictions), dlogits(n);
  AlignedBuffer<double> stats(2);
  Backend& be = cpu_backend();
  const ops::CrossEntropyForward fwd{lse.data(), stats.data(), logits.data(), labels.data(), weights.data(),
                                     weights.data(), kPredictions, kVocab, kVocab};
  be.cross_entropy_forward(fwd);
  for (auto _ : state) {
    if (backward) {
      be.cross_entropy_backward({dlogits.data(), logits.data(), lse.data(), labels.data(), weights.data(),
                                 kPredictions, kVocab, kVocab, 1.0f});
    } else {
      be.cross_entropy_forward(fwd);
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_CrossEntropy)->ArgName("bwd")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

// ---- the optimizer ops over BERT-base's parameters (parameters/s) -------------------------------------
// The tensor sizes of BERT-base pretraining (embeddings, 12 layers, pooler, heads), chunked as the optimizer does.

struct OptimizerState {
  std::vector<int32_t> tensor;
  std::vector<int64_t> begin, end;
  std::vector<uint8_t> excluded;
  size_t total = 0, parameters = 0;
  AlignedBuffer<float> grads, master, m, v, sum;
  AlignedBuffer<double> norms;
  ops::StepScalars scalars;

  void add(size_t numel, bool is_excluded) {
    const int32_t t = static_cast<int32_t>(excluded.size());
    for (size_t b = 0; b < numel; b += size_t{1} << 15) {
      tensor.push_back(t);
      begin.push_back(static_cast<int64_t>(total + b));
      end.push_back(static_cast<int64_t>(total + std::min(b + (size_t{1} << 15), numel)));
    }
    excluded.push_back(is_excluded);
    total += (numel + 63) / 64 * 64;
    parameters += numel;
  }

  OptimizerState() {
    const size_t H = kHidden, F = kFfn;
    add(size_t{kVocab} * H, false);
    add(512 * H, false);
    add(2 * H, false);
    add(H, true);
    add(H, true);
    for (int layer = 0; layer < 12; ++layer) {
      for (int k = 0; k < 4; ++k) {
        add(H * H, false);
        add(H, true);
      }
      add(H, true);
      add(H, true);
      add(H * F, false);
      add(F, true);
      add(F * H, false);
      add(H, true);
      add(H, true);
      add(H, true);
    }
    add(H * H, false);  // pooler
    add(H, true);
    add(H * H, false);  // MLM transform
    add(H, true);
    add(H, true);
    add(H, true);
    add(kVocab, true);  // MLM output bias
    add(2 * H, false);  // NSP
    add(2, true);
    grads = random_buffer(total, -1e-3f, 1e-3f, 7);
    master = random_buffer(total, -0.05f, 0.05f, 8);
    m = AlignedBuffer<float>(total);
    v = AlignedBuffer<float>(total);
    sum = AlignedBuffer<float>(total);
    norms = AlignedBuffer<double>(2 * excluded.size());
    scalars.learning_rate = 1e-6f;
    scalars.max_grad_norm = 1e30f;  // never clips: measures the sum
  }
  ops::Chunks chunks() const {
    return {tensor.data(), begin.data(), end.data(), 0, static_cast<int>(tensor.size())};
  }
};

OptimizerState& optimizer_state() {
  static OptimizerState s;
  return s;
}

void BM_LambOps(benchmark::State& state) {
  OptimizerState& s = optimizer_state();
  Backend& be = cpu_backend();
  for (auto _ : state) {
    be.fill_zero(s.norms.data(), 2 * s.excluded.size() * sizeof(double));
    ops::LambMoments mo{s.m.data(), s.v.data(), s.norms.data(), s.grads.data(), s.master.data(), s.excluded.data(),
                        nullptr, &s.scalars, s.chunks()};
    be.lamb_moments(mo);
    be.lamb_apply({s.master.data(), nullptr, s.m.data(), s.v.data(), s.norms.data(), s.excluded.data(), &s.scalars,
                   s.chunks()});
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * s.parameters));
}
BENCHMARK(BM_LambOps)->Unit(benchmark::kMillisecond)->UseRealTime();

// The whole clip, or (sharded) a shard's partial sum of squares and the finish from it.
void BM_GradientClip(benchmark::State& state) {
  const bool sharded = state.range(0) != 0;
  OptimizerState& s = optimizer_state();
  Backend& be = cpu_backend();
  for (auto _ : state) {
    if (sharded) {
      be.gradient_clip({&s.scalars, s.norms.data(), s.grads.data(), s.chunks()});
      be.gradient_clip_finish({&s.scalars});
    } else {
      be.gradient_clip({&s.scalars, nullptr, s.grads.data(), s.chunks()});
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * s.parameters));
}
BENCHMARK(BM_GradientClip)->ArgName("sharded")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_GradientAccumulate(benchmark::State& state) {
  OptimizerState& s = optimizer_state();
  Backend& be = cpu_backend();
  for (auto _ : state) be.gradient_accumulate({s.sum.data(), s.grads.data(), &s.scalars, s.chunks(), 0.5f});
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * s.parameters));
}
BENCHMARK(BM_GradientAccumulate)->Unit(benchmark::kMillisecond)->UseRealTime();

// The FP8 scale update of BERT-large's encoder (24 layers x 4 GEMMs x 3 operands), amax history 16.
void BM_Fp8ScaleUpdate(benchmark::State& state) {
  constexpr int kTensors = 24 * 4 * 3, kHistory = 16;
  std::vector<float> scale(kTensors, 1.0f), history(static_cast<size_t>(kHistory) * kTensors, 0.0f);
  Backend& be = cpu_backend();
  for (auto _ : state) {
    for (int t = 0; t < kTensors; ++t) history[t] = 1.0f + t;  // this step's amaxes
    be.fp8_scale_update({scale.data(), history.data(), kTensors, kHistory, 0.0f});
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kTensors));
}
BENCHMARK(BM_Fp8ScaleUpdate)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_ScheduleStep(benchmark::State& state) {
  ops::StepScalars scalars;
  const kmath::StepSchedule schedule{.learning_rate = 2e-3, .beta1 = 0.9, .beta2 = 0.999, .poly_power = 1,
                                     .train_steps = 1000, .warmup_steps = 100, .start_warmup_step = 0};
  Backend& be = cpu_backend();
  for (auto _ : state) {
    scalars.updates = (scalars.updates + 1) % 1000;
    be.schedule_step({&scalars, schedule, 8, 0});
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_ScheduleStep)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_RecordStep(benchmark::State& state) {
  ops::StepScalars scalars;
  std::vector<ops::StepRecord> ring(16);
  const double sums[ops::kRecordSums] = {3.5, 40, 0.75, 6, 0};
  Backend& be = cpu_backend();
  for (auto _ : state) be.record_step({&scalars, sums, ring.data(), 16});
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_RecordStep)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The benchmark of each op of the list (ops.h): a switch, so an op added to the list without a benchmark does not
// compile (-Werror=switch).
using OpBenchmark = void (*)(benchmark::State&);
[[maybe_unused]] OpBenchmark benchmark_of(ops::Op op) {
  switch (op) {
    case ops::Op::LINEAR_FORWARD: case ops::Op::LINEAR_BACKWARD: return BM_Linear;
    case ops::Op::ACTIVATION_BACKWARD: return BM_Gelu;
    case ops::Op::EMBEDDING_FORWARD: case ops::Op::EMBEDDING_BACKWARD: return BM_Embedding;
    case ops::Op::RESIDUAL_LAYERNORM_FORWARD: case ops::Op::RESIDUAL_LAYERNORM_BACKWARD: return BM_ResidualLayerNorm;
    case ops::Op::ATTENTION_FORWARD: case ops::Op::ATTENTION_BACKWARD: return BM_Attention;
    case ops::Op::GATHER_FORWARD: case ops::Op::GATHER_BACKWARD: return BM_Gather;
    case ops::Op::CROSS_ENTROPY_FORWARD: case ops::Op::CROSS_ENTROPY_BACKWARD: return BM_CrossEntropy;
    case ops::Op::GRADIENT_CLIP: case ops::Op::GRADIENT_CLIP_FINISH: return BM_GradientClip;
    case ops::Op::GRADIENT_ACCUMULATE: return BM_GradientAccumulate;
    case ops::Op::LAMB_MOMENTS: case ops::Op::LAMB_APPLY: return BM_LambOps;
    case ops::Op::FP8_SCALE_UPDATE: return BM_Fp8ScaleUpdate;
    case ops::Op::SCHEDULE_STEP: return BM_ScheduleStep;
    case ops::Op::RECORD_STEP: return BM_RecordStep;
  }
  return nullptr;
}

}  // namespace
}  // namespace bertperf
