// Tests of LAMB, global-norm clipping, gradient accumulation and the LR schedule (optim/, and the optimizer ops of
// the CPU backend they run on) against the formulas of bert-reference.md sections 4.1-4.3, re-derived here in
// double precision: the oracle below shares no code with the implementation (it even decides the exclusions with
// its own regex, as the reference does).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <regex>

#include "optim/lamb.h"
#include "optim/lr_schedule.h"
#include "registry/registry.h"

namespace bertperf {
namespace {

// ---- the double-precision oracle ----------------------------------------------------------------

struct RefTensor {
  std::string name;
  std::vector<double> w, m, v;
};

// One reference LAMB update at 1-based step t.
void reference_lamb_step(std::vector<RefTensor>& tensors, const std::vector<std::vector<double>>& grads,
                         const LambHyperparams& hp, int t, double lr) {
  const std::regex excluded_pattern("LayerNorm|layer_norm|bias");
  for (size_t k = 0; k < tensors.size(); ++k) {
    RefTensor& x = tensors[k];
    const bool excluded = std::regex_search(x.name, excluded_pattern);
    std::vector<double> u(x.w.size());
    double w_norm = 0, u_norm = 0;
    for (size_t i = 0; i < x.w.size(); ++i) {
      const double g = grads[k][i];
      x.m[i] = hp.beta1 * x.m[i] + (1 - hp.beta1) * g;
      x.v[i] = hp.beta2 * x.v[i] + (1 - hp.beta2) * g * g;
      const double m_hat = x.m[i] / (1 - std::pow(hp.beta1, t));
      const double v_hat = x.v[i] / (1 - std::pow(hp.beta2, t));
      u[i] = m_hat / (std::sqrt(v_hat) + hp.epsilon);
      if (!excluded) u[i] += hp.weight_decay * x.w[i];
      w_norm += x.w[i] * x.w[i];
      u_norm += u[i] * u[i];
    }
    w_norm = std::sqrt(w_norm);
    u_norm = std::sqrt(u_norm);
    double ratio = 1;
    if (!excluded && w_norm > 0 && u_norm > 0) ratio = w_norm / u_norm;
    for (size_t i = 0; i < x.w.size(); ++i) x.w[i] -= ratio * lr * u[i];
  }
}

// ---- helpers ------------------------------------------------------------------------------------

struct Fixture {
  TensorTable table;
  std::vector<RefTensor> ref;

  // The table carries LAMB's exclusions; mark them with the model's rule (model/bert_params.h's lamb_excluded is the
  // code under test elsewhere; here the oracle's own regex decides both sides, and the oracle checks the effect).
  void add(const std::string& name, std::vector<int64_t> shape) {
    table.add(name, std::move(shape), std::regex_search(name, std::regex("LayerNorm|layer_norm|bias")));
  }

