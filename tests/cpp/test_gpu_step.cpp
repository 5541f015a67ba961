// The whole training step on an asynchronous backend that captures: the CUDA backend where a GPU is present (each
// test skips, saying why, elsewhere), and cpu-async, the CPU's work queued as on a GPU with random delays, everywhere:
//  - one forward and backward with dropout off against the CPU backend: loss within 1e-2 relative, and every
//    parameter gradient agreeing with the CPU's by gradient_agreement.h's rule (cosine similarity at least 0.999
//    where a gradient matters, an absolute bound where it is negligible, as the attention key bias's is); a backend
//    in the CPU's fp32 (cpu-async) gives the cpu backend's bits at the same shapes;
//  - two runs of a few steps from one seed, dropout on, bit-identical, and a captured step (a CUDA graph, cpu-async's
//    recorded queue) replaying to the same bits as the same steps run eagerly: exactly the determinism the backend
//    declares (where it declares an op non-deterministic, as the CUDA backend does off Hopper for cuDNN's attention
//    backward, the runs use its "deterministic" option, under which it must declare none);
//  - a few steps with no oracle at all, for compute-sanitizer;
//  - a session's eval over distinct batches (two staging buffers taking turns, each batch's upload reading pinned
//    memory when it runs) equals the same eval with every upload blocking, twice in a row.
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

#include "gradient_agreement.h"
#include "reproducible.h"
#include "harness/train_session.h"
#include "registry/registry.h"
#include "small_bert_step.h"
#include "staged_steps.h"
#include "synthetic_data.h"
#include "temp_dir.h"

namespace bertperf {
namespace {

// The backend under test, by name, with its options here: cpu-async on one thread (beside CTest's other tests) waits
// up to 100 us before each piece of work.
BackendSpec spec_of(const std::string& name, std::vector<std::string> options = {}) {
  if (name == "cpu-async") {
    options.push_back("threads=1");
    options.push_back("delay_us=100");
    options.push_back("delay_seed=11");
  }
  return backend_spec(name, options);
}

class GpuStep : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::vector<std::string> here = available_backends();
    if (std::find(here.begin(), here.end(), GetParam()) == here.end())
      GTEST_SKIP() << "no " << GetParam() << " backend here (this build has none, or no GPU is visible): the GPU "
                   << "step tests run on a GPU machine (scripts/device_check.sh)";
  }
  std::unique_ptr<Backend> make(std::vector<std::string> options = {}) const {
    return make_backend(spec_of(GetParam(), std::move(options)));
  }
  // The backend for the bit-identity tests: with the options under which it declares every op deterministic.
  BackendSpec reproducible() const {
    const std::vector<std::string> options = testing::reproducible_options(make()->capabilities());
    if (!options.empty()) {
      std::printf("%s declares ops non-deterministic: the runs use %s\n", GetParam().c_str(), options[0].c_str());
      EXPECT_TRUE(make(options)->capabilities().nondeterministic.empty())
          << "under " << options[0] << " the backend still declares ops non-deterministic";
    }
    return spec_of(GetParam(), options);
  }
  // Packed rows per training batch: 8 on a GPU, 2 on the CPU (the same layouts, a quarter of the time).
  int rows() const { return backend_info(GetParam(), "test").test_label == "gpu" ? 8 : 2; }
};

TEST_P(GpuStep, ForwardBackwardMatchesTheCpuBackend) {
  const BertConfig config = small_config(0.0f);
  const TensorTable table = bert_parameter_table(config);
  const Batch batch = packed_batch(8, config.vocab_size, 3);
  const std::unique_ptr<Backend> backend = make();  // for what it is: its dtypes and capabilities
  const Gradients got = forward_backward(spec_of(GetParam()), config, batch);
  const Gradients want = forward_backward(backend_spec("cpu"), config, batch);
  std::printf("backend: %s\n", got.backend.c_str());
  ASSERT_TRUE(std::isfinite(got.loss));
  EXPECT_NEAR(got.loss, want.loss, 1e-2 * std::fabs(want.loss)) << "loss";
  for (const std::string& line : gradient_disagreements(table, *got.grads, *want.grads)) ADD_FAILURE() << line;
  // A backend in the CPU's fp32 (cpu-async runs the cpu backend's ops): the cpu backend's bits at the same shapes.
  if (backend->act_dtype() == DType::F32 && backend->master_dtype() == DType::F32) {
    const Gradients bits = forward_backward(
        backend_spec("cpu", {cat("static_shapes=", backend->capabilities().static_shapes ? "true" : "false")}), config,
        batch);
    EXPECT_EQ(got.loss, bits.loss);
    EXPECT_EQ(std::memcmp(got.grads->data(), bits.grads->data(), got.grads->size() * sizeof(float)), 0)
        << "gradients differ from the cpu backend's at the same shapes";
  }
}

