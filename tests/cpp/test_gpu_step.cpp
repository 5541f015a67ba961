// The CUDA backend's whole training step, where a GPU is present (each test skips, saying why, elsewhere):
//  - one forward and backward with dropout off against the CPU backend: loss within 1e-2 relative, and every
//    parameter gradient agreeing with the CPU's by gradient_agreement.h's rule (cosine similarity at least 0.999
//    where a gradient matters, an absolute bound where it is negligible, as the attention key bias's is);
//  - two runs of a few steps from one seed, dropout on, bit-identical;
//  - a captured step (CUDA graph) replays to the same bits as the same steps run eagerly;
//  - a few steps with no oracle at all, for compute-sanitizer.
// The model is small_bert_step.h's: a small BERT with BERT-large's head size (64, cuDNN's fused attention), on packed
// rows of variable-length sequences with filler past them, so every layout case of a real batch is in it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "gradient_agreement.h"
#include "small_bert_step.h"

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

TEST(GpuStep, ForwardBackwardMatchesTheCpuBackend) {
  SKIP_WITHOUT_CUDA();
  const BertConfig config = small_config(0.0f);
  const TensorTable table = bert_parameter_table(config);
  const Batch batch = packed_batch(8, config.vocab_size, 3);
  const Gradients got = forward_backward("cuda", config, batch);
  const Gradients want = forward_backward("cpu", config, batch);
  std::printf("backend: %s\n", got.backend.c_str());
  ASSERT_TRUE(std::isfinite(got.loss));
  EXPECT_NEAR(got.loss, want.loss, 1e-2 * std::fabs(want.loss)) << "loss";
  for (const std::string& line : gradient_disagreements(table, *got.grads, *want.grads)) ADD_FAILURE() << line;
}

// Training steps of the small BERT on 2 rows with dropout on, eager, captured and replayed, on the CUDA backend with
// no comparison against another backend: what compute-sanitizer runs (scripts/device_check.sh), so that a failure
// under it is the sanitizer's finding, not a tolerance. It asserts only that the steps run with finite losses.
TEST(GpuStep, StepsRunForTheSanitizers) {
  SKIP_WITHOUT_CUDA();
  const BertConfig config = small_config(0.1f);
  const Batch batches[2] = {packed_batch(2, config.vocab_size, 21), packed_batch(2, config.vocab_size, 22)};
  TrainStack stack = small_stack("cuda", config, batches[0].capacity);
  TrainStep& step = stack.step();
  // Step 0 eager (it sizes every buffer and builds the library plans); steps 1 and 2 capture one graph per staging
  // set and replay it; step 3 replays the first again.
  for (int i = 0; i < 4; ++i) {
    step.launch({&batches[i % 2]}, i);
    step.stage_next({&batches[(i + 1) % 2]});
    const StepStats s = step.finish();
    EXPECT_TRUE(std::isfinite(s.loss.mlm_loss + s.loss.nsp_loss)) << "step " << i;
  }
  EXPECT_TRUE(step.captured());
}

// The master weights after `steps` training steps (dropout on) from the parameters of seed 7.
std::vector<float> train(const BertConfig& config, int steps, bool capture, bool* captured = nullptr) {
  const Batch batches[2] = {packed_batch(8, config.vocab_size, 11), packed_batch(8, config.vocab_size, 12)};
  TrainStack stack = small_stack("cuda", config, batches[0].capacity, capture);
  TrainStep& step = stack.step();
  for (int i = 0; i < steps; ++i) {
    step.launch({&batches[i % 2]}, i);
    step.stage_next({&batches[(i + 1) % 2]});
    const StepStats s = step.finish();
    EXPECT_TRUE(std::isfinite(s.loss.mlm_loss + s.loss.nsp_loss)) << "step " << i;
  }
  if (captured) *captured = step.captured();
  FlatTensors out(stack.table());
  stack.params().download(out);
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