  // Fills the parameters from `init` (per tensor) and mirrors them into the oracle.
  void load(FlatTensors& params, const std::vector<std::vector<double>>& init) {
    ref.clear();
    for (size_t k = 0; k < table.size(); ++k) {
      float* p = params.get(table[k]);
      RefTensor r{table[k].name, {}, std::vector<double>(table[k].numel, 0.0), std::vector<double>(table[k].numel, 0.0)};
      for (size_t i = 0; i < table[k].numel; ++i) {
        p[i] = static_cast<float>(init[k][i]);
        r.w.push_back(p[i]);  // the oracle starts from the exact fp32 values
      }
      ref.push_back(std::move(r));
    }
  }
};

std::vector<std::vector<double>> random_values(const TensorTable& table, std::mt19937_64& rng, double scale) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<std::vector<double>> out;
  for (size_t k = 0; k < table.size(); ++k) {
    std::vector<double> x(table[k].numel);
    for (double& e : x) e = static_cast<float>(normal(rng));  // representable in fp32
    out.push_back(std::move(x));
  }
  return out;
}

void store(FlatTensors& flat, const std::vector<std::vector<double>>& values) {
  for (size_t k = 0; k < flat.table().size(); ++k)
    for (size_t i = 0; i < flat.table()[k].numel; ++i) flat.get(flat.table()[k])[i] = static_cast<float>(values[k][i]);
}

// Compares our parameters with the oracle's. The tolerance is relative to the size of the
// oracle's total update plus a few fp32 ulps of the weight, so a near-cancelling update is judged
// by its own accuracy and a wrong formula (ratio, decay, bias correction: all >= 1% effects) fails.
void expect_params_match(const FlatTensors& params, const std::vector<RefTensor>& ref,
                         const std::vector<std::vector<double>>& ref_start, double rel_tol) {
  for (size_t k = 0; k < ref.size(); ++k) {
    const float* p = params.get(params.table()[k]);
    for (size_t i = 0; i < ref[k].w.size(); ++i) {
      const double moved = std::fabs(ref[k].w[i] - ref_start[k][i]);
      const double ulps = 4 * 1.2e-7 * std::max(std::fabs(ref[k].w[i]), std::fabs(ref_start[k][i]));
      ASSERT_NEAR(p[i], ref[k].w[i], rel_tol * moved + ulps) << ref[k].name << "[" << i << "]";
    }
  }
}

std::vector<std::vector<double>> weights_of(const std::vector<RefTensor>& ref) {
  std::vector<std::vector<double>> out;
  for (const auto& r : ref) out.push_back(r.w);
  return out;
}

LambHyperparams typical_hp() {
  LambHyperparams hp;
  hp.learning_rate = 2e-3;
  hp.beta1 = 0.66;
  hp.beta2 = 0.996;
  hp.epsilon = 1e-6;
  hp.weight_decay = 0.01;
  hp.train_steps = 100;
  return hp;
}

// LAMB on a CPU backend over host-side FlatTensors: uploads, one update with a given learning rate, downloads.
struct LambRunner {
  const TensorTable& table;
  std::unique_ptr<Backend> backend;
  DeviceBuffer params, grads, scalars;
  Lamb lamb;
  int64_t updates = 0;

  LambRunner(const TensorTable& t, const LambHyperparams& hp, int threads = 0)
      : table(t),
        backend(make_backend(backend_spec("cpu", {cat("threads=", threads)}))),
        params(*backend, t.total_elements() * sizeof(float)),
        grads(*backend, t.total_elements() * sizeof(float)),
        scalars(*backend, sizeof(ops::StepScalars)),
        lamb(*backend, t, hp) {}