// Training steps of the small BERT on 2 rows with dropout on, eager, captured and replayed, with no comparison
// against another backend: what compute-sanitizer runs on the CUDA backend (scripts/device_check.sh), so that a
// failure under it is the sanitizer's finding, not a tolerance. It asserts only that the steps run with finite losses.
TEST_P(GpuStep, StepsRunForTheSanitizers) {
  const BertConfig config = small_config(0.1f);
  const Batch batches[2] = {packed_batch(2, config.vocab_size, 21), packed_batch(2, config.vocab_size, 22)};
  TrainStack stack = small_stack(spec_of(GetParam()), config, batches[0].capacity);
  testing::StagedSteps steps(stack, {batches[0], batches[1]});
  // Step 0 eager (it sizes every buffer and builds the library plans); steps 1 and 2 capture one graph per staging
  // set and replay it; step 3 replays the first again.
  for (int i = 0; i < 4; ++i) {
    const StepStats s = steps.run(i);
    EXPECT_TRUE(std::isfinite(s.loss.mlm_loss + s.loss.nsp_loss)) << "step " << i;
  }
  EXPECT_TRUE(stack.step().captured());
}

// The master weights after `steps` training steps (dropout on) from the parameters of seed 7, on batches of `rows`
// packed rows.
std::vector<float> train(const BackendSpec& spec, const BertConfig& config, int rows, int steps, bool capture,
                         bool* captured = nullptr) {
  const Batch batches[2] = {packed_batch(rows, config.vocab_size, 11), packed_batch(rows, config.vocab_size, 12)};
  TrainStack stack = small_stack(spec, config, batches[0].capacity, capture);
  testing::StagedSteps staged(stack, {batches[0], batches[1]});
  for (int i = 0; i < steps; ++i) {
    const StepStats s = staged.run(i);
    EXPECT_TRUE(std::isfinite(s.loss.mlm_loss + s.loss.nsp_loss)) << "step " << i;
  }
  if (captured) *captured = stack.step().captured();
  FlatTensors out(stack.table());
  stack.params().download(out);
  return std::vector<float>(out.data(), out.data() + out.size());
}

TEST_P(GpuStep, TwoRunsFromOneSeedAreBitIdentical) {
  const BertConfig config = small_config(0.1f);
  const BackendSpec spec = reproducible();
  const std::vector<float> a = train(spec, config, rows(), 4, true);
  const std::vector<float> b = train(spec, config, rows(), 4, true);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "two runs from one seed differ";
}

TEST_P(GpuStep, CapturedStepsEqualEagerSteps) {
  const BertConfig config = small_config(0.1f);
  bool captured = false, eager_captured = true;
  const BackendSpec spec = reproducible();
  const std::vector<float> graph = train(spec, config, rows(), 5, true, &captured);
  const std::vector<float> eager = train(spec, config, rows(), 5, false, &eager_captured);
  EXPECT_TRUE(captured) << "the backend did not capture the step";
  EXPECT_FALSE(eager_captured);
  ASSERT_EQ(graph.size(), eager.size());
  EXPECT_EQ(std::memcmp(graph.data(), eager.data(), graph.size() * sizeof(float)), 0)
      << "replayed steps differ from the same steps run eagerly";
}

