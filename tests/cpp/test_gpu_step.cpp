// The CUDA backend's whole training step, where a GPU is present (each test skips, saying why, elsewhere):
//  - one forward and backward with dropout off against the CPU backend: loss within 1e-2 relative, every gradient
//    tensor's cosine similarity with the CPU's at least 0.999 (the bf16 step against the fp32 oracle);
//  - two runs of a few steps from one seed, dropout on, bit-identical;
//  - a captured step (CUDA graph) replays to the same bits as the same steps run eagerly.
// The model is a small BERT with BERT-large's head size (64, cuDNN's fused attention), on packed rows of variable-
// length sequences with filler past them, so every layout case of a real batch is in it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "harness/train_stack.h"
#include "tiny_bert.h"

namespace bertperf {
namespace {

bool have_cuda() {
  const std::vector<std::string> here = available_backends();
  return std::find(here.begin(), here.end(), "cuda") != here.end();
}

#define SKIP_WITHOUT_CUDA()                                                                                   \
  if (!have_cuda())                                                                                           \
  GTEST_SKIP() << "no CUDA backend here (this build has none, or no GPU is visible): the GPU step tests run " \
                  "on a GPU machine (scripts/device_check.sh)"

// BERT-large's head size (64) in a small model.
BertConfig small_config(float dropout) {
  return testing::tiny_bert({.vocab = 1000, .hidden = 256, .heads = 4, .intermediate = 1024, .positions = 128,
                             .dropout = dropout});
}

// `rows` packed rows of 128 tokens, 1 to 3 sequences of random lengths each, 15% predictions; filler after them.
Batch packed_batch(int rows, int V, uint32_t seed) {
  constexpr int S = 128, kMaxPerRow = 3, kMaxPredictions = 20;
  std::mt19937 rng(seed);
  std::vector<std::vector<SequenceShape>> packing(rows);
  for (auto& row : packing) {
    const int k = 1 + int(rng() % kMaxPerRow);
    int left = S - int(rng() % 9);  // a few padding tokens in some rows
    for (int q = 0; q < k; ++q) {
      const int len = q + 1 == k ? left : std::max(8, int(rng() % (left - 8 * (k - q - 1))));
      left -= len;
      row.push_back({len, std::max(1, std::min(kMaxPredictions / k, int(0.15 * len)))});
    }
  }
  return random_batch({rows * S, rows * kMaxPerRow, rows * kMaxPredictions, S}, packing, V, seed);
}

// A training stack of one rank on `backend` from the parameters of seed 7 (dropout seed 5), sized for `capacity`.
TrainStack stack(const std::string& backend, const BertConfig& config, BatchCapacity capacity, bool capture = true) {
  static const auto dist = DistContext::single();
  TrainStackSpec spec;
  spec.model = config;
  spec.backend = backend_spec(backend);
  spec.backend.capture = capture;
  spec.lamb.learning_rate = 1e-3;
  spec.lamb.train_steps = 100;
  spec.seed = 5;
  spec.init_seed = 7;
  spec.train_capacity = capacity;
  return TrainStack(spec, *dist);
}

struct Gradients {
  double loss = 0;
  std::unique_ptr<FlatTensors> grads;
};

// One forward and backward (dropout off) on `backend` from the parameters of seed 7.
Gradients forward_backward(const std::string& backend, const BertConfig& config, const Batch& batch) {
  TrainStack s = stack(backend, config, batch.capacity);
  ParamBuffers& params = s.params();
  BertModel& model = s.model();
  BatchStage stage(s.backend(), batch.capacity);
  const DeviceBatch& device = stage.stage(batch, LossWeighting::MEAN);
  model.zero_stats();
  model.forward(device, params.weights(), true, nullptr, 0);
  s.backend().fill_zero(params.grads(), params.elements() * dtype_size(s.backend().master_dtype()));
  model.backward(device, params.weights(), params.grads(), 1.0f);
  Gradients out;
  const LossStats stats = model.read_stats();
  out.loss = stats.mlm_loss + stats.nsp_loss;
  out.grads = std::make_unique<FlatTensors>(s.table());
  params.download_grads(*out.grads);
  return out;
}

TEST(GpuStep, ForwardBackwardMatchesTheCpuBackend) {
  SKIP_WITHOUT_CUDA();
  const BertConfig config = small_config(0.0f);
  const TensorTable table = bert_parameter_table(config);
  const Batch batch = packed_batch(8, config.vocab_size, 3);
  const Gradients got = forward_backward("cuda", config, batch);
  const Gradients want = forward_backward("cpu", config, batch);
  ASSERT_TRUE(std::isfinite(got.loss));
  EXPECT_NEAR(got.loss, want.loss, 1e-2 * std::fabs(want.loss)) << "loss";
  for (const TensorInfo& t : table.tensors()) {
    const float* a = got.grads->get(t);
    const float* b = want.grads->get(t);
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < t.numel; ++i) {
      ab += double(a[i]) * b[i];
      aa += double(a[i]) * a[i];
      bb += double(b[i]) * b[i];
    }
    if (bb == 0) {  // a gradient that is exactly zero on the CPU (an unused embedding row block) must be so here
      EXPECT_EQ(aa, 0.0) << t.name;
      continue;
    }
    EXPECT_GE(ab / std::sqrt(aa * bb), 0.999) << t.name << ": cosine similarity of the gradients";
  }
}

// The master weights after `steps` training steps (dropout on) from the parameters of seed 7.
std::vector<float> train(const BertConfig& config, int steps, bool capture, bool* captured = nullptr) {
  const Batch batches[2] = {packed_batch(8, config.vocab_size, 11), packed_batch(8, config.vocab_size, 12)};
  TrainStack s = stack("cuda", config, batches[0].capacity, capture);
  TrainStep& step = s.step();
  for (int i = 0; i < steps; ++i) {
    step.launch({&batches[i % 2]}, i);
    step.stage_next({&batches[(i + 1) % 2]});
    const StepStats stats = step.finish();
    EXPECT_TRUE(std::isfinite(stats.loss.mlm_loss + stats.loss.nsp_loss)) << "step " << i;
  }
  if (captured) *captured = step.captured();
  FlatTensors out(s.table());
  s.params().download(out);
  return std::vector<float>(out.data(), out.data() + out.size());
}

TEST(GpuStep, TwoRunsFromOneSeedAreBitIdentical) {
  SKIP_WITHOUT_CUDA();
  const BertConfig config = small_config(0.1f);
  const std::vector<float> a = train(config, 4, true), b = train(config, 4, true);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "two runs from one seed differ";
}

TEST(GpuStep, CapturedStepsEqualEagerSteps) {
  SKIP_WITHOUT_CUDA();
  const BertConfig config = small_config(0.1f);
  bool captured = false, eager_captured = true;
  const std::vector<float> graph = train(config, 5, true, &captured);
  const std::vector<float> eager = train(config, 5, false, &eager_captured);
  EXPECT_TRUE(captured) << "the CUDA backend did not capture the step";
  EXPECT_FALSE(eager_captured);
  ASSERT_EQ(graph.size(), eager.size());
  EXPECT_EQ(std::memcmp(graph.data(), eager.data(), graph.size() * sizeof(float)), 0)
      << "replayed steps differ from the same steps run eagerly";
}

}  // namespace
}  // namespace bertperf