  // One update of `w` by `g` with learning rate lr (the schedule's otherwise).
  void step(FlatTensors& w, const FlatTensors& g, double lr) {
    backend->upload(params.data(), w.data(), w.size() * sizeof(float));
    backend->upload(grads.data(), g.data(), g.size() * sizeof(float));
    ops::StepScalars s;
    lamb.fill_scalars(s, updates);
    s.learning_rate = static_cast<float>(lr);
    backend->upload(scalars.data(), &s, sizeof s);
    lamb.update(params.data(), nullptr, grads.data(), nullptr, scalars.as<ops::StepScalars>(), lamb.chunks().all());
    backend->download(w.data(), params.data(), w.size() * sizeof(float));
    backend->synchronize();
    ++updates;
  }
  FlatTensors moment(bool second) const {
    FlatTensors out(table);
    backend->download(out.data(), second ? lamb.v() : lamb.m(), out.size() * sizeof(float));
    backend->synchronize();
    return out;
  }
};

// ---- LAMB ---------------------------------------------------------------------------------------

TEST(Lamb, MatchesReferenceForEveryExclusionClassOverSeveralSteps) {
  Fixture f;
  f.add("bert/encoder/layer_0/attention/self/query/kernel", {3, 5});  // decay + trust ratio
  f.add("bert/encoder/layer_0/attention/self/query/bias", {5});       // excluded: bias
  f.add("bert/embeddings/LayerNorm/gamma", {5});                      // excluded: LayerNorm
  f.add("encoder/layer_norm/scale", {4});                             // excluded: layer_norm
  f.add("cls/seq_relationship/output_weights", {2, 5});               // decay + trust ratio
  f.add("cls/predictions/output_bias", {7});                          // excluded: bias
  f.add("bert/embeddings/word_embeddings", {700, 100});               // spans several work chunks
  const LambHyperparams hp = typical_hp();
  std::mt19937_64 rng(1234);
  FlatTensors params(f.table), grads(f.table);
  f.load(params, random_values(f.table, rng, 0.5));
  const auto start = weights_of(f.ref);
  LambRunner lamb(f.table, hp);
  const double lrs[] = {1e-3, 2e-3, 5e-4};
  for (int t = 1; t <= 3; ++t) {
    const auto g = random_values(f.table, rng, 0.1 * t);
    store(grads, g);
    lamb.step(params, grads, lrs[t - 1]);
    reference_lamb_step(f.ref, g, hp, t, lrs[t - 1]);
    expect_params_match(params, f.ref, start, 1e-4);
  }
  // The moments too, against the oracle's.
  const FlatTensors m = lamb.moment(false), v = lamb.moment(true);
  for (size_t k = 0; k < f.ref.size(); ++k)
    for (size_t i = 0; i < f.ref[k].m.size(); i += 97) {
      EXPECT_NEAR(m.get(f.table[k])[i], f.ref[k].m[i], 1e-6 * (1 + std::fabs(f.ref[k].m[i])));
      EXPECT_NEAR(v.get(f.table[k])[i], f.ref[k].v[i], 1e-6 * (1 + std::fabs(f.ref[k].v[i])));
    }
}

TEST(Lamb, ExcludedTensorTakesPlainAdamStepWithoutDecay) {
  // Direct check of the exclusion semantics, independent of the oracle: for an excluded tensor the
  // first bias-corrected Adam step is m_hat / (sqrt(v_hat) + eps) = g / (|g| + eps) per element,
  // so every element moves by lr * sign(g) (almost exactly), whatever the weight.
  TensorTable table;
  table.add("bert/pooler/dense/bias", {3}, /*lamb_excluded=*/true);
  FlatTensors params(table), grads(table);
  const float w0[] = {10.0f, -3.0f, 0.5f}, g[] = {0.2f, -4.0f, 1e-3f};
  std::copy(w0, w0 + 3, params.get(table[0]));
  std::copy(g, g + 3, grads.get(table[0]));
  LambRunner lamb(table, typical_hp());
  lamb.step(params, grads, 0.1);
  for (int i = 0; i < 3; ++i) {
    const double expected = w0[i] - 0.1 * g[i] / (std::fabs(g[i]) + 1e-6);
    EXPECT_NEAR(params.get(table[0])[i], expected, 1e-5) << i;
  }
}

TEST(Lamb, ZeroNormWeightUsesRatioOne) {
  Fixture f;
  f.add("a/kernel", {6});
  LambHyperparams hp = typical_hp();
  FlatTensors params(f.table), grads(f.table);
  f.load(params, {std::vector<double>(6, 0.0)});
  std::mt19937_64 rng(7);
  const auto g = random_values(f.table, rng, 1.0);
  store(grads, g);
  LambRunner lamb(f.table, hp);
  lamb.step(params, grads, 0.01);
  reference_lamb_step(f.ref, g, hp, 1, 0.01);
  expect_params_match(params, f.ref, {std::vector<double>(6, 0.0)}, 1e-4);
  // Ratio 1, not 0: the zero weight moved by the full lr * u.
  double moved = 0;
  for (int i = 0; i < 6; ++i) moved += std::fabs(params.get(f.table[0])[i]);
  EXPECT_GT(moved, 6 * 0.01 * 0.5);
}

TEST(Lamb, ZeroNormUpdateLeavesWeightFinite) {
  // No gradient and no weight decay: u = 0 while |w| > 0; |w| / |u| must not be taken.
  TensorTable table;
  table.add("a/kernel", {4});
  table.add("b/kernel", {2});
  LambHyperparams hp = typical_hp();
  hp.weight_decay = 0;
  FlatTensors params(table), grads(table);
  const float w0[] = {1.0f, -2.0f, 3.0f, 0.25f};
  std::copy(w0, w0 + 4, params.get(table[0]));
  grads.get(table[1])[0] = 1.0f;  // the other tensor trains normally
  params.get(table[1])[0] = 1.0f;
  LambRunner lamb(table, hp);
  lamb.step(params, grads, 0.5);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(params.get(table[0])[i], w0[i]);
  EXPECT_TRUE(std::isfinite(params.get(table[1])[0]));
  EXPECT_LT(params.get(table[1])[0], 1.0f);
}

TEST(Lamb, FirstWarmupStepHasZeroRateButMovesMoments) {
  Fixture f;
  f.add("bert/encoder/layer_0/output/dense/kernel", {4, 3});
  f.add("bert/encoder/layer_0/output/dense/bias", {3});
  LambHyperparams hp = typical_hp();
  hp.warmup_steps = 10;
  hp.start_warmup_step = 0;
  std::mt19937_64 rng(99);
  FlatTensors params(f.table), grads(f.table);
  f.load(params, random_values(f.table, rng, 1.0));
  const auto start = weights_of(f.ref);
  LambRunner lamb(f.table, hp);
  const double lr0 = learning_rate(hp, lamb.updates);
  EXPECT_EQ(lr0, 0.0);
  const auto g1 = random_values(f.table, rng, 0.3);
  store(grads, g1);
  lamb.step(params, grads, lr0);
  reference_lamb_step(f.ref, g1, hp, 1, lr0);
  const FlatTensors m = lamb.moment(false), v = lamb.moment(true);
  for (size_t k = 0; k < f.table.size(); ++k)
    for (size_t i = 0; i < f.table[k].numel; ++i) {
      EXPECT_EQ(params.get(f.table[k])[i], static_cast<float>(f.ref[k].w[i])) << "lr 0 moved a weight";
      EXPECT_NEAR(m.get(f.table[k])[i], (1 - hp.beta1) * g1[k][i], 1e-7);
      EXPECT_NEAR(v.get(f.table[k])[i], (1 - hp.beta2) * g1[k][i] * g1[k][i], 1e-9);
    }
  // The second step sees t = 2 bias correction and the moments of the first.
  const double lr1 = learning_rate(hp, lamb.updates);
  EXPECT_DOUBLE_EQ(lr1, hp.learning_rate / 10);
  const auto g2 = random_values(f.table, rng, 0.3);
  store(grads, g2);
  lamb.step(params, grads, lr1);
  reference_lamb_step(f.ref, g2, hp, 2, lr1);
  expect_params_match(params, f.ref, start, 1e-4);
}

TEST(Lamb, ResultsDoNotDependOnThreadCount) {
  TensorTable table;
  table.add("bert/embeddings/word_embeddings", {1000, 97});
  table.add("bert/embeddings/LayerNorm/beta", {97}, /*lamb_excluded=*/true);
  std::mt19937_64 rng(5);
  const auto w = random_values(table, rng, 1.0), g = random_values(table, rng, 0.01);
  auto run = [&](int threads) {
    auto params = std::make_unique<FlatTensors>(table);
    FlatTensors grads(table);
    store(*params, w);
    store(grads, g);
    LambRunner lamb(table, typical_hp(), threads);
    lamb.step(*params, grads, 1e-3);
    lamb.step(*params, grads, 1e-3);
    return params;
  };
  const auto one = run(1), two = run(2);
  EXPECT_EQ(std::memcmp(one->data(), two->data(), one->size() * sizeof(float)), 0);
}

// ---- clipping and accumulation ------------------------------------------------------------------

// The clip and accumulate ops on a CPU backend, over a host FlatTensors.
struct OptimOps {
  const TensorTable& table;
  std::unique_ptr<Backend> backend = make_backend(backend_spec("cpu"));
  FlatChunks chunks{*backend, table};
  DeviceBuffer scalars{*backend, sizeof(ops::StepScalars)};
  ops::StepScalars* s = scalars.as<ops::StepScalars>();  // CPU memory: readable in place