// No host wait in a step on the GPU (harness/train_step.h): after three steps read one by one (the capture's), five
// replayed steps launched with their next batches staged between them wait for nothing on this thread, their
// records come back in one wait, and they equal, bit for bit, the records of the same steps read one by one.
TEST_P(GpuStep, StepsWaitForNothingUntilTheirRecordsAreRead) {
  const BertConfig config = small_config(0.1f);
  const Batch batches[2] = {packed_batch(rows(), config.vocab_size, 11), packed_batch(rows(), config.vocab_size, 12)};
  auto records = [&](bool read_each, int64_t* waits) {
    TrainStack stack = small_stack(reproducible(), config, batches[0].capacity);
    testing::StagedSteps staged(stack, {batches[0], batches[1]});
    std::vector<StepStats> out;
    for (int i = 0; i < 3; ++i) out.push_back(staged.run(i));
    const int64_t before = Device::host_waits_of_this_thread();
    for (int i = 3; i < 8; ++i) {
      if (read_each) {
        out.push_back(staged.run(i));
      } else {
        staged.launch(i);
      }
    }
    if (waits) *waits = Device::host_waits_of_this_thread() - before;
    for (const StepStats& s : stack.step().read()) out.push_back(s);
    EXPECT_TRUE(stack.step().captured());
    return out;
  };
  int64_t waits = -1;
  const std::vector<StepStats> once = records(false, &waits), each = records(true, nullptr);
  EXPECT_EQ(waits, 0) << "the host waited for the device between reads";
  ASSERT_EQ(once.size(), each.size());
  for (size_t i = 0; i < once.size(); ++i) {
    EXPECT_EQ(std::memcmp(&once[i].loss, &each[i].loss, sizeof(LossStats)), 0) << "step " << i;
    EXPECT_EQ(once[i].grad_norm, each[i].grad_norm) << "step " << i;
    EXPECT_EQ(once[i].learning_rate, each[i].learning_rate) << "step " << i;
    EXPECT_EQ(once[i].updates, static_cast<int64_t>(i));
    EXPECT_TRUE(once[i].finite()) << "step " << i;
  }
}

// A session's eval: the eval set's four distinct batches staged through two buffers that take turns, each batch's
// upload reading pinned memory when it runs, while the forwards run. If the host rewrote a staging buffer before the
// upload that reads it had run, a batch would be evaluated twice and another never, and the loss sum would differ from
// that of the same eval with every upload blocking (the backend option "blocking_uploads"). Evaluated twice, to cross
// from one eval's last batches into the next's first.
TEST_P(GpuStep, EvalOverDistinctBatchesEqualsTheEvalWithBlockingUploads) {
  bertperf::testing::TempDir dir("bertperf_eval_staging");
  const TrainConfig config = load_train_config(bertperf::testing::write_synthetic_run(dir.path).config_path);
  auto evaluate = [&](std::vector<std::string> options) {
    TrainConfig c = config;
    c.backend = spec_of(GetParam(), std::move(options));
    const auto dist = DistContext::single();
    TrainSession session(c, 3, *dist);
    return std::vector<EvalResult>{session.evaluate(), session.evaluate()};
  };
  const std::vector<EvalResult> want = evaluate({"blocking_uploads=true"}), got = evaluate({});
  ASSERT_EQ(want[0].samples, 64);
  for (size_t k = 0; k < 2; ++k) {
    SCOPED_TRACE(cat("evaluation ", k + 1));
    EXPECT_EQ(got[k].samples, want[0].samples);
    EXPECT_EQ(got[k].mlm_loss, want[0].mlm_loss) << "a batch was torn by a staging buffer rewritten too early";
    EXPECT_EQ(got[k].mlm_accuracy, want[0].mlm_accuracy);
    EXPECT_EQ(want[k].mlm_loss, want[0].mlm_loss);
  }
}

// Every backend that declares the ctest label gpu, named for it (CMakeLists.txt files GpuBackends/* under gpu), as
// the conformance test's instances; and cpu-async, the CPU backend with a GPU's asynchrony.
std::vector<std::string> gpu_backends() {
  std::vector<std::string> names;
  for (const BackendInfo& b : backend_infos())
    if (b.test_label == "gpu") names.push_back(b.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(GpuBackends, GpuStep, ::testing::ValuesIn(gpu_backends()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(Backends, GpuStep, ::testing::Values("cpu-async"),
                         [](const ::testing::TestParamInfo<std::string>&) { return std::string("cpu_async"); });

}  // namespace
}  // namespace bertperf
