// The rule that holds a backend's step gradients to a reference's (gradient_agreement.h), checked on the CPU: the
// small BERT of test_gpu_step, one forward and backward in fp32 against the same in fp64, must agree by it (though
// the attention key bias's gradients are unrelated rounding noise, which the cosine rule before failed on), and it
// must catch what a broken backend would hand it: a gradient off in direction or sign, a NaN, a key-bias gradient
// well above rounding noise (its exact value is zero), a lost query-bias gradient.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gradient_agreement.h"
#include "small_bert_step.h"

namespace bertperf {
namespace {

struct Steps {
  BertConfig config = small_config(0.0f);
  TensorTable table = bert_parameter_table(config);
  Gradients fp32, fp64;
  Steps() {
    const Batch batch = packed_batch(8, config.vocab_size, 3);
    fp32 = forward_backward(backend_spec("cpu"), config, batch);
    fp64 = forward_backward(backend_spec("cpu-f64"), config, batch);
  }
};

const Steps& steps() {
  static const Steps s;
  return s;
}

const char* const kKeyBias = "bert/encoder/layer_0/attention/self/key/bias";
const char* const kQueryBias = "bert/encoder/layer_1/attention/self/query/bias";

double norm(const float* x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += double(x[i]) * x[i];
  return std::sqrt(s);
}

double whole_norm(const FlatTensors& g) {
  double s = 0;
  for (const TensorInfo& t : g.table().tensors()) s += std::pow(norm(g.get(t), t.numel), 2);
  return std::sqrt(s);
}

// fp32 gradients with `edit` applied to a copy.
FlatTensors edited(const std::function<void(FlatTensors&)>& edit) {
  FlatTensors g(steps().table);
  std::copy(steps().fp32.grads->data(), steps().fp32.grads->data() + g.size(), g.data());
  edit(g);
  return g;
}

// Adds noise of norm `size` to a tensor.
void add_noise(FlatTensors& g, const std::string& name, double size, uint32_t seed) {
  const TensorInfo& t = g.table().at(name);
  std::mt19937 rng(seed);
  std::normal_distribution<double> d;
  std::vector<double> n(t.numel);
  for (double& x : n) x = d(rng);
  double s = 0;
  for (double x : n) s += x * x;
  for (size_t i = 0; i < t.numel; ++i) g.get(t)[i] += static_cast<float>(n[i] * size / std::sqrt(s));
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

TEST(GradientAgreement, TheCpuInFp32AgreesWithFp64ThoughTheKeyBiasIsNoise) {
  const Steps& s = steps();
  EXPECT_NEAR(s.fp32.loss, s.fp64.loss, 1e-5 * std::fabs(s.fp64.loss));
  EXPECT_EQ(joined(gradient_disagreements(s.table, *s.fp32.grads, *s.fp64.grads)), "");
  // The premise: the key bias's gradient is zero up to rounding (in fp64 too), so a cosine of it says nothing. Here
  // the two CPU runs' key-bias gradients are unrelated noise, where the rule before held them to a cosine of 0.999.
  const std::vector<double> rel = relative_gradient_norms(s.table, *s.fp64.grads);
  for (size_t i = 0; i < rel.size(); ++i) {
    const std::string& name = s.table.tensors()[i].name;
    if (name.find("attention/self/key/bias") != std::string::npos) {
      EXPECT_LT(rel[i], 1e-12) << name;
    } else {
      EXPECT_GT(rel[i], 1e-6) << name << ": every other tensor's gradient is more than rounding";
    }
  }
  const TensorInfo& key = s.table.at(kKeyBias);
  const float *a = s.fp32.grads->get(key), *b = s.fp64.grads->get(key);
  double ab = 0;
  for (size_t i = 0; i < key.numel; ++i) ab += double(a[i]) * b[i];
  EXPECT_LT(ab / (norm(a, key.numel) * norm(b, key.numel)), 0.999);
}

TEST(GradientAgreement, CatchesAGradientThatIsOffInDirectionOrSign) {
  const Steps& s = steps();
  const std::string kernel = "bert/encoder/layer_0/attention/self/query/kernel";
  const double size = norm(s.fp32.grads->get(s.table.at(kernel)), s.table.at(kernel).numel);
  // 10% noise tilts the cosine to about 0.995; 1% (bf16 is 0.4%) to 0.99995, which passes.
  std::vector<std::string> got = gradient_disagreements(
      s.table, edited([&](FlatTensors& g) { add_noise(g, kernel, 0.1 * size, 1); }), *s.fp64.grads);
  ASSERT_EQ(got.size(), 1u) << joined(got);
  EXPECT_EQ(got[0].rfind(kernel + ": cosine", 0), 0u) << got[0];
  EXPECT_EQ(joined(gradient_disagreements(
                s.table, edited([&](FlatTensors& g) { add_noise(g, kernel, 0.01 * size, 2); }), *s.fp64.grads)),
            "");
  // A small tensor's gradient with the wrong sign.
  const std::string nsp = "cls/seq_relationship/output_bias";
  got = gradient_disagreements(s.table, edited([&](FlatTensors& g) {
                                 for (size_t i = 0; i < 2; ++i) g.get(nsp)[i] = -g.get(nsp)[i];
                               }),
                               *s.fp64.grads);
  ASSERT_EQ(got.size(), 1u) << joined(got);
  EXPECT_EQ(got[0].rfind(nsp + ": cosine", 0), 0u) << got[0];
  // A NaN anywhere.
  got = gradient_disagreements(
      s.table, edited([&](FlatTensors& g) { g.get("bert/pooler/dense/bias")[3] = std::nanf(""); }), *s.fp64.grads);
  ASSERT_EQ(got.size(), 1u) << joined(got);
}

TEST(GradientAgreement, HoldsNegligibleGradientsToAnAbsoluteBound) {
  const Steps& s = steps();
  const double whole = whole_norm(*s.fp64.grads);
  // Noise of bf16 size in the key bias (2e-6 of the whole) passes; a key-bias gradient of 1e-4 of the whole (what
  // a backward that lost softmax's shift invariance would leave) does not.
  EXPECT_EQ(joined(gradient_disagreements(
                s.table, edited([&](FlatTensors& g) { add_noise(g, kKeyBias, 2e-6 * whole, 3); }), *s.fp64.grads)),
            "");
  std::vector<std::string> got = gradient_disagreements(
      s.table, edited([&](FlatTensors& g) { add_noise(g, kKeyBias, 1e-4 * whole, 4); }), *s.fp64.grads);
  ASSERT_EQ(got.size(), 1u) << joined(got);
  EXPECT_EQ(got[0].rfind(std::string(kKeyBias) + ": a gradient negligible", 0), 0u) << got[0];
  // The query bias is under the cosine threshold too: a lost gradient (zero) is caught, bf16-size noise is not.
  got = gradient_disagreements(s.table, edited([&](FlatTensors& g) {
                                 const TensorInfo& t = g.table().at(kQueryBias);
                                 std::fill(g.get(t), g.get(t) + t.numel, 0.0f);
                               }),
                               *s.fp64.grads);
  ASSERT_EQ(got.size(), 1u) << joined(got);
  EXPECT_EQ(got[0].rfind(std::string(kQueryBias) + ":", 0), 0u) << got[0];
  EXPECT_EQ(joined(gradient_disagreements(
                s.table, edited([&](FlatTensors& g) { add_noise(g, kQueryBias, 2e-6 * whole, 5); }), *s.fp64.grads)),
            "");
}

}  // namespace
}  // namespace bertperf