  explicit OptimOps(const TensorTable& t) : table(t) {}
  void clip(const FlatTensors& g, float max_norm) {
    s->max_grad_norm = max_norm;
    backend->gradient_clip({.scalars = s, .partial = nullptr, .grads = g.data(), .chunks = chunks.all()});
  }
};

TEST(Clip, ScalesToMaxNormOnlyAboveItAndIgnoresPadding) {
  TensorTable table;
  table.add("a", {1});  // followed by 63 floats of padding
  table.add("b", {1});
  FlatTensors g(table);
  g.get(table[0])[0] = 3;
  g.get(table[1])[0] = 4;
  g.data()[1] = 100;  // padding: must not count
  OptimOps op(table);
  op.clip(g, 1.0f);
  EXPECT_DOUBLE_EQ(std::sqrt(op.s->grad_norm_sq), 5.0);
  EXPECT_FLOAT_EQ(g.get(table[0])[0] * op.s->clip_scale, 0.6f);
  EXPECT_FLOAT_EQ(g.get(table[1])[0] * op.s->clip_scale, 0.8f);
  // Below the threshold: a factor of 1 (it is 1 / max(norm, max_norm), never above 1).
  op.clip(g, 6.0f);
  EXPECT_EQ(op.s->clip_scale, 1.0f);
  EXPECT_EQ(op.s->nonfinite, 0);
  // A non-finite norm is counted and nothing is scaled.
  g.get(table[1])[0] = std::numeric_limits<float>::infinity();
  op.clip(g, 1.0f);
  EXPECT_FALSE(std::isfinite(op.s->grad_norm_sq));
  EXPECT_EQ(op.s->nonfinite, 1);
  EXPECT_EQ(op.s->clip_scale, 1.0f);
}

TEST(GradAccumulation, ClipsEachMicroBatchThenAveragesByN) {
  TensorTable table;
  table.add("x", {2});
  OptimOps op(table);
  FlatTensors micro(table), sum(table);
  auto add = [&] {
    op.clip(micro, 1.0f);
    op.backend->gradient_accumulate({.sum = sum.data(), .grads = micro.data(), .scalars = op.s,
                                     .chunks = op.chunks.all(), .scale = 0.5f});
    return std::sqrt(op.s->grad_norm_sq);
  };
  micro.get(table[0])[0] = 3;  // norm 5: clipped to (0.6, 0.8)
  micro.get(table[0])[1] = 4;
  EXPECT_DOUBLE_EQ(add(), 5.0);
  micro.get(table[0])[0] = 0.3f;  // norm 0.5: kept
  micro.get(table[0])[1] = -0.4f;
  EXPECT_NEAR(add(), 0.5, 1e-7);
  // (0.6 + 0.3) / 2 and (0.8 - 0.4) / 2. Clipping the sum instead would give (0.9, 0.4) / |.|.
  EXPECT_NEAR(sum.get(table[0])[0], 0.45, 1e-7);
  EXPECT_NEAR(sum.get(table[0])[1], 0.2, 1e-7);
  // A micro-batch with a non-finite norm adds nothing.
  micro.get(table[0])[0] = std::nanf("");
  add();
  EXPECT_NEAR(sum.get(table[0])[0], 0.45, 1e-7);
  EXPECT_EQ(op.s->nonfinite, 1);
}

// ---- the learning-rate schedule -----------------------------------------------------------------

// What the step's first op leaves in the scalars on the device (Lamb::schedule) is the host's schedule, exactly, for
// the optimizer's own hyperparameters, through warmup, the boundary, the decay and its end.
TEST(Schedule, DeviceScheduleOfTheOptimizerEqualsTheHostsExactly) {
  Fixture f;
  f.add("bert/encoder/layer_0/output/dense/kernel", {4, 3});
  LambHyperparams hp = typical_hp();
  hp.warmup_steps = 30;
  hp.start_warmup_step = -7;
  hp.poly_power = 0.5;
  LambRunner lamb(f.table, hp);
  auto* device = lamb.scalars.as<ops::StepScalars>();
  for (int64_t updates : {0, 1, 22, 23, 24, 60, 99, 100, 130}) {
    ops::StepScalars want;
    lamb.lamb.fill_scalars(want, updates);
    ops::StepScalars start;  // only the count: the rest is the op's to write
    start.updates = updates;
    start.learning_rate = start.inv_bias_correction1 = start.inv_bias_correction2 = -1;
    lamb.backend->upload(device, &start, sizeof start);
    lamb.lamb.schedule(device, 4, 1);
    ops::StepScalars got;
    lamb.backend->download(&got, device, sizeof got);
    lamb.backend->synchronize();
    EXPECT_EQ(got.learning_rate, static_cast<float>(learning_rate(hp, updates))) << updates;
    EXPECT_EQ(got.learning_rate, want.learning_rate) << updates;
    EXPECT_EQ(got.inv_bias_correction1, want.inv_bias_correction1) << updates;
    EXPECT_EQ(got.inv_bias_correction2, want.inv_bias_correction2) << updates;
    EXPECT_EQ(got.dropout.step, static_cast<uint32_t>(updates * 4 + 1)) << updates;
  }
}

TEST(Schedule, WarmupFromZeroThenLinearDecay) {
  LambHyperparams hp;
  hp.learning_rate = 2e-3;
  hp.train_steps = 100;
  hp.warmup_steps = 10;
  hp.start_warmup_step = 0;
  EXPECT_EQ(learning_rate(hp, 0), 0.0);
  EXPECT_NEAR(learning_rate(hp, 4), 8e-4, 1e-15);
  EXPECT_NEAR(learning_rate(hp, 9), 1.8e-3, 1e-15);
  EXPECT_NEAR(learning_rate(hp, 10), 2e-3 * (1 - 10.0 / 100), 1e-15);  // first decayed step
  EXPECT_NEAR(learning_rate(hp, 55), 9e-4, 1e-15);
  EXPECT_EQ(learning_rate(hp, 100), 0.0);
  EXPECT_EQ(learning_rate(hp, 150), 0.0);  // after T: held at the end rate, never negative
}

TEST(Schedule, NegativeStartWarmupJumpsAtTheBoundary) {
  // The published GBS-8192 reference point: lr 0.00288293, T 600, warmup 287, start -76.
  LambHyperparams hp;
  hp.learning_rate = 0.00288293;
  hp.train_steps = 600;
  hp.warmup_steps = 287;
  hp.start_warmup_step = -76;
  EXPECT_NEAR(learning_rate(hp, 0), 0.00288293 * 76 / 287, 1e-15);
  EXPECT_NEAR(learning_rate(hp, 210), 0.00288293 * 286 / 287, 1e-15);  // last warmup step
  // First decayed step: the decay is taken at the step itself (211), not at step - start (287).
  EXPECT_NEAR(learning_rate(hp, 211), 0.00288293 * (1 - 211.0 / 600), 1e-15);
  EXPECT_NEAR(learning_rate(hp, 599), 0.00288293 / 600, 1e-15);
  EXPECT_EQ(learning_rate(hp, 600), 0.0);
}

TEST(Schedule, NoWarmupAndPolyPower) {
  LambHyperparams hp;
  hp.learning_rate = 2e-3;
  hp.train_steps = 100;
  hp.warmup_steps = 0;
  hp.start_warmup_step = -50;  // ignored without warmup
  EXPECT_EQ(learning_rate(hp, 0), 2e-3);
  hp.poly_power = 2.0;
  EXPECT_NEAR(learning_rate(hp, 25), 2e-3 * 0.75 * 0.75, 1e-15);
}

}  // namespace
}  // namespace bertperf
