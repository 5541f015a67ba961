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
#include "backends/cpu/cpu_backend.h"
#include "comm/reducer.h"
#include "harness/train_step.h"
#include "model/batch_stage.h"
#include "model/bert.h"
#include "model/bert_params.h"
#include "model/param_buffers.h"
#include "optim/lamb.h"

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

BertConfig small_config(float dropout) {
  BertConfig c;
  c.vocab_size = 1000;
  c.hidden_size = 256;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;  // head size 64, as BERT-large
  c.intermediate_size = 1024;
  c.max_position_embeddings = 128;
  c.hidden_dropout_prob = dropout;
  c.attention_probs_dropout_prob = dropout;
  return c;
}

// `rows` packed rows of 128 tokens, 1 to 3 sequences of random lengths each, 15% predictions; filler after them.
Batch packed_batch(int rows, int V, uint32_t seed) {
  constexpr int S = 128, kMaxPerRow = 3, kMaxPredictions = 20;
  std::mt19937 rng(seed);
  Batch b;
  b.capacity = {rows * S, rows * kMaxPerRow, rows * kMaxPredictions, S};
  for (int r = 0; r < rows; ++r) {
    const int k = 1 + int(rng() % kMaxPerRow);
    int left = S - int(rng() % 9);  // a few padding tokens in some rows
    for (int q = 0; q < k; ++q) {
      const int len = q + 1 == k ? left : std::max(8, int(rng() % (left - 8 * (k - q - 1))));
      left -= len;
      const int first = b.tokens;
      b.cu_seqlens.push_back(first);
      for (int t = 0; t < len; ++t) {
        b.input_ids.push_back(5 + int(rng() % (V - 5)));
        b.segment_ids.push_back(t >= len / 2);
        b.position_ids.push_back(t);
      }
      const int predictions = std::max(1, std::min(kMaxPredictions / k, int(0.15 * len)));
      for (int p = 0; p < predictions; ++p) {
        b.mlm_positions.push_back(first + 1 + int(rng() % (len - 1)));
        b.mlm_labels.push_back(5 + int(rng() % (V - 5)));
        b.mlm_weights.push_back(1.0f);
      }
      b.nsp_labels.push_back(int(rng() % 2));
      b.tokens += len;
      b.sequences += 1;
    }
  }
  fill_to_capacity(b);
  return b;
}

struct Gradients {
  double loss = 0;
  std::unique_ptr<FlatTensors> grads;
};

// One forward and backward (dropout off) on `backend` from the parameters of seed 7.
Gradients forward_backward(Backend& backend, const BertConfig& config, const TensorTable& table, const Batch& batch) {
  FlatTensors init(table);
  bert_init_parameters(init, config, 7);
  ParamBuffers params(backend, table);
  params.upload(init);
  BertModel model(backend, config, table, batch.capacity);
  BatchStage stage(backend, batch.capacity);
  const DeviceBatch& device = stage.stage(batch, LossWeighting::MEAN);
  model.zero_stats();
  model.forward(device, params.weights(), true, nullptr, 0);
  backend.fill_zero(params.grads(), params.elements() * dtype_size(backend.master_dtype()));
  model.backward(device, params.weights(), params.grads(), 1.0f);
  Gradients out;
  const LossStats s = model.read_stats();
  out.loss = s.mlm_loss + s.nsp_loss;
  out.grads = std::make_unique<FlatTensors>(table);
  params.download_grads(*out.grads);
  return out;
}

TEST(GpuStep, ForwardBackwardMatchesTheCpuBackend) {
  SKIP_WITHOUT_CUDA();
  const BertConfig config = small_config(0.0f);
  const TensorTable table = bert_parameter_table(config);
  const Batch batch = packed_batch(8, config.vocab_size, 3);
  std::unique_ptr<Backend> cuda = make_backend(backend_spec("cuda")), cpu = make_cpu_backend(DType::F32, 0);
  const Gradients got = forward_backward(*cuda, config, table, batch);
  const Gradients want = forward_backward(*cpu, config, table, batch);
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
  std::unique_ptr<Backend> backend = make_backend(backend_spec("cuda"));
  const TensorTable table = bert_parameter_table(config);
  FlatTensors init(table);
  bert_init_parameters(init, config, 7);
  ParamBuffers params(*backend, table);
  params.upload(init);
  LambHyperparams hp;
  hp.learning_rate = 1e-3;
  hp.train_steps = 100;
  Lamb lamb(*backend, table, hp);
  const Batch batches[2] = {packed_batch(8, config.vocab_size, 11), packed_batch(8, config.vocab_size, 12)};
  BertModel model(*backend, config, table, batches[0].capacity);
  auto dist = DistContext::single();
  std::unique_ptr<GradReducer> reducer = make_grad_reducer(*backend, backend->master_dtype(), *dist);
  TrainStep step(*backend, model, params, lamb, *reducer, {.seed = 5, .capture = capture}, batches[0].capacity);
  for (int i = 0; i < steps; ++i) {
    step.launch({&batches[i % 2]}, i);
    step.stage_next({&batches[(i + 1) % 2]});
    const StepStats s = step.finish();
    EXPECT_TRUE(std::isfinite(s.loss.mlm_loss + s.loss.nsp_loss)) << "step " << i;
  }
  if (captured) *captured = step.captured();
  FlatTensors out(table);
  params.download(out);
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
