// Microbenchmarks of the optimizer path at BERT-base size (110M parameters, the real tensor
// table): the LAMB update, global-norm clipping and gradient accumulation. All three are memory
// bound, so the counter is parameters/s; LAMB moves 40 bytes per parameter (reads g, w, m, v and
// writes m, v in its first pass; reads m, v, w and writes w in its second).
#include <benchmark/benchmark.h>

#include <random>

#include "model/bert_params.h"
#include "optim/lamb.h"

namespace bertperf {
namespace {

BertConfig bert_base() {
  BertConfig c;
  c.hidden_size = 768;
  c.num_hidden_layers = 12;
  c.num_attention_heads = 12;
  c.intermediate_size = 3072;
  return c;
}

struct OptimizerState {
  TensorTable table = bert_parameter_table(bert_base());
  FlatTensors params{table}, grads{table};

  OptimizerState() {
    bert_init_parameters(params, bert_base(), 1);
    std::mt19937 rng(2);
    std::normal_distribution<float> normal(0.0f, 1e-3f);
    for (const TensorInfo& t : table.tensors())
      for (size_t i = 0; i < t.numel; ++i) grads.get(t)[i] = normal(rng);
  }
  int64_t parameters() const {
    int64_t n = 0;
    for (const TensorInfo& t : table.tensors()) n += static_cast<int64_t>(t.numel);
    return n;
  }
};

OptimizerState& state_once() {
  static OptimizerState s;
  return s;
}

void BM_LambStep(benchmark::State& state) {
  OptimizerState& s = state_once();
  LambHyperparams hp;
  Lamb lamb(s.table, hp);
  for (auto _ : state) lamb.step(s.params, s.grads, 1e-6);
  state.SetItemsProcessed(state.iterations() * s.parameters());
}
BENCHMARK(BM_LambStep)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_GlobalNorm(benchmark::State& state) {
  OptimizerState& s = state_once();
  for (auto _ : state) benchmark::DoNotOptimize(global_norm(s.grads));
  state.SetItemsProcessed(state.iterations() * s.parameters());
}
BENCHMARK(BM_GlobalNorm)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_GradAccumulate(benchmark::State& state) {
  OptimizerState& s = state_once();
  GradAccumulator acc(s.table, 1 << 30, 1e30);  // never ready, never clips: measures the add
  for (auto _ : state) benchmark::DoNotOptimize(acc.add(s.grads));
  state.SetItemsProcessed(state.iterations() * s.parameters());
}
BENCHMARK(BM_GradAccumulate)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace bertperf
