// Tests of the CPU op vocabulary (backends/cpu/cpu_ops.h over backends/ops.h) and of the shared element math
// (backends/kernel_math.h).
//
// Independent oracles:
//  - every backward against central finite differences of its own forward, in fp64, for a scalar loss
//    sum(w * outputs) with random w; parameter gradients start non-zero so accumulation (+=) is checked, activation
//    gradients start as NaN so overwriting (=) is checked;
//  - every forward against a direct naive formula written here (triple loops, the textbook formulas), and the
//    optimizer ops against the reference's LAMB and clip formulas;
//  - the fp32 instantiation against the fp64 one on the same inputs, and results against the thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_math.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/kernel_math.h"
#include "backends/ops.h"
#include "core/errors.h"
#include "core/philox.h"
#include "flat_problem.h"

namespace bertperf {
namespace {

using ops::Activation;
using ops::WeightLayout;
using Vec = std::vector<double>;
using Ids = std::vector<int32_t>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const ops::DropoutCounter kCounter{0x1234567890abcdefULL, 5, 0};
constexpr uint32_t kStepOffset = 2, kSite = 3;
// Partial sums handed to the ops that take them (more than any case here needs: cpu::scratch_doubles).
constexpr size_t kScratchDoubles = 1 << 14;
constexpr RngKey kKey{0x1234567890abcdefULL, 7, 3};  // the key kCounter, kStepOffset and kSite give

ops::Dropout dropout_of(float p) { return {p, &kCounter, kStepOffset, kSite}; }

Vec random_vec(size_t n, std::mt19937_64& rng, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

Ids random_ids(size_t n, int32_t bound, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> dist(0, bound - 1);
  Ids v(n);
  for (int32_t& x : v) x = dist(rng);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

Vec minus(const Vec& a, const Vec& b) {
  Vec d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

std::vector<float> to_float(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

// One input of a gradient check: its values (perturbed in place) and the analytic gradient.
struct GradCheck {
  std::string name;
  Vec* value;
  Vec analytic;
};

// Central differences of loss() with respect to every element of every input. A NaN analytic value (an output
// the backward did not write) fails.
void expect_gradients_match(const std::function<double()>& loss, std::vector<GradCheck> checks,
                            double tolerance = 1e-6) {
  const double h = 1e-6;
  for (GradCheck& check : checks) {
    ASSERT_EQ(check.value->size(), check.analytic.size()) << check.name;
    int failures = 0;
    for (size_t i = 0; i < check.value->size(); ++i) {
      double& x = (*check.value)[i];
      const double saved = x;
      x = saved + h;
      const double up = loss();
      x = saved - h;
      const double down = loss();
      x = saved;
      const double numeric = (up - down) / (2 * h);
      const double err = std::fabs(numeric - check.analytic[i]);
      if (!(err <= tolerance * std::max(1.0, std::fabs(numeric))) && failures++ < 5) {
        ADD_FAILURE() << check.name << "[" << i << "]: analytic " << check.analytic[i] << ", numeric "
                      << numeric;
      }
    }
  }
  loss();  // leave the forward outputs of the unperturbed inputs behind
}

// Fills a parameter-gradient buffer with random values; the backward must add to them.
Vec prefilled(size_t n, std::mt19937_64& rng) { return random_vec(n, rng, -0.5, 0.5); }
// An activation-gradient buffer: the backward must overwrite every element.
Vec poisoned(size_t n) { return Vec(n, kNaN); }

void expect_near_all(const Vec& got, const Vec& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= tol * std::max(1.0, std::fabs(want[i]))) && failures++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
  }
}

// ---- naive oracles ---------------------------------------------------------------------------------

// out = inp . W (+ bias), W as stored by `layout`.
Vec naive_linear(const Vec& inp, const double* w, const double* bias, int N, int I, int O, WeightLayout layout) {
  Vec out(static_cast<size_t>(N) * O);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < O; ++o) {
      double s = bias ? bias[o] : 0.0;
      for (int i = 0; i < I; ++i)
        s += inp[n * I + i] * (layout == WeightLayout::IN_OUT ? w[i * O + o] : w[o * I + i]);
      out[n * O + o] = s;
    }
  return out;
}

double naive_gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

// LayerNorm of rows of C with the biased variance.
Vec naive_layernorm(const Vec& x, const Vec& gamma, const Vec& beta, int N, int C, Vec* mean = nullptr,
                    Vec* rstd = nullptr) {
  Vec out(x.size());
  for (int n = 0; n < N; ++n) {
    double mu = 0, var = 0;
    for (int c = 0; c < C; ++c) mu += x[n * C + c] / C;
    for (int c = 0; c < C; ++c) var += (x[n * C + c] - mu) * (x[n * C + c] - mu) / C;
    for (int c = 0; c < C; ++c) out[n * C + c] = (x[n * C + c] - mu) / std::sqrt(var + 1e-12) * gamma[c] + beta[c];
    if (mean) (*mean)[n] = mu;
    if (rstd) (*rstd)[n] = 1.0 / std::sqrt(var + 1e-12);
  }
  return out;
}

double keep_multiplier(uint64_t element, float p) {
  return p > 0 ? (dropout_keep(kKey, element, p) ? 1.0 / (1.0 - p) : 0.0) : 1.0;
}

// A variable-length layout: cumulative offsets of sequences of the given lengths.
Ids cu_seqlens_of(const std::vector<int>& lens) {
  Ids cu = {0};
  for (int len : lens) cu.push_back(cu.back() + len);
  return cu;
}

// Attention straight from ops.h: ctx (N, H) of the packed qkv (N, 3H), and the probabilities before dropout of
// every (sequence, head) as [s][h][i][j]. The dropout element of (s, h, i, j) is ((s * heads + h) * S + i) * S + j
// with S = max_seqlen, which for one sequence per row of a padded (B, S) batch is the flat index into the old
// (B, heads, S, S) probabilities.
void naive_attention(Vec& ctx, std::vector<Vec>& probs, const Vec& qkv, const Ids& cu, int N, int S, int heads,
                     int D, float p) {
  const int H = heads * D, sequences = static_cast<int>(cu.size()) - 1;
  ctx.assign(static_cast<size_t>(N) * H, 0.0);
  probs.clear();
  for (int s = 0; s < sequences; ++s)
    for (int h = 0; h < heads; ++h) {
      const int first = cu[s], L = cu[s + 1] - cu[s];
      Vec P(static_cast<size_t>(L) * L);
      for (int i = 0; i < L; ++i) {
        std::vector<double> score(L);
        for (int j = 0; j < L; ++j) {
          double dotp = 0;
          for (int d = 0; d < D; ++d)
            dotp += qkv[(first + i) * 3 * H + h * D + d] * qkv[(first + j) * 3 * H + H + h * D + d];
          score[j] = dotp / std::sqrt(double(D));
        }
        double mx = score.empty() ? 0 : score[0], sum = 0;
        for (double x : score) mx = std::max(mx, x);
        for (double& x : score) sum += (x = std::exp(x - mx));
        for (int j = 0; j < L; ++j) {
          P[i * L + j] = score[j] / sum;
          const uint64_t element = ((static_cast<uint64_t>(s) * heads + h) * S + i) * S + j;
          const double kept = P[i * L + j] * keep_multiplier(element, p);
          for (int d = 0; d < D; ++d) ctx[(first + i) * H + h * D + d] += kept * qkv[(first + j) * 3 * H + 2 * H + h * D + d];
        }
      }
      probs.push_back(P);
    }
}

// ---- GEMM ---------------------------------------------------------------------------------------

// Products large enough that gemm splits C over threads, by rows (M >= N) and by columns (N > M),
// for every transpose combination, against the textbook sum.
TEST(Gemm, SplitProductsMatchNaiveForEveryTransposeAndShape) {
  std::mt19937_64 rng(19);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(3);  // uneven blocks
  struct Shape {
    int M, N, K;
  };
  for (Shape sh : {Shape{301, 47, 211}, Shape{45, 333, 190}}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        SCOPED_TRACE(testing::Message() << sh.M << "x" << sh.N << "x" << sh.K << " ta " << ta << " tb " << tb);
        const int M = sh.M, N = sh.N, K = sh.K;
        // Leading dimensions wider than the matrices, as attention uses them.
        const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
        const Vec a = random_vec(static_cast<size_t>(ta ? K : M) * lda, rng),
                  b = random_vec(static_cast<size_t>(tb ? N : K) * ldb, rng);
        Vec c = random_vec(static_cast<size_t>(M) * ldc, rng);
        const Vec c0 = c;
        cpu::gemm<double>(ta, tb, M, N, K, 0.5, a.data(), lda, b.data(), ldb, 2.0, c.data(), ldc);
        const std::vector<float> af = to_float(a), bf = to_float(b);
        std::vector<float> cf = to_float(c0);
        cpu::gemm<float>(ta, tb, M, N, K, 0.5f, af.data(), lda, bf.data(), ldb, 2.0f, cf.data(), ldc);
        int failures = 0;
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < ldc; ++j) {
            double want = c0[i * ldc + j];  // padding columns must stay untouched
            if (j < N) {
              double s = 0;
              for (int k = 0; k < K; ++k) s += (ta ? a[k * lda + i] : a[i * lda + k]) * (tb ? b[j * ldb + k] : b[k * ldb + j]);
              want = 0.5 * s + 2.0 * c0[i * ldc + j];
            }
            if ((std::fabs(c[i * ldc + j] - want) > 1e-12 || std::fabs(cf[i * ldc + j] - want) > 1e-4) &&
                failures++ < 5)
              ADD_FAILURE() << "C[" << i << "," << j << "]: double " << c[i * ldc + j] << ", float "
                            << cf[i * ldc + j] << ", want " << want;
          }
      }
  }
  omp_set_num_threads(saved);
}

// ---- linear ------------------------------------------------------------------------------------------

// A linear problem: G groups of (I, O) weights at a stride, writing columns [g*O, g*O + O) of rows of ldo.
struct LinearCase {
  const char* name;
  int N, I, O, groups, ldo;
  WeightLayout layout;
  Activation act;
};

std::vector<LinearCase> linear_cases() {
  return {
      {"plain in-out", 7, 5, 9, 1, 9, WeightLayout::IN_OUT, Activation::NONE},
      {"plain out-in", 6, 5, 7, 1, 7, WeightLayout::OUT_IN, Activation::NONE},
      {"grouped (fused QKV)", 5, 4, 3, 3, 9, WeightLayout::IN_OUT, Activation::NONE},
      {"grouped, wide rows", 4, 3, 2, 2, 6, WeightLayout::OUT_IN, Activation::NONE},
      {"gelu", 6, 5, 8, 1, 8, WeightLayout::IN_OUT, Activation::GELU},
      {"gelu, wide rows", 5, 4, 3, 1, 5, WeightLayout::IN_OUT, Activation::GELU},
      {"tanh", 6, 5, 4, 1, 4, WeightLayout::IN_OUT, Activation::TANH},
  };
}

// The naive forward of a case: (N, ldo) with untouched columns left at `fill`.
Vec naive_linear_case(const LinearCase& c, const Vec& x, const Vec& w, const Vec& b, size_t ws, size_t bs,
                      Vec* pre, double fill) {
  Vec out(static_cast<size_t>(c.N) * c.ldo, fill);
  if (pre) pre->assign(out.size(), fill);
  for (int g = 0; g < c.groups; ++g) {
    const Vec y = naive_linear(x, w.data() + g * ws, b.data() + g * bs, c.N, c.I, c.O, c.layout);
    for (int n = 0; n < c.N; ++n)
      for (int o = 0; o < c.O; ++o) {
        const double v = y[n * c.O + o];
        const size_t at = static_cast<size_t>(n) * c.ldo + g * c.O + o;
        if (pre) (*pre)[at] = v;
        out[at] = c.act == Activation::GELU ? naive_gelu(v) : c.act == Activation::TANH ? std::tanh(v) : v;
      }
  }
  return out;
}

ops::LinearForward linear_forward_params(const LinearCase& c, double* out, double* pre, const double* x,
                                         const double* w, const double* b, size_t ws, size_t bs) {
  return {out, pre, x, w, b, c.N, c.I, c.O, c.groups, ws, bs, c.ldo, c.layout, c.act};
}

TEST(Linear, ForwardMatchesNaiveForEveryLayoutGroupingAndActivation) {
  std::mt19937_64 rng(1);
  for (const LinearCase& c : linear_cases()) {
    SCOPED_TRACE(c.name);
    for (bool with_bias : {true, false}) {
      const size_t ws = static_cast<size_t>(c.I) * c.O + 3, bs = c.O + 1;  // strides with gaps between groups
      Vec x = random_vec(c.N * c.I, rng), w = random_vec(ws * c.groups, rng), b = random_vec(bs * c.groups, rng);
      if (!with_bias) b.assign(b.size(), 0.0);
      Vec out(static_cast<size_t>(c.N) * c.ldo, 99.0), pre(out.size(), 99.0);
      cpu::linear_forward<double>(linear_forward_params(c, out.data(), c.act == Activation::GELU ? pre.data() : nullptr,
                                                        x.data(), w.data(), with_bias ? b.data() : nullptr, ws, bs));
      Vec want_pre;
      expect_near_all(out, naive_linear_case(c, x, w, b, ws, bs, &want_pre, 99.0), 1e-12, "out");
      if (c.act == Activation::GELU) expect_near_all(pre, want_pre, 1e-12, "pre");
    }
  }
}

TEST(Linear, GradientsMatchFiniteDifferencesForEveryLayoutAndGrouping) {
  std::mt19937_64 rng(2);
  for (const LinearCase& c : linear_cases()) {
    if (c.act != Activation::NONE) continue;  // activations: see FusedActivationBackward
    SCOPED_TRACE(c.name);
    for (bool accumulate : {false, true}) {
      const size_t ws = static_cast<size_t>(c.I) * c.O, bs = c.O;
      Vec x = random_vec(c.N * c.I, rng), w = random_vec(ws * c.groups, rng), b = random_vec(bs * c.groups, rng);
      // Columns outside the groups carry weight too: they must not leak into any gradient.
      Vec weights = random_vec(static_cast<size_t>(c.N) * c.ldo, rng), out(weights.size(), 0.0);
      auto loss = [&] {
        cpu::linear_forward<double>(linear_forward_params(c, out.data(), nullptr, x.data(), w.data(), b.data(), ws, bs));
        double s = 0;
        for (int n = 0; n < c.N; ++n)
          for (int o = 0; o < c.groups * c.O; ++o) s += weights[n * c.ldo + o] * out[n * c.ldo + o];
        return s;
      };
      loss();
      const Vec dx0 = accumulate ? prefilled(x.size(), rng) : poisoned(x.size()), dw0 = prefilled(w.size(), rng),
                db0 = prefilled(b.size(), rng);
      Vec dx = dx0, dw = dw0, db = db0;
      ops::LinearBackward p{dx.data(), dw.data(), db.data(), weights.data(), x.data(), w.data(), c.N, c.I, c.O,
                            c.groups, ws, bs, c.ldo, c.layout, accumulate};
      cpu::linear_backward<double>(p);
      expect_gradients_match(loss, {{"inp", &x, accumulate ? minus(dx, dx0) : dx},
                                    {"weight", &w, minus(dw, dw0)},
                                    {"bias", &b, minus(db, db0)}});
    }
  }
}

// dinp_act: the backward of the activation that produced the linear's input (GELU from its pre-activation, tanh
// from its output), fused, with the producing linear's bias gradient: checked against finite differences of the
// two-layer function x -> act(x + b0) . W.
TEST(Linear, FusedActivationBackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(22);
  const int N = 6, I = 5, O = 4;
  for (Activation act : {Activation::GELU, Activation::TANH}) {
    SCOPED_TRACE(act == Activation::GELU ? "gelu" : "tanh");
    Vec z = random_vec(N * I, rng, -2, 2), b0 = random_vec(I, rng), w = random_vec(I * O, rng);
    Vec weights = random_vec(N * O, rng), a(N * I), pre(N * I), out(N * O);
    auto forward = [&] {
      for (int n = 0; n < N; ++n)
        for (int i = 0; i < I; ++i) {
          pre[n * I + i] = z[n * I + i] + b0[i];
          a[n * I + i] = act == Activation::GELU ? naive_gelu(pre[n * I + i]) : std::tanh(pre[n * I + i]);
        }
      out = naive_linear(a, w.data(), nullptr, N, I, O, WeightLayout::IN_OUT);
    };
    auto loss = [&] {
      forward();
      return dot(weights, out);
    };
    loss();
    Vec dz = poisoned(N * I);
    const Vec db0 = prefilled(I, rng);
    Vec db = db0;
    ops::LinearBackward p{dz.data(), nullptr, nullptr, weights.data(), a.data(), w.data(), N, I, O};
    p.dinp_act = act;
    p.dinp_act_saved = act == Activation::GELU ? pre.data() : a.data();
    p.dinp_act_dbias = db.data();
    cpu::linear_backward<double>(p);
    expect_gradients_match(loss, {{"pre-activation", &z, dz}, {"producer bias", &b0, minus(db, db0)}});
  }
}

TEST(Linear, NullGradientsAreSkippedAndOthersUnchanged) {
  std::mt19937_64 rng(3);
  const int N = 4, I = 3, O = 5;
  Vec x = random_vec(N * I, rng), w = random_vec(I * O, rng), dout = random_vec(N * O, rng);
  Vec dx_all(N * I), dw_all(I * O), db_all(O);
  cpu::linear_backward<double>({dx_all.data(), dw_all.data(), db_all.data(), dout.data(), x.data(), w.data(), N, I, O});
  Vec db_only(O);
  cpu::linear_backward<double>({nullptr, nullptr, db_only.data(), dout.data(), x.data(), w.data(), N, I, O});
  EXPECT_EQ(db_only, db_all);
  Vec dx_only(N * I);
  cpu::linear_backward<double>({dx_only.data(), nullptr, nullptr, dout.data(), x.data(), w.data(), N, I, O});
  EXPECT_EQ(dx_only, dx_all);
}

// ---- embeddings and gather -------------------------------------------------------------------------

TEST(Embedding, LookupMatchesTablesAndScatterGradientsWithRepeatedIds) {
  std::mt19937_64 rng(4);
  const int N = 11, C = 6, V = 5, T = 2, P = 8;
  Ids ids = random_ids(N, V, rng), types = random_ids(N, T, rng), positions = random_ids(N, P, rng);
  ids[3] = ids[0];  // a repeated id must accumulate both rows
  ids[7] = ids[0];
  Vec word = random_vec(V * C, rng), type = random_vec(T * C, rng), pos = random_vec(P * C, rng);
  Vec weights = random_vec(N * C, rng), out(N * C);
  auto loss = [&] {
    cpu::embedding_lookup<double>(out.data(), ids.data(), types.data(), positions.data(), word.data(), type.data(),
                                  pos.data(), N, C);
    return dot(weights, out);
  };
  loss();
  for (int t = 0; t < N; ++t)
    for (int c = 0; c < C; ++c)
      EXPECT_EQ(out[t * C + c], word[ids[t] * C + c] + type[types[t] * C + c] + pos[positions[t] * C + c]);
  const Vec dw0 = prefilled(word.size(), rng), dt0 = prefilled(type.size(), rng), dp0 = prefilled(pos.size(), rng);
  Vec dw = dw0, dt = dt0, dp = dp0;
  cpu::embedding_scatter_add<double>(dw.data(), dt.data(), dp.data(), weights.data(), ids.data(), types.data(),
                                     positions.data(), N, C);
  expect_gradients_match(loss, {{"word", &word, minus(dw, dw0)},
                                {"type", &type, minus(dt, dt0)},
                                {"pos", &pos, minus(dp, dp0)}});
}

// The embedding op: LayerNorm(word + type + pos) with dropout, forward against the formulas and the backward
// (dropout, LayerNorm, scatter into three tables, gamma and beta) against finite differences.
TEST(Embedding, OpMatchesFormulaAndGradientsMatchFiniteDifferences) {
  std::mt19937_64 rng(23);
  const int N = 9, C = 7, V = 6, T = 2, P = 5;
  for (float p : {0.0f, 0.3f}) {
    SCOPED_TRACE(p);
    Ids ids = random_ids(N, V, rng), types = random_ids(N, T, rng), positions = random_ids(N, P, rng);
    ids[4] = ids[1];
    Vec word = random_vec(V * C, rng), type = random_vec(T * C, rng), pos = random_vec(P * C, rng),
        gamma = random_vec(C, rng, 0.5, 1.5), beta = random_vec(C, rng);
    Vec weights = random_vec(N * C, rng), out(N * C), sum(N * C), mean(N), rstd(N);
    auto forward = [&] {
      cpu::embedding_forward<double>({out.data(), sum.data(), mean.data(), rstd.data(), ids.data(), types.data(),
                                      positions.data(), word.data(), type.data(), pos.data(), gamma.data(),
                                      beta.data(), N, C, dropout_of(p)});
    };
    auto loss = [&] {
      forward();
      return dot(weights, out);
    };
    loss();
    Vec want_sum(N * C);
    for (int t = 0; t < N; ++t)
      for (int c = 0; c < C; ++c)
        want_sum[t * C + c] = word[ids[t] * C + c] + type[types[t] * C + c] + pos[positions[t] * C + c];
    Vec want_mean(N), want_rstd(N);
    Vec want = naive_layernorm(want_sum, gamma, beta, N, C, &want_mean, &want_rstd);
    for (size_t e = 0; e < want.size(); ++e) want[e] *= keep_multiplier(e, p);
    expect_near_all(sum, want_sum, 1e-15, "sum");
    expect_near_all(mean, want_mean, 1e-14, "mean");
    expect_near_all(rstd, want_rstd, 1e-10, "rstd");
    expect_near_all(out, want, 1e-12, "out");

    const Vec dw0 = prefilled(word.size(), rng), dt0 = prefilled(type.size(), rng), dp0 = prefilled(pos.size(), rng),
              dg0 = prefilled(C, rng), db0 = prefilled(C, rng);
    Vec dw = dw0, dt = dt0, dp = dp0, dg = dg0, db = db0, scratch = poisoned(2 * N * C);
    cpu::embedding_backward<double>({dw.data(), dt.data(), dp.data(), dg.data(), db.data(), scratch.data(),
                                     weights.data(), sum.data(), mean.data(), rstd.data(), gamma.data(), ids.data(),
                                     types.data(), positions.data(), N, C, dropout_of(p)});
    expect_gradients_match(loss, {{"word", &word, minus(dw, dw0)},
                                  {"type", &type, minus(dt, dt0)},
                                  {"pos", &pos, minus(dp, dp0)},
                                  {"gamma", &gamma, minus(dg, dg0)},
                                  {"beta", &beta, minus(db, db0)}});
  }
}

TEST(GatherRows, ForwardCopiesAndBackwardAccumulatesRepeatedRows) {
  std::mt19937_64 rng(5);
  const int R = 6, M = 9, C = 5;
  Ids rows = random_ids(M, R, rng);
  rows[4] = rows[1];
  rows[8] = rows[1];
  Vec inp = random_vec(R * C, rng), weights = random_vec(M * C, rng), out(M * C);
  auto loss = [&] {
    cpu::gather_forward<double>({out.data(), inp.data(), rows.data(), M, C});
    return dot(weights, out);
  };
  loss();
  for (int m = 0; m < M; ++m)
    for (int c = 0; c < C; ++c) EXPECT_EQ(out[m * C + c], inp[rows[m] * C + c]);
  // "=": every row written, zero where nothing was gathered; "+=": added to what is there.
  Vec d = poisoned(inp.size());
  cpu::gather_backward<double>({d.data(), weights.data(), rows.data(), M, R, C, false});
  expect_gradients_match(loss, {{"inp (overwrite)", &inp, d}});
  const Vec d0 = prefilled(inp.size(), rng);
  Vec da = d0;
  cpu::gather_backward<double>({da.data(), weights.data(), rows.data(), M, R, C, true});
  expect_gradients_match(loss, {{"inp (accumulate)", &inp, minus(da, d0)}});
}

// ---- LayerNorm ---------------------------------------------------------------------------------------

TEST(LayerNorm, ForwardMatchesFormulaWithBiasedVariance) {
  std::mt19937_64 rng(6);
  const int N = 5, C = 12;
  Vec x = random_vec(N * C, rng, -3, 5), gamma = random_vec(C, rng), beta = random_vec(C, rng);
  Vec out(N * C), mean(N), rstd(N);
  cpu::layernorm_forward<double>(out.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(), N, C);
  for (int n = 0; n < N; ++n) {
    double mu = 0, var = 0;
    for (int c = 0; c < C; ++c) mu += x[n * C + c] / C;
    for (int c = 0; c < C; ++c) var += (x[n * C + c] - mu) * (x[n * C + c] - mu) / C;  // biased
    EXPECT_NEAR(mean[n], mu, 1e-12);
    EXPECT_NEAR(rstd[n], 1.0 / std::sqrt(var + 1e-12), 1e-10);
    for (int c = 0; c < C; ++c)
      EXPECT_NEAR(out[n * C + c], (x[n * C + c] - mu) / std::sqrt(var + 1e-12) * gamma[c] + beta[c], 1e-12);
  }
}

TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  std::mt19937_64 rng(7);
  const int N = 6, C = 10;
  Vec x = random_vec(N * C, rng, -2, 2), gamma = random_vec(C, rng), beta = random_vec(C, rng);
  Vec weights = random_vec(N * C, rng), out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    cpu::layernorm_forward<double>(out.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(),
                                   N, C);
    return dot(weights, out);
  };
  loss();
  const Vec dg0 = prefilled(C, rng), db0 = prefilled(C, rng);
  Vec dx = poisoned(x.size()), dg = dg0, db = db0;
  cpu::layernorm_backward<double>(dx.data(), dg.data(), db.data(), weights.data(), x.data(), gamma.data(),
                                  mean.data(), rstd.data(), N, C);
  expect_gradients_match(loss, {{"inp", &x, dx}, {"gamma", &gamma, minus(dg, dg0)},
                                {"beta", &beta, minus(db, db0)}});
}

// The sub-layer end LayerNorm(dropout(inp + bias) + residual), and the plain LayerNorm it becomes without bias,
// residual and dropout.
TEST(ResidualLayerNorm, MatchesFormulaAndGradientsMatchFiniteDifferences) {
  std::mt19937_64 rng(24);
  const int N = 7, C = 9;
  struct Mode {
    const char* name;
    bool bias, residual;
    float p;
  };
  for (Mode m : {Mode{"bias + residual + dropout", true, true, 0.25f}, Mode{"bias + residual", true, true, 0.0f},
                 Mode{"residual + dropout", false, true, 0.3f}, Mode{"bias only", true, false, 0.0f},
                 Mode{"plain LayerNorm", false, false, 0.0f}}) {
    SCOPED_TRACE(m.name);
    Vec x = random_vec(N * C, rng, -2, 2), bias = random_vec(C, rng), res = random_vec(N * C, rng),
        gamma = random_vec(C, rng, 0.5, 1.5), beta = random_vec(C, rng);
    const bool plain = !m.bias && !m.residual && m.p == 0.0f;
    Vec weights = random_vec(N * C, rng), out(N * C), sum(N * C), mean(N), rstd(N);
    auto loss = [&] {
      cpu::residual_layernorm_forward<double>({out.data(), plain ? nullptr : sum.data(), mean.data(), rstd.data(),
                                               x.data(), m.bias ? bias.data() : nullptr,
                                               m.residual ? res.data() : nullptr, gamma.data(), beta.data(), N, C,
                                               dropout_of(m.p)});
      return dot(weights, out);
    };
    loss();
    Vec want_sum(N * C);
    for (int e = 0; e < N * C; ++e)
      want_sum[e] = (x[e] + (m.bias ? bias[e % C] : 0.0)) * keep_multiplier(e, m.p) + (m.residual ? res[e] : 0.0);
    if (!plain) expect_near_all(sum, want_sum, 1e-15, "sum");
    expect_near_all(out, naive_layernorm(want_sum, gamma, beta, N, C), 1e-12, "out");

    const Vec dbias0 = prefilled(C, rng), dg0 = prefilled(C, rng), db0 = prefilled(C, rng);
    Vec dx = poisoned(N * C), dres = poisoned(N * C), dbias = dbias0, dg = dg0, db = db0;
    cpu::residual_layernorm_backward<double>({dx.data(), plain ? nullptr : dres.data(),
                                              m.bias ? dbias.data() : nullptr, dg.data(), db.data(), weights.data(),
                                              plain ? x.data() : sum.data(), mean.data(), rstd.data(), gamma.data(),
                                              N, C, dropout_of(m.p)});
    std::vector<GradCheck> checks = {{"inp", &x, dx}, {"gamma", &gamma, minus(dg, dg0)}, {"beta", &beta, minus(db, db0)}};
    if (m.residual) checks.push_back({"residual", &res, dres});
    if (m.bias) checks.push_back({"bias", &bias, minus(dbias, dbias0)});
    expect_gradients_match(loss, checks);
  }
}

// ---- elementwise -------------------------------------------------------------------------------------

TEST(Gelu, ForwardIsTheTanhFormulaAndGradientMatches) {
  std::mt19937_64 rng(8);
  const size_t n = 200;
  Vec x = random_vec(n, rng, -6, 6), weights = random_vec(n, rng), out(n);
  auto loss = [&] {
    cpu::gelu_forward<double>(out.data(), x.data(), n);
    return dot(weights, out);
  };
  loss();
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(out[i], naive_gelu(x[i]), 1e-14);
  Vec d = poisoned(n);
  cpu::gelu_backward<double>(d.data(), x.data(), weights.data(), n);
  expect_gradients_match(loss, {{"inp", &x, d}});
  // The op form, from the saved pre-activation.
  Vec d_op = poisoned(n);
  cpu::activation_backward<double>({d_op.data(), weights.data(), x.data(), n, Activation::GELU});
  EXPECT_EQ(d_op, d);
}

TEST(Tanh, ForwardAndGradientFromOutput) {
  std::mt19937_64 rng(9);
  const size_t n = 100;
  Vec x = random_vec(n, rng, -4, 4), weights = random_vec(n, rng), out(n);
  auto loss = [&] {
    cpu::tanh_forward<double>(out.data(), x.data(), n);
    return dot(weights, out);
  };
  loss();
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(out[i], std::tanh(x[i]), 1e-15);
  Vec d = poisoned(n);
  cpu::tanh_backward<double>(d.data(), out.data(), weights.data(), n);
  expect_gradients_match(loss, {{"inp", &x, d}});
  Vec d_op = poisoned(n);
  cpu::activation_backward<double>({d_op.data(), weights.data(), out.data(), n, Activation::TANH});
  EXPECT_EQ(d_op, d);
}

TEST(FastMath, ExpAndTanhApproximationsAreAccurate) {
  // exp: relative error within 4 ulp over the range softmax uses; 0 below the fp32 normal range.
  double worst_exp = 0;
  for (double x = -87.0; x <= 88.0; x += 0.00371) {
    const double want = std::exp(static_cast<double>(static_cast<float>(x)));
    worst_exp = std::max(worst_exp, std::fabs(cpu::exp_approx(static_cast<float>(x)) - want) / want);
  }
  EXPECT_LT(worst_exp, 4 * std::numeric_limits<float>::epsilon());
  EXPECT_EQ(cpu::exp_approx(-10000.0f), 0.0f);
  EXPECT_EQ(cpu::exp_approx(0.0f), 1.0f);
  // tanh: absolute error within 2e-7 everywhere, relative within 1e-6 near zero.
  double worst_abs = 0, worst_rel_small = 0;
  for (double x = -12.0; x <= 12.0; x += 0.000713) {
    const float xf = static_cast<float>(x);
    const double want = std::tanh(static_cast<double>(xf));
    const double err = std::fabs(cpu::tanh_approx(xf) - want);
    worst_abs = std::max(worst_abs, err);
    if (std::fabs(x) < 0.5 && want != 0) worst_rel_small = std::max(worst_rel_small, err / std::fabs(want));
  }
  EXPECT_LT(worst_abs, 2e-7);
  EXPECT_LT(worst_rel_small, 1e-6);
  EXPECT_EQ(cpu::tanh_approx(30.0f), 1.0f);
  EXPECT_EQ(cpu::tanh_approx(-30.0f), -1.0f);
}

// The bulk multiplier stream draws exactly dropout_keep's mask, from any first element (rows of attention
// probabilities start and end inside Philox blocks).
TEST(Dropout, MultiplierStreamIsPhiloxFromAnyOffset) {
  const float p = 0.3f;
  for (uint64_t first : {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{4097}, (uint64_t{1} << 33) + 2})
    for (size_t count : {size_t{1}, size_t{2}, size_t{3}, size_t{5}, size_t{130}}) {
      std::vector<double> mult(count, kNaN);
      cpu::dropout_multipliers(mult.data(), first, count, p, kKey, 2.0);
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(mult[i], dropout_keep(kKey, first + i, p) ? 2.0 : 0.0) << "first " << first << " i " << i;
    }
}

TEST(Dropout, MaskIsPhiloxKeepRateAndScaleAreRight) {
  std::mt19937_64 rng(10);
  const int N = 97, C = 1031;  // rows neither a multiple of the Philox block nor of the chunk
  const size_t n = static_cast<size_t>(N) * C;
  const float p = 0.1f;
  Vec x = random_vec(n, rng), bias = random_vec(C, rng), residual = random_vec(n, rng), out(n);
  cpu::bias_dropout_residual_forward<double>(out.data(), x.data(), bias.data(), residual.data(), N, C, p, kKey);
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool keep = dropout_keep(kKey, i, p);
    kept += keep;
    ASSERT_NEAR(out[i], (keep ? (x[i] + bias[i % C]) / (1.0 - p) : 0.0) + residual[i], 1e-12) << i;
  }
  // Binomial(n, 0.9): five standard deviations is about 474.
  EXPECT_NEAR(static_cast<double>(kept), 0.9 * n, 5 * std::sqrt(n * 0.9 * 0.1));
  // The keep rate really is the Philox stream's: a different step draws a different mask.
  Vec other(n);
  RngKey next = kKey;
  next.step += 1;
  cpu::bias_dropout_residual_forward<double>(other.data(), x.data(), bias.data(), nullptr, N, C, p, next);
  size_t differ = 0;
  for (size_t i = 0; i < n; ++i) differ += (other[i] == 0) != (out[i] == residual[i]);
  EXPECT_GT(differ, n / 10);
}

TEST(Dropout, GradientsMatchFiniteDifferencesAndZeroProbabilityIsAnAdd) {
  std::mt19937_64 rng(11);
  const int N = 17, C = 61;
  const size_t n = static_cast<size_t>(N) * C;
  for (float p : {0.0f, 0.3f}) {
    SCOPED_TRACE(p);
    Vec x = random_vec(n, rng), residual = random_vec(n, rng), weights = random_vec(n, rng), out(n);
    auto loss = [&] {
      cpu::bias_dropout_residual_forward<double>(out.data(), x.data(), nullptr, residual.data(), N, C, p, kKey);
      return dot(weights, out);
    };
    loss();
    if (p == 0.0f) {
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(out[i], x[i] + residual[i]);
    }
    Vec dx = poisoned(n);
    cpu::dropout_backward<double>(dx.data(), weights.data(), n, p, kKey);
    expect_gradients_match(loss, {{"inp", &x, dx}});
  }
}

TEST(Dropout, ProbabilityOutsideZeroToOneIsAnError) {
  std::vector<float> x(12, 1.0f), out(12), saved(12);
  const Ids cu = {0, 2};
  for (float p : {1.0f, -0.1f, 1.5f}) {
    EXPECT_THROW(cpu::bias_dropout_residual_forward<float>(out.data(), x.data(), nullptr, nullptr, 2, 4, p, kKey),
                 InternalError);
    EXPECT_THROW(cpu::dropout_backward<float>(out.data(), x.data(), 8, p, kKey), InternalError);
    ops::AttentionForward a{out.data(), saved.data(), x.data(), cu.data(), 2, 1, 2, 1, 2, dropout_of(p)};
    EXPECT_THROW(cpu::attention_forward<float>(a), InternalError);
  }
}

// ---- attention ---------------------------------------------------------------------------------------

struct AttentionCase {
  const char* name;
  std::vector<int> lens;  // sequence lengths; tokens past their sum are filler
  int N, S, heads, D;
  float p;
};

std::vector<AttentionCase> attention_cases() {
  return {
      {"one full sequence", {5}, 5, 5, 2, 3, 0.0f},
      {"several sequences + filler", {2, 3, 1}, 8, 4, 2, 3, 0.0f},
      {"lengths 1 to S + dropout", {1, 2, 3, 4, 5, 6, 7}, 30, 7, 2, 3, 0.25f},
      {"an empty sequence + dropout", {3, 0, 4}, 9, 5, 3, 2, 0.25f},
      // len^2 above the forward's dropout tile, so the context is built in several row blocks.
      {"long sequences + dropout", {130, 61}, 191, 130, 1, 2, 0.1f},
  };
}

size_t saved_elements(const AttentionCase& c) {
  return cpu::attention_saved_elements(c.N, c.S, c.heads);
}

ops::AttentionForward attention_params(const AttentionCase& c, double* ctx, double* saved, const double* qkv,
                                       const Ids& cu) {
  return {ctx, saved, qkv, cu.data(), c.N, static_cast<int>(c.lens.size()), c.S, c.heads, c.D, dropout_of(c.p)};
}

TEST(Attention, ForwardMatchesNaiveTripleLoop) {
  std::mt19937_64 rng(12);
  for (const AttentionCase& c : attention_cases()) {
    SCOPED_TRACE(c.name);
    const int H = c.heads * c.D;
    const Ids cu = cu_seqlens_of(c.lens);
    Vec qkv = random_vec(static_cast<size_t>(c.N) * 3 * H, rng, -2, 2);
    Vec ctx = poisoned(static_cast<size_t>(c.N) * H), saved = poisoned(saved_elements(c)), want_ctx;
    std::vector<Vec> want_probs;
    cpu::attention_forward<double>(attention_params(c, ctx.data(), saved.data(), qkv.data(), cu));
    naive_attention(want_ctx, want_probs, qkv, cu, c.N, c.S, c.heads, c.D, c.p);
    expect_near_all(ctx, want_ctx, 1e-12, "ctx (filler rows 0)");
    // The saved probabilities, at the layout cpu_ops.h documents.
    size_t at = 0;
    for (size_t s = 0, pair = 0; s < c.lens.size(); ++s)
      for (int h = 0; h < c.heads; ++h, ++pair) {
        const Vec& P = want_probs[pair];
        expect_near_all(Vec(saved.begin() + at, saved.begin() + at + P.size()), P, 1e-13, "probs");
        at += P.size();
      }
  }
}

TEST(Attention, SequencesDoNotSeeEachOther) {
  // Changing the keys and values of sequence 2 must leave sequence 1's context unchanged.
  std::mt19937_64 rng(13);
  const int heads = 2, D = 4, H = heads * D, N = 8;
  const Ids cu = {0, 3, 7};
  const Vec qkv = random_vec(N * 3 * H, rng);
  std::vector<float> x = to_float(qkv), ctx(N * H), ctx2(N * H), saved(heads * N * 4);
  ops::AttentionForward p{ctx.data(), saved.data(), x.data(), cu.data(), N, 2, 4, heads, D, {}};
  cpu::attention_forward<float>(p);
  for (int t = 3; t < N; ++t)
    for (int c = H; c < 3 * H; ++c) x[t * 3 * H + c] += c < 2 * H ? -3.0f : 10.0f;
  p.ctx = ctx2.data();
  cpu::attention_forward<float>(p);
  for (int t = 0; t < 3; ++t)
    for (int c = 0; c < H; ++c) EXPECT_EQ(ctx[t * H + c], ctx2[t * H + c]);
  for (int c = 0; c < H; ++c) EXPECT_EQ(ctx2[7 * H + c], 0.0f) << "filler";
}

TEST(Attention, GradientsMatchFiniteDifferences) {
  std::mt19937_64 rng(14);
  for (const AttentionCase& c : attention_cases()) {
    SCOPED_TRACE(c.name);
    const int H = c.heads * c.D;
    const Ids cu = cu_seqlens_of(c.lens);
    Vec qkv = random_vec(static_cast<size_t>(c.N) * 3 * H, rng, -2, 2);
    Vec weights = random_vec(static_cast<size_t>(c.N) * H, rng), ctx(weights.size()), saved(saved_elements(c));
    auto loss = [&] {
      cpu::attention_forward<double>(attention_params(c, ctx.data(), saved.data(), qkv.data(), cu));
      return dot(weights, ctx);
    };
    loss();
    Vec dqkv = poisoned(qkv.size()), workspace = poisoned(saved.size());
    cpu::attention_backward<double>({dqkv.data(), workspace.data(), weights.data(), ctx.data(), qkv.data(),
                                     saved.data(), cu.data(), c.N, static_cast<int>(c.lens.size()), c.S, c.heads,
                                     c.D, dropout_of(c.p)});
    expect_gradients_match(loss, {{"qkv (filler rows 0)", &qkv, dqkv}});
  }
}

// For unpacked fixed-length rows (one sequence of length S per row) the mask is the one the padded layout drew:
// element = flat index into (B, heads, S, S).
TEST(Attention, FixedLengthRowsDrawThePaddedLayoutsMask) {
  std::mt19937_64 rng(25);
  const int B = 3, S = 6, heads = 2, D = 1, H = heads * D, N = B * S;
  const float p = 0.4f;
  const Ids cu = {0, S, 2 * S, 3 * S};
  Vec qkv = random_vec(N * 3 * H, rng);
  Vec ctx(N * H), saved(cpu::attention_saved_elements(N, S, heads));
  cpu::attention_forward<double>({ctx.data(), saved.data(), qkv.data(), cu.data(), N, B, S, heads, D, dropout_of(p)});
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < heads; ++h)
      for (int f = 0; f < S; ++f) {
        double want = 0;
        for (int t = 0; t < S; ++t) {
          const double prob = saved[((static_cast<size_t>(b) * heads + h) * S + f) * S + t];
          const uint64_t padded_flat = ((static_cast<uint64_t>(b) * heads + h) * S + f) * S + t;
          want += prob * (dropout_keep(kKey, padded_flat, p) ? 1.0 / (1.0 - p) : 0.0) *
                  qkv[(b * S + t) * 3 * H + 2 * H + h * D];
        }
        EXPECT_NEAR(ctx[(b * S + f) * H + h * D], want, 1e-13);
      }
}

TEST(Attention, BrokenLayoutIsAnError) {
  std::vector<float> x(64), ctx(16), saved(64);
  auto run = [&](Ids cu, int N, int S) {
    ops::AttentionForward p{ctx.data(), saved.data(), x.data(), cu.data(), N, static_cast<int>(cu.size()) - 1, S, 1, 1, {}};
    cpu::attention_forward<float>(p);
  };
  EXPECT_NO_THROW(run({0, 2, 4}, 5, 2));
  EXPECT_THROW(run({0, 3, 4}, 5, 2), InternalError);   // longer than max_seqlen
  EXPECT_THROW(run({0, 2, 6}, 5, 4), InternalError);   // past the tokens
  EXPECT_THROW(run({0, 3, 2}, 5, 4), InternalError);   // decreasing
  EXPECT_THROW(run({1, 2, 4}, 5, 4), InternalError);   // not starting at 0
}

// ---- cross-entropy -----------------------------------------------------------------------------------

struct CrossEntropyProblem {
  int M, V, ldl;
  Vec logits;
  Ids labels;
  std::vector<float> loss_weight, count_weight;
};

CrossEntropyProblem cross_entropy_problem(std::mt19937_64& rng, int M, int V, int pad) {
  CrossEntropyProblem c{M, V, V + pad, random_vec(static_cast<size_t>(M) * (V + pad), rng, -3, 3),
                        random_ids(M, V, rng), {}, {}};
  const Vec lw = random_vec(M, rng, 0.1, 2), cw = random_vec(M, rng, 0.5, 1.5);
  c.loss_weight.assign(lw.begin(), lw.end());
  c.count_weight.assign(cw.begin(), cw.end());
  return c;
}

TEST(CrossEntropy, ForwardSavesLogSumExpAndAddsWeightedStatistics) {
  std::mt19937_64 rng(15);
  CrossEntropyProblem c = cross_entropy_problem(rng, 6, 13, 3);
  c.loss_weight[2] = 0.0f;  // a row that adds nothing
  c.count_weight[4] = 0.0f;
  // Make some rows' argmax the label.
  for (int i : {0, 3, 4}) c.logits[i * c.ldl + c.labels[i]] = 9.0;
  Vec lse = poisoned(c.M);
  double stats[2] = {0.5, 0.25};
  std::vector<double> scratch(kScratchDoubles);
  cpu::cross_entropy_forward<double>({lse.data(), stats, c.logits.data(), c.labels.data(), c.loss_weight.data(),
                                      c.count_weight.data(), c.M, c.V, c.ldl},
                                     scratch);
  double want_loss = 0.5, want_correct = 0.25;
  for (int i = 0; i < c.M; ++i) {
    long double sum = 0;
    int argmax = 0;
    for (int j = 0; j < c.V; ++j) {
      sum += std::exp(static_cast<long double>(c.logits[i * c.ldl + j]));
      if (c.logits[i * c.ldl + j] > c.logits[i * c.ldl + argmax]) argmax = j;
    }
    EXPECT_NEAR(lse[i], static_cast<double>(std::log(sum)), 1e-13);
    want_loss += c.loss_weight[i] * static_cast<double>(std::log(sum) - c.logits[i * c.ldl + c.labels[i]]);
    want_correct += argmax == c.labels[i] ? c.count_weight[i] : 0.0;
  }
  EXPECT_NEAR(stats[0], want_loss, 1e-12);
  EXPECT_NEAR(stats[1], want_correct, 1e-12);
  EXPECT_GT(want_correct, 0.25 + 1.0);  // the test has hits to count
}

TEST(CrossEntropy, BackwardFromLogSumExpMatchesFiniteDifferences) {
  std::mt19937_64 rng(26);
  CrossEntropyProblem c = cross_entropy_problem(rng, 5, 11, 2);
  c.loss_weight[1] = 0.0f;
  Vec lse(c.M);
  std::vector<double> scratch(kScratchDoubles);
  auto loss = [&] {
    double stats[2] = {0, 0};
    cpu::cross_entropy_forward<double>({lse.data(), stats, c.logits.data(), c.labels.data(), c.loss_weight.data(),
                                        c.count_weight.data(), c.M, c.V, c.ldl},
                                       scratch);
    return stats[0];
  };
  loss();
  const float scale = 0.75f;
  Vec d = poisoned(c.logits.size());
  cpu::cross_entropy_backward<double>(
      {d.data(), c.logits.data(), lse.data(), c.labels.data(), c.loss_weight.data(), c.M, c.V, c.ldl, scale});
  // Padding columns are not the op's: leave them out of the check.
  Vec analytic(c.logits.size(), 0.0);
  for (int i = 0; i < c.M; ++i)
    for (int j = 0; j < c.ldl; ++j) {
      if (j < c.V) {
        analytic[i * c.ldl + j] = d[i * c.ldl + j] / scale;
      } else {
        EXPECT_TRUE(std::isnan(d[i * c.ldl + j])) << "padding column written";
      }
    }
  expect_gradients_match(loss, {{"logits", &c.logits, analytic}});
  // In place gives the same.
  Vec in_place = c.logits;
  cpu::cross_entropy_backward<double>({in_place.data(), in_place.data(), lse.data(), c.labels.data(),
                                       c.loss_weight.data(), c.M, c.V, c.ldl, scale});
  for (int i = 0; i < c.M; ++i)
    for (int j = 0; j < c.V; ++j) EXPECT_EQ(in_place[i * c.ldl + j], d[i * c.ldl + j]);
}

TEST(CrossEntropy, LargeLogitsDoNotOverflowInFloat) {
  // Shifting every logit by a constant leaves the loss unchanged; exp(1000) would overflow.
  const int V = 4;
  const std::vector<float> small = {0.5f, -1.0f, 2.0f, 0.25f};
  std::vector<float> big(V);
  for (int j = 0; j < V; ++j) big[j] = small[j] + 1000.0f;
  const Ids label = {2};
  const float one = 1.0f;
  float lse_small = 0, lse_big = 0;
  double loss_small[2] = {0, 0}, loss_big[2] = {0, 0};
  std::vector<double> scratch(kScratchDoubles);
  cpu::cross_entropy_forward<float>({&lse_small, loss_small, small.data(), label.data(), &one, &one, 1, V, V}, scratch);
  cpu::cross_entropy_forward<float>({&lse_big, loss_big, big.data(), label.data(), &one, &one, 1, V, V}, scratch);
  EXPECT_TRUE(std::isfinite(loss_big[0]));
  EXPECT_NEAR(loss_big[0], loss_small[0], 1e-4);
  EXPECT_NEAR(lse_big, lse_small + 1000.0f, 1e-3);
}

TEST(CrossEntropy, LabelOutsideVocabularyIsAnErrorOnlyWhereItCounts) {
  const std::vector<float> logits(12, 0.0f);
  const Ids labels = {6, 1};
  float lse[2];
  double stats[2] = {0, 0};
  std::vector<double> scratch(kScratchDoubles);
  const std::vector<float> weighted = {1.0f, 1.0f}, unweighted = {0.0f, 1.0f};
  EXPECT_THROW(cpu::cross_entropy_forward<float>(
                   {lse, stats, logits.data(), labels.data(), weighted.data(), unweighted.data(), 2, 6, 6}, scratch),
               InternalError);
  EXPECT_THROW(cpu::cross_entropy_forward<float>(
                   {lse, stats, logits.data(), labels.data(), unweighted.data(), weighted.data(), 2, 6, 6}, scratch),
               InternalError);
  std::vector<float> d(12, 7.0f);
  EXPECT_THROW(cpu::cross_entropy_backward<float>(
                   {d.data(), logits.data(), lse, labels.data(), weighted.data(), 2, 6, 6}),
               InternalError);
  // A filler row (weight 0) may carry any label: nothing is read at it.
  EXPECT_NO_THROW(cpu::cross_entropy_forward<float>(
      {lse, stats, logits.data(), labels.data(), unweighted.data(), unweighted.data(), 2, 6, 6}, scratch));
  cpu::cross_entropy_backward<float>({d.data(), logits.data(), lse, labels.data(), unweighted.data(), 2, 6, 6});
  for (int j = 0; j < 6; ++j) EXPECT_EQ(d[j], 0.0f);
}

TEST(Argmax, MatchesAScanOnLongRowsWithTies) {
  // Rows longer than the search block, the maximum repeated at random places, including across
  // block boundaries; the oracle is a plain strict-greater scan.
  std::mt19937_64 rng(21);
  const int M = 40, V = 1000, ld = 1003;
  std::vector<float> logits = to_float(random_vec(M * ld, rng));
  std::uniform_int_distribution<int> pick(0, V - 1);
  for (int i = 0; i < M; ++i)
    for (int copies = i % 4; copies > 0; --copies) logits[i * ld + pick(rng)] = 5.0f;
  logits[3 * ld + 255] = logits[3 * ld + 256] = 9.0f;
  for (int i = 0; i < M; ++i) logits[i * ld + V] = 100.0f;  // past the row: not a candidate
  std::vector<int32_t> out(M);
  cpu::argmax_rows<float>(out.data(), logits.data(), M, V, ld);
  for (int i = 0; i < M; ++i) {
    int best = 0;
    for (int j = 1; j < V; ++j)
      if (logits[i * ld + j] > logits[i * ld + best]) best = j;
    EXPECT_EQ(out[i], best) << "row " << i;
  }
}

TEST(Argmax, FirstMaximumWins) {
  const std::vector<float> logits = {1, 3, 3, 2,  //
                                     -5, -5, -5, -5,  //
                                     0, 1, 2, 7};
  std::vector<int32_t> out(3);
  cpu::argmax_rows<float>(out.data(), logits.data(), 3, 4, 4);
  EXPECT_EQ(out, (std::vector<int32_t>{1, 0, 3}));
}

// ---- the optimizer ops -------------------------------------------------------------------------------

// Random values over a whole flat buffer, padding included (the ops must not read or write it).
template <typename T>
std::vector<T> random_flat(const FlatProblem& f, std::mt19937_64& rng, double lo, double hi) {
  const Vec v = random_vec(f.total, rng, lo, hi);
  return std::vector<T>(v.begin(), v.end());
}

TEST(Optimizer, ClipIsTheReferencesGlobalNorm) {
  std::mt19937_64 rng(30);
  const FlatProblem f({5000, 7, 3000, 1}, 1024);
  const std::vector<double> g = random_flat<double>(f, rng, -1, 1);
  long double sq = 0;
  for (size_t i = 0; i < f.total; ++i)
    if (f.in_tensor(i)) sq += static_cast<long double>(g[i]) * g[i];
  const double norm = std::sqrt(static_cast<double>(sq));
  std::vector<double> scratch(kScratchDoubles);
  for (float max_norm : {1.0f, 1000.0f}) {
    ops::StepScalars s;
    s.max_grad_norm = max_norm;
    s.clip_scale = 7;
    cpu::gradient_clip<double>({&s, nullptr, g.data(), f.all()}, scratch);
    EXPECT_NEAR(s.grad_norm_sq, static_cast<double>(sq), 1e-9);
    EXPECT_FLOAT_EQ(s.clip_scale, norm > max_norm ? static_cast<float>(max_norm / norm) : 1.0f);
    EXPECT_EQ(s.nonfinite, 0);
  }
  // In shards: partial sums that add up to the whole, finished once; the scalars untouched until then.
  ops::StepScalars s;
  double a = -1, b = -1;
  cpu::gradient_clip<double>({&s, &a, g.data(), f.range(0, 3)}, scratch);
  cpu::gradient_clip<double>({&s, &b, g.data(), f.range(3, f.chunks() - 3)}, scratch);
  EXPECT_EQ(s.grad_norm_sq, 0.0);
  s.grad_norm_sq = a + b;
  cpu::gradient_clip_finish({&s});
  EXPECT_NEAR(s.grad_norm_sq, static_cast<double>(sq), 1e-9);
  EXPECT_FLOAT_EQ(s.clip_scale, static_cast<float>(1.0 / norm));
  // A non-finite gradient is counted, and nothing is scaled.
  std::vector<double> bad = g;
  bad[f.offset[2] + 5] = kNaN;
  cpu::gradient_clip<double>({&s, nullptr, bad.data(), f.all()}, scratch);
  EXPECT_EQ(s.nonfinite, 1);
  EXPECT_EQ(s.clip_scale, 1.0f);
  s.max_grad_norm = 0;
  EXPECT_THROW(cpu::gradient_clip_finish({&s}), InternalError);
}

// The schedule from the update count against the reference's values written out (bert-reference.md section 4.2):
// warmup from a negative start, the jump to the decay taken at the step, the end; LAMB's bias corrections directly.
TEST(Optimizer, ScheduleStepGivesTheReferenceScheduleFromTheUpdateCount) {
  const kmath::StepSchedule schedule{.learning_rate = 0.00288293, .beta1 = 0.9, .beta2 = 0.999, .poly_power = 1,
                                     .train_steps = 600, .warmup_steps = 287, .start_warmup_step = -76};
  struct Want {
    int64_t updates;
    double lr;
  };
  for (Want w : {Want{0, 0.00288293 * 76 / 287}, Want{210, 0.00288293 * 286 / 287},
                 Want{211, 0.00288293 * (1 - 211.0 / 600)}, Want{599, 0.00288293 * (1 - 599.0 / 600)}, Want{600, 0.0},
                 Want{900, 0.0}}) {
    ops::StepScalars s;
    s.updates = w.updates;
    cpu::schedule_step({&s, schedule, 8, 3});
    EXPECT_EQ(s.learning_rate, static_cast<float>(w.lr)) << w.updates;
    const double t = static_cast<double>(w.updates + 1);
    EXPECT_FLOAT_EQ(s.inv_bias_correction1, static_cast<float>(1 / (1 - std::pow(0.9, t)))) << w.updates;
    EXPECT_FLOAT_EQ(s.inv_bias_correction2, static_cast<float>(1 / (1 - std::pow(0.999, t)))) << w.updates;
    EXPECT_EQ(s.dropout.step, static_cast<uint32_t>(w.updates * 8 + 3)) << w.updates;
    EXPECT_EQ(s.updates, w.updates);
  }
  // The clip's fields start again; the run's constants and the last record's non-finite count stay.
  ops::StepScalars last;
  last.dropout.seed = 77;
  last.max_grad_norm = 2;
  last.grad_norm_sq = 5;
  last.clip_scale = 0.5f;
  last.nonfinite = 2;
  cpu::schedule_step({&last, schedule, 8, 3});
  EXPECT_EQ(last.grad_norm_sq, 0.0);
  EXPECT_EQ(last.clip_scale, 1.0f);
  EXPECT_EQ(last.nonfinite, 2);
  EXPECT_EQ(last.dropout.seed, 77u);
  EXPECT_EQ(last.max_grad_norm, 2.0f);
  // The dropout step wraps at 2^32 as the host's did.
  ops::StepScalars s;
  s.updates = (int64_t{1} << 32) / 8 + 1;
  cpu::schedule_step({&s, schedule, 8, 3});
  EXPECT_EQ(s.dropout.step, 11u);
  EXPECT_THROW(cpu::schedule_step({&s, kmath::StepSchedule{}, 8, 3}), InternalError);
}

// The step's record, as train_step.h reads it: slot updates % slots holds the step's sums, norm, count and learning
// rate; the count advances on every step; a step is marked not finite by its clips or by a loss that is not finite.
TEST(Optimizer, RecordStepFilesTheStepInItsSlotAndAdvancesTheCount) {
  std::vector<ops::StepRecord> ring(4);
  ops::StepScalars s;
  s.updates = 9;
  s.learning_rate = 0.5f;
  s.grad_norm_sq = 6.25;
  s.nonfinite = 7;  // this rank's count; the record's is the sum over ranks
  const double sums[5] = {3.5, 40, 0.75, 6, 0};
  cpu::record_step({&s, sums, ring.data(), 4});
  EXPECT_EQ(s.updates, 10);
  EXPECT_EQ(s.nonfinite, 0.0) << "a finite step leaves the next one clean";
  const ops::StepRecord& r = ring[1];  // 9 % 4
  EXPECT_EQ(r.mlm_loss, 3.5);
  EXPECT_EQ(r.mlm_correct, 40.0);
  EXPECT_EQ(r.nsp_loss, 0.75);
  EXPECT_EQ(r.nsp_correct, 6.0);
  EXPECT_EQ(r.nonfinite, 0.0);
  EXPECT_EQ(r.grad_norm_sq, 6.25);
  EXPECT_EQ(r.updates, 9);
  EXPECT_EQ(r.learning_rate, 0.5f);
  for (int k : {0, 2, 3}) EXPECT_EQ(ring[size_t(k)].updates, 0) << "slot " << k << " was written";
  // The next step goes to the next slot, and the ring wraps.
  for (int k = 0; k < 3; ++k) cpu::record_step({&s, sums, ring.data(), 4});
  EXPECT_EQ(s.updates, 13);
  EXPECT_EQ(ring[0].updates, 12);
  EXPECT_EQ(ring[1].updates, 9);
  cpu::record_step({&s, sums, ring.data(), 4});
  EXPECT_EQ(ring[1].updates, 13);
  // Not finite: clips counted over the ranks, a NaN or an infinite loss (the count still advances); the record's
  // count stays in the scalars, so the next steps update nothing (LAMB's ops skip while it is > 0).
  const double inf = std::numeric_limits<double>::infinity();
  struct Bad {
    double sums[5];
    double want;
  };
  for (const Bad& bad : {Bad{{1, 2, 3, 4, 2}, 2}, Bad{{std::nan(""), 2, 3, 4, 0}, 1}, Bad{{1, 2, -inf, 4, 0}, 1},
                         Bad{{1, 2, 3, 4, 0}, 0}}) {
    const int64_t before = s.updates;
    cpu::record_step({&s, bad.sums, ring.data(), 4});
    EXPECT_EQ(ring[size_t(before % 4)].nonfinite, bad.want) << bad.sums[0] << " " << bad.sums[2] << " " << bad.sums[4];
    EXPECT_EQ(s.updates, before + 1);
    EXPECT_EQ(s.nonfinite, bad.want > 0 ? 1.0 : 0.0);
  }
  EXPECT_THROW(cpu::record_step({&s, sums, ring.data(), 0}), InternalError);
}

TEST(Optimizer, AccumulateAddsClippedScaledGradientsOverTheChunksOnly) {
  std::mt19937_64 rng(31);
  const FlatProblem f({3000, 5, 70}, 512);
  const std::vector<float> g = random_flat<float>(f, rng, -1, 1), sum0 = random_flat<float>(f, rng, -1, 1);
  std::vector<float> sum = sum0;
  ops::StepScalars s;
  s.clip_scale = 0.25f;
  cpu::gradient_accumulate<float>({sum.data(), g.data(), &s, f.all(), 0.5f});
  for (size_t i = 0; i < f.total; ++i) {
    const float want = f.in_tensor(i) ? sum0[i] + g[i] * 0.25f * 0.5f : sum0[i];
    ASSERT_EQ(sum[i], want) << i;
  }
  // Only the last clip's norm decides: an earlier non-finite micro-batch (counted in nonfinite) does not stop
  // this one, as today's accumulator added each finite micro-batch.
  s.nonfinite = 1;
  std::vector<float> before = sum;
  cpu::gradient_accumulate<float>({sum.data(), g.data(), &s, f.all(), 0.5f});
  EXPECT_NE(sum, before);
  s.grad_norm_sq = std::numeric_limits<double>::infinity();
  before = sum;
  cpu::gradient_accumulate<float>({sum.data(), g.data(), &s, f.all(), 0.5f});
  EXPECT_EQ(sum, before);
}

// The reference's LAMB (bert-reference.md 4.1), per tensor, in double, straight from the formulas; the
// hyperparameters are given as the ops get them (fp32 values, and the bias corrections 1 / (1 - beta^t)).
struct LambReference {
  std::vector<double> w, m, v;
  void step(const FlatProblem& f, const std::vector<double>& g, const std::vector<uint8_t>& excluded,
            const ops::StepScalars& s, double b1, double one_minus_b1, double b2, double one_minus_b2, double eps,
            double wd) {
    for (size_t k = 0; k < f.numel.size(); ++k) {
      std::vector<double> u(f.numel[k]);
      double w_sq = 0, u_sq = 0;
      for (size_t j = 0; j < f.numel[k]; ++j) {
        const size_t i = f.offset[k] + j;
        m[i] = b1 * m[i] + one_minus_b1 * g[i];
        v[i] = b2 * v[i] + one_minus_b2 * g[i] * g[i];
        u[j] = (m[i] * s.inv_bias_correction1) / (std::sqrt(v[i] * s.inv_bias_correction2) + eps) +
               (excluded[k] ? 0.0 : wd * w[i]);
        w_sq += w[i] * w[i];
        u_sq += u[j] * u[j];
      }
      const double ratio = excluded[k] || w_sq == 0 || u_sq == 0 ? 1.0 : std::sqrt(w_sq) / std::sqrt(u_sq);
      const double lr = s.learning_rate;
      for (size_t j = 0; j < f.numel[k]; ++j) w[f.offset[k] + j] -= ratio * lr * u[j];
    }
  }
};

template <typename T>
struct LambState {
  std::vector<T> w, m, v, weights;
  std::vector<double> norms = {};
  std::vector<double> scratch = std::vector<double>(kScratchDoubles);
};

// Two LAMB steps through the ops: moments (optionally in two shards), then apply.
template <typename T>
void lamb_ops_step(LambState<T>& st, const FlatProblem& f, const std::vector<T>& g, const float* grad_scale,
                   const std::vector<uint8_t>& excluded, ops::StepScalars& s, bool sharded) {
  st.norms.assign(2 * f.numel.size(), 0.0);
  ops::LambMoments mo{st.m.data(), st.v.data(), st.norms.data(), g.data(), st.w.data(), excluded.data(),
                      grad_scale, &s, f.all()};
  mo.one_minus_beta1 = static_cast<float>(1.0 - 0.9);
  mo.one_minus_beta2 = static_cast<float>(1.0 - 0.999);
  if (sharded) {
    mo.chunks = f.range(0, 2);
    cpu::lamb_moments<T>(mo, st.scratch);
    mo.chunks = f.range(2, f.chunks() - 2);
  }
  cpu::lamb_moments<T>(mo, st.scratch);
  cpu::lamb_apply<T>({st.w.data(), st.weights.empty() ? nullptr : st.weights.data(), st.m.data(), st.v.data(),
                      st.norms.data(), excluded.data(), &s, f.all()});
}

ops::StepScalars lamb_scalars(int t, float lr) {
  ops::StepScalars s;
  s.learning_rate = lr;
  s.inv_bias_correction1 = static_cast<float>(1.0 / (1.0 - std::pow(0.9, t)));
  s.inv_bias_correction2 = static_cast<float>(1.0 / (1.0 - std::pow(0.999, t)));
  return s;
}

TEST(Optimizer, LambOpsFollowTheReferenceFormula) {
  std::mt19937_64 rng(32);
  // A zero tensor (trust ratio 1), an excluded one (no decay, ratio 1), and tensors over several chunks.
  const FlatProblem f({2500, 9, 1200, 40, 700}, 256);
  const std::vector<uint8_t> excluded = {0, 1, 0, 0, 1};
  LambReference ref{random_flat<double>(f, rng, -1, 1), std::vector<double>(f.total, 0.0), std::vector<double>(f.total, 0.0)};
  for (size_t j = 0; j < f.numel[3]; ++j) ref.w[f.offset[3] + j] = 0;
  LambState<double> st{ref.w, ref.m, ref.v, std::vector<double>(f.total, kNaN)};
  const float grad_scale = 0.5f;
  for (int t = 1; t <= 3; ++t) {
    const std::vector<double> g = random_flat<double>(f, rng, -1, 1);
    std::vector<double> scaled(g);
    for (double& x : scaled) x *= grad_scale;
    ops::StepScalars s = lamb_scalars(t, 0.01f);
    lamb_ops_step(st, f, g, &grad_scale, excluded, s, t == 2);
    ref.step(f, scaled, excluded, s, 0.9f, static_cast<float>(1.0 - 0.9), 0.999f, static_cast<float>(1.0 - 0.999),
             1e-6f, 0.01f);
  }
  // The trust ratio and lr * ratio are fp32 on every backend (kernel_math.h): a relative error of 1e-7 in an update
  // of size ~lr.
  for (size_t i = 0; i < f.total; ++i) {
    if (!f.in_tensor(i)) continue;
    ASSERT_NEAR(st.w[i], ref.w[i], 1e-8) << "w " << i;
    ASSERT_NEAR(st.m[i], ref.m[i], 1e-14) << "m " << i;
    ASSERT_NEAR(st.v[i], ref.v[i], 1e-14) << "v " << i;
    ASSERT_EQ(st.weights[i], st.w[i]) << "weight copy " << i;
  }
  EXPECT_NE(st.w[f.offset[3]], 0.0) << "a zero tensor moves, with trust ratio 1";
  // Padding is never touched.
  for (size_t i = 0; i < f.total; ++i)
    if (!f.in_tensor(i)) {
      ASSERT_TRUE(std::isnan(st.weights[i])) << i;
    }
}

// The fp32 ops are the reference's update as the CPU has always computed it: these scalar loops, with the same
// fp32 operations and double norms, give the same bits.
TEST(Optimizer, LambOpsInFloatMatchThePlainScalarUpdateBitForBit) {
  std::mt19937_64 rng(33);
  const FlatProblem f({3000, 17, 900}, 1000);
  const std::vector<uint8_t> excluded = {0, 1, 0};
  LambState<float> st{random_flat<float>(f, rng, -1, 1), random_flat<float>(f, rng, -0.01, 0.01),
                      random_flat<float>(f, rng, 0, 0.001), {}};
  std::vector<float> w = st.w, m = st.m, v = st.v;
  const std::vector<float> g = random_flat<float>(f, rng, -1, 1);
  const int t = 4;
  ops::StepScalars s = lamb_scalars(t, 0.002f);
  lamb_ops_step(st, f, g, nullptr, excluded, s, false);

  const float b1 = 0.9f, omb1 = static_cast<float>(1.0 - 0.9), b2 = 0.999f, omb2 = static_cast<float>(1.0 - 0.999);
  const float eps = 1e-6f, wd = 0.01f, c1 = s.inv_bias_correction1, c2 = s.inv_bias_correction2;
  for (size_t k = 0; k < f.numel.size(); ++k) {
    const float decay = excluded[k] ? 0.0f : wd;
    double w_sq = 0, u_sq = 0;
    for (int c = 0; c < f.chunks(); ++c) {  // chunk sums, added in chunk order
      if (f.chunk_tensor[c] != static_cast<int32_t>(k)) continue;
      double cw = 0, cu = 0;
      for (int64_t i = f.chunk_begin[c]; i < f.chunk_end[c]; ++i) {
        m[i] = b1 * m[i] + omb1 * g[i];
        v[i] = b2 * v[i] + omb2 * g[i] * g[i];
        const float u = (m[i] * c1) / (std::sqrt(v[i] * c2) + eps) + decay * w[i];
        cw += double(w[i]) * double(w[i]);
        cu += double(u) * double(u);
      }
      w_sq += cw;
      u_sq += cu;
    }
    const float ratio = excluded[k] || !(w_sq > 0) || !(u_sq > 0) ? 1.0f
                                                                  : static_cast<float>(std::sqrt(w_sq) / std::sqrt(u_sq));
    const float step = ratio * 0.002f;
    for (size_t j = 0; j < f.numel[k]; ++j) {
      const size_t i = f.offset[k] + j;
      w[i] -= step * ((m[i] * c1) / (std::sqrt(v[i] * c2) + eps) + decay * w[i]);
    }
  }
  EXPECT_EQ(st.m, m);
  EXPECT_EQ(st.v, v);
  EXPECT_EQ(st.w, w);
}

TEST(Optimizer, NothingMovesAfterANonFiniteClip) {
  std::mt19937_64 rng(34);
  const FlatProblem f({300, 20}, 128);
  const std::vector<uint8_t> excluded = {0, 0};
  LambState<float> st{random_flat<float>(f, rng, -1, 1), random_flat<float>(f, rng, -1, 1), random_flat<float>(f, rng, 0, 1), {}};
  const LambState<float> before = st;
  ops::StepScalars s = lamb_scalars(1, 0.1f);
  s.nonfinite = 1;
  lamb_ops_step(st, f, random_flat<float>(f, rng, -1, 1), nullptr, excluded, s, false);
  EXPECT_EQ(st.w, before.w);
  EXPECT_EQ(st.m, before.m);
  EXPECT_EQ(st.v, before.v);
  EXPECT_EQ(st.norms, std::vector<double>(4, 0.0));
}

// ---- kernel_math.h: the element formulas every backend shares ------------------------------------

TEST(KernelMath, GeluAndItsDerivative) {
  auto tanh_fn = [](double x) { return std::tanh(x); };
  for (double x = -6; x <= 6; x += 0.173) {
    EXPECT_NEAR(kmath::gelu(x, tanh_fn), naive_gelu(x), 1e-15);
    const double h = 1e-6, fd = (naive_gelu(x + h) - naive_gelu(x - h)) / (2 * h);
    EXPECT_NEAR(kmath::gelu_grad(x, tanh_fn), fd, 1e-8);
    const double t = std::tanh(x);
    EXPECT_NEAR(kmath::tanh_grad_from_output(t), (std::tanh(x + h) - std::tanh(x - h)) / (2 * h), 1e-8);
  }
  // With the CPU's fast tanh in fp32, within fp32 accuracy of the exact formula.
  for (float x = -6; x <= 6; x += 0.0731f) {
    EXPECT_NEAR(kmath::gelu(x, cpu::FastTanh{}), naive_gelu(x), 2e-6 * std::max(1.0f, std::fabs(x)));
  }
}

TEST(KernelMath, LayerNormFormulasGiveTheRowAndItsGradient) {
  std::mt19937_64 rng(35);
  const int C = 9;
  Vec x = random_vec(C, rng, -2, 3), gamma = random_vec(C, rng), beta = random_vec(C, rng), w = random_vec(C, rng);
  auto row = [&](const Vec& in, Vec& out) {
    double mu = 0, var = 0;
    for (double v : in) mu += v / C;
    for (double v : in) var += (v - mu) * (v - mu) / C;
    const double rs = kmath::layernorm_rstd(var, [](double v) { return std::sqrt(v); });
    EXPECT_NEAR(rs, 1 / std::sqrt(var + 1e-12), 1e-12);
    for (int c = 0; c < C; ++c) out[c] = kmath::layernorm_out(in[c], mu, rs, gamma[c], beta[c]);
    return std::pair(mu, rs);
  };
  Vec out(C);
  const auto [mu, rs] = row(x, out);
  expect_near_all(out, naive_layernorm(x, gamma, beta, 1, C), 1e-13, "row");
  double g_sum = 0, gx_sum = 0;
  for (int c = 0; c < C; ++c) {
    g_sum += w[c] * gamma[c];
    gx_sum += w[c] * gamma[c] * (x[c] - mu) * rs;
  }
  for (int c = 0; c < C; ++c) {
    const double h = 1e-6;
    Vec up = x, down = x, o(C);
    up[c] += h;
    down[c] -= h;
    row(up, o);
    const double l_up = dot(w, o);
    row(down, o);
    const double fd = (l_up - dot(w, o)) / (2 * h);
    EXPECT_NEAR(kmath::layernorm_dx(w[c], gamma[c], (x[c] - mu) * rs, rs, g_sum / C, gx_sum / C), fd, 1e-7);
  }
}

TEST(KernelMath, AttentionDropoutElementNumbering) {
  // ((s * heads + h) * S + i) * S + j: consecutive keys are consecutive elements, and pairs tile the space.
  EXPECT_EQ(kmath::attention_dropout_element(0, 0, 0, 0, 12, 128), 0u);
  EXPECT_EQ(kmath::attention_dropout_element(0, 0, 0, 5, 12, 128), 5u);
  EXPECT_EQ(kmath::attention_dropout_element(0, 0, 1, 0, 12, 128), 128u);
  EXPECT_EQ(kmath::attention_dropout_element(0, 1, 0, 0, 12, 128), 128u * 128u);
  EXPECT_EQ(kmath::attention_dropout_element(2, 3, 4, 5, 12, 128), ((2u * 12 + 3) * 128 + 4) * 128 + 5);
  // Beyond 32 bits for large batches.
  EXPECT_EQ(kmath::attention_dropout_element(100000, 15, 511, 511, 16, 512),
            ((uint64_t{100000} * 16 + 15) * 512 + 511) * 512 + 511);
}

TEST(KernelMath, CrossEntropyRow) {
  std::mt19937_64 rng(36);
  const int V = 7, label = 3;
  Vec x = random_vec(V, rng, -2, 2);
  auto lse_of = [&](const Vec& v) {
    double s = 0;
    for (double e : v) s += std::exp(e);
    return std::log(s);
  };
  const double lse = lse_of(x);
  EXPECT_NEAR(kmath::cross_entropy_loss(lse, x[label]), -std::log(std::exp(x[label]) / std::exp(lse)), 1e-14);
  auto exp_fn = [](double v) { return std::exp(v); };
  for (int j = 0; j < V; ++j) {
    const double h = 1e-6;
    Vec up = x, down = x;
    up[j] += h;
    down[j] -= h;
    const double fd = (lse_of(up) - up[label] - (lse_of(down) - down[label])) / (2 * h);
    EXPECT_NEAR(kmath::cross_entropy_grad(x[j], lse, j == label, 0.5, exp_fn), 0.5 * fd, 1e-8);
  }
}

TEST(KernelMath, LambElementUpdateIsTheReferenceFormula) {
  // m, v, u of one element for a few steps, against the reference's formula in double.
  kmath::LambElementParams p{0.9f, 0.1f, 0.999f, 0.001f, 0, 0, 1e-6f, 0.01f};
  double m = 0, v = 0, w = 0.3;
  double rm = 0, rv = 0;
  for (int t = 1; t <= 4; ++t) {
    const double g = 0.1 * t - 0.25;
    p.inv_bias_correction1 = static_cast<float>(1 / (1 - std::pow(0.9, t)));
    p.inv_bias_correction2 = static_cast<float>(1 / (1 - std::pow(0.999, t)));
    kmath::lamb_moments(m, v, g, p);
    rm = 0.9 * rm + 0.1 * g;
    rv = 0.999 * rv + 0.001 * g * g;
    EXPECT_NEAR(m, rm, 1e-8);
    EXPECT_NEAR(v, rv, 1e-9);
    const double u = kmath::lamb_direction(m, v, w, p, [](double x) { return std::sqrt(x); });
    const double ru = (rm / (1 - std::pow(0.9, t))) / (std::sqrt(rv / (1 - std::pow(0.999, t))) + 1e-6) + 0.01 * w;
    EXPECT_NEAR(u, ru, 1e-6 * std::fabs(ru));
  }
  EXPECT_FLOAT_EQ(kmath::lamb_trust_ratio(3.0, 2.0, false), 1.5f);
  EXPECT_EQ(kmath::lamb_trust_ratio(3.0, 2.0, true), 1.0f);
  EXPECT_EQ(kmath::lamb_trust_ratio(0.0, 2.0, false), 1.0f);
  EXPECT_EQ(kmath::lamb_trust_ratio(3.0, 0.0, false), 1.0f);
  EXPECT_EQ(kmath::lamb_trust_ratio(std::nan(""), 1.0, false), 1.0f);
}

// ---- fp32 against fp64, the thread count, and the backend entry points -----------------------------

// Runs every op forward and backward in T on one fixed random problem (odd sizes so the vector loops have tails;
// row counts times `scale`) and returns all outputs and gradients, as doubles.
template <typename T>
std::vector<Vec> run_all_ops(uint64_t seed, int scale = 1) {
  std::mt19937_64 rng(seed);
  auto data = [&](size_t n, double lo = -1, double hi = 1) {
    const Vec d = random_vec(n, rng, lo, hi);
    return std::vector<T>(d.begin(), d.end());
  };
  auto as_vec = [](const std::vector<T>& v) { return Vec(v.begin(), v.end()); };
  std::vector<Vec> results;
  {  // linear: both layouts, grouped with wide rows, GELU, and the fused activation backward
    const int N = 37 * scale, I = 45, O = 29;
    for (WeightLayout layout : {WeightLayout::IN_OUT, WeightLayout::OUT_IN}) {
      auto x = data(N * I), w = data(I * O), b = data(O), dout = data(N * O);
      std::vector<T> out(N * O), dx(N * I), dw(I * O), db(O);
      cpu::linear_forward<T>({out.data(), nullptr, x.data(), w.data(), b.data(), N, I, O, 1, 0, 0, 0, layout});
      cpu::linear_backward<T>({dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), N, I, O, 1, 0, 0, 0,
                               layout});
      for (auto* v : {&out, &dx, &dw, &db}) results.push_back(as_vec(*v));
    }
    const int G = 3, ldo = G * O + 5;
    auto x = data(N * I), w = data(G * I * O), b = data(G * O), dout = data(N * ldo), saved = data(N * I, -3, 3);
    std::vector<T> out(N * ldo), pre(N * ldo), dx(N * I), dw(G * I * O), db(G * O), dpb(I);
    cpu::linear_forward<T>({out.data(), pre.data(), x.data(), w.data(), b.data(), N, I, O, G,
                            static_cast<size_t>(I) * O, static_cast<size_t>(O), ldo, WeightLayout::IN_OUT,
                            Activation::GELU});
    ops::LinearBackward p{dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), N, I, O, G,
                          static_cast<size_t>(I) * O, static_cast<size_t>(O), ldo};
    p.dinp_act = Activation::GELU;
    p.dinp_act_saved = saved.data();
    p.dinp_act_dbias = dpb.data();
    cpu::linear_backward<T>(p);
    for (auto* v : {&out, &pre, &dx, &dw, &db, &dpb}) results.push_back(as_vec(*v));
  }
  {  // residual LayerNorm with bias, residual and dropout
    const int N = 19 * scale, C = 77;
    auto x = data(N * C, -2, 3), bias = data(C), res = data(N * C), g = data(C), b = data(C), dout = data(N * C);
    std::vector<T> out(N * C), sum(N * C), mean(N), rstd(N), dx(N * C), dres(N * C), dbias(C), dg(C), db(C);
    cpu::residual_layernorm_forward<T>({out.data(), sum.data(), mean.data(), rstd.data(), x.data(), bias.data(),
                                        res.data(), g.data(), b.data(), N, C, dropout_of(0.1f)});
    cpu::residual_layernorm_backward<T>({dx.data(), dres.data(), dbias.data(), dg.data(), db.data(), dout.data(),
                                         sum.data(), mean.data(), rstd.data(), g.data(), N, C, dropout_of(0.1f)});
    for (auto* v : {&out, &sum, &mean, &rstd, &dx, &dres, &dbias, &dg, &db}) results.push_back(as_vec(*v));
  }
  {  // gelu, tanh
    const size_t n = 3001 * scale;
    auto x = data(n, -5, 5), dout = data(n);
    std::vector<T> g(n), dg(n), t(n), dt(n);
    cpu::gelu_forward<T>(g.data(), x.data(), n);
    cpu::gelu_backward<T>(dg.data(), x.data(), dout.data(), n);
    cpu::tanh_forward<T>(t.data(), x.data(), n);
    cpu::tanh_backward<T>(dt.data(), t.data(), dout.data(), n);
    for (auto* v : {&g, &dg, &t, &dt}) results.push_back(as_vec(*v));
  }
  {  // attention: lengths 1 to S (S = 33 leaves Philox blocks split across rows), filler, dropout
    const int S = 33, heads = 3, D = 16, H = heads * D;
    std::vector<int> lens;
    for (int r = 0; r < 2 * scale; ++r)
      for (int len : {20, 10, 1, 33, 0, 31}) lens.push_back(len);
    const Ids cu = cu_seqlens_of(lens);
    const int N = cu.back() + 7, sequences = static_cast<int>(lens.size());
    auto qkv = data(static_cast<size_t>(N) * 3 * H), dctx = data(static_cast<size_t>(N) * H);
    const size_t ns = cpu::attention_saved_elements(N, S, heads);
    std::vector<T> ctx(N * H), saved(ns), work(ns), dqkv(N * 3 * H);
    cpu::attention_forward<T>({ctx.data(), saved.data(), qkv.data(), cu.data(), N, sequences, S, heads, D,
                               dropout_of(0.1f)});
    cpu::attention_backward<T>({dqkv.data(), work.data(), dctx.data(), ctx.data(), qkv.data(), saved.data(),
                                cu.data(), N, sequences, S, heads, D, dropout_of(0.1f)});
    for (auto* vv : {&ctx, &saved, &dqkv}) results.push_back(as_vec(*vv));
  }
  {  // embeddings, gather, cross-entropy, argmax
    const int N = 50 * scale, C = 24, V = 31, M = 17 * scale, Vout = 1001, ld = 1004;
    Ids ids = random_ids(N, V, rng), types = random_ids(N, 2, rng), pos = random_ids(N, 40, rng);
    Ids rows = random_ids(M, N, rng), labels = random_ids(M, Vout, rng);
    auto word = data(V * C), type = data(2 * C), ptab = data(40 * C), gamma = data(C), beta = data(C),
         dout = data(N * C), dg = data(M * C), logits = data(M * ld, -8, 8);
    const Vec lw = random_vec(M, rng, 0, 1), cw = random_vec(M, rng, 0, 1);
    const std::vector<float> loss_weight(lw.begin(), lw.end()), count_weight(cw.begin(), cw.end());
    std::vector<T> out(N * C), sum(N * C), mean(N), rstd(N), scratch(2 * N * C), dword(V * C), dtype(2 * C),
        dpos(40 * C), dgamma(C), dbeta(C), gathered(M * C), dgin(N * C), lse(M), dlogits(M * ld);
    std::vector<int32_t> am(M);
    cpu::embedding_forward<T>({out.data(), sum.data(), mean.data(), rstd.data(), ids.data(), types.data(), pos.data(),
                               word.data(), type.data(), ptab.data(), gamma.data(), beta.data(), N, C,
                               dropout_of(0.1f)});
    cpu::embedding_backward<T>({dword.data(), dtype.data(), dpos.data(), dgamma.data(), dbeta.data(), scratch.data(),
                                dout.data(), sum.data(), mean.data(), rstd.data(), gamma.data(), ids.data(),
                                types.data(), pos.data(), N, C, dropout_of(0.1f)});
    cpu::gather_forward<T>({gathered.data(), out.data(), rows.data(), M, C});
    cpu::gather_backward<T>({dgin.data(), dg.data(), rows.data(), M, N, C, false});
    double stats[2] = {0, 0};
    std::vector<double> ce_scratch(kScratchDoubles);
    cpu::cross_entropy_forward<T>({lse.data(), stats, logits.data(), labels.data(), loss_weight.data(),
                                   count_weight.data(), M, Vout, ld},
                                  ce_scratch);
    cpu::cross_entropy_backward<T>({dlogits.data(), logits.data(), lse.data(), labels.data(), loss_weight.data(), M,
                                    Vout, ld, 0.5f});
    cpu::argmax_rows<T>(am.data(), logits.data(), M, Vout, ld);
    for (auto* v : {&out, &sum, &mean, &rstd, &dword, &dtype, &dpos, &dgamma, &dbeta, &gathered, &dgin, &lse})
      results.push_back(as_vec(*v));
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < Vout; ++j) results.push_back({static_cast<double>(dlogits[i * ld + j])});
    results.push_back({stats[0], stats[1]});
    results.push_back(Vec(am.begin(), am.end()));
  }
  {  // clip, accumulate and two LAMB stages
    const FlatProblem f({40000 * static_cast<size_t>(scale), 33, 5000}, 4096);
    const std::vector<uint8_t> excluded = {0, 1, 0};
    const std::vector<T> g = random_flat<T>(f, rng, -1, 1);
    std::vector<T> sum = random_flat<T>(f, rng, -1, 1);
    ops::StepScalars s = lamb_scalars(2, 0.01f);
    std::vector<double> scratch(kScratchDoubles);
    cpu::gradient_clip<T>({&s, nullptr, g.data(), f.all()}, scratch);
    cpu::gradient_accumulate<T>({sum.data(), g.data(), &s, f.all(), 0.5f});
    LambState<T> st{random_flat<T>(f, rng, -1, 1), random_flat<T>(f, rng, -0.1, 0.1), random_flat<T>(f, rng, 0, 0.01), {}};
    lamb_ops_step(st, f, sum, &s.clip_scale, excluded, s, false);
    results.push_back({s.grad_norm_sq, s.clip_scale});
    for (auto* v : {&sum, &st.w, &st.m, &st.v}) results.push_back(as_vec(*v));
    results.push_back(st.norms);
  }
  return results;
}

TEST(Precision, FloatInstantiationAgreesWithDouble) {
  const std::vector<Vec> f = run_all_ops<float>(16), d = run_all_ops<double>(16);
  ASSERT_EQ(f.size(), d.size());
  for (size_t r = 0; r < f.size(); ++r) {
    // Scale-aware: fp32 results carry about 1e-7 relative error per operation, summed over ~50 terms.
    double scale = 0;
    for (double x : d[r]) scale = std::max(scale, std::fabs(x));
    ASSERT_EQ(f[r].size(), d[r].size()) << "result " << r;
    int failures = 0;
    for (size_t i = 0; i < f[r].size(); ++i)
      if (!(std::fabs(f[r][i] - d[r][i]) <= 2e-5 * std::max(1.0, scale)) && failures++ < 3)
        ADD_FAILURE() << "result " << r << "[" << i << "]: float " << f[r][i] << ", double " << d[r][i];
  }
}

TEST(Determinism, ResultsDoNotDependOnTheThreadCount) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  // Large enough that every op takes its parallel path.
  const int scale = 16;
  const std::vector<Vec> one = run_all_ops<float>(17, scale);
  omp_set_num_threads(std::max(2, saved));
  const std::vector<Vec> many = run_all_ops<float>(17, scale);
  omp_set_num_threads(saved);
  ASSERT_EQ(one.size(), many.size());
  for (size_t r = 0; r < one.size(); ++r) EXPECT_EQ(one[r], many[r]) << "result " << r;
}

TEST(Determinism, SplitGemmEqualsOneThreadGemm) {
  std::mt19937_64 rng(20);
  const int M = 520, N = 300, K = 257;
  const std::vector<float> a = to_float(random_vec(M * K, rng)), b = to_float(random_vec(K * N, rng));
  std::vector<float> one(M * N), many(M * N), many_t(N * M), one_t(N * M);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  cpu::gemm<float>(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, one.data(), N);
  cpu::gemm<float>(true, true, N, M, K, 1.0f, b.data(), N, a.data(), K, 0.0f, one_t.data(), M);
  omp_set_num_threads(std::max(3, saved));
  cpu::gemm<float>(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, many.data(), N);
  cpu::gemm<float>(true, true, N, M, K, 1.0f, b.data(), N, a.data(), K, 0.0f, many_t.data(), M);
  omp_set_num_threads(saved);
  EXPECT_EQ(one, many);
  EXPECT_EQ(one_t, many_t);  // the short side split too
}

// "cpu" runs cpu::op<float>, "cpu-f64" cpu::op<double>, "cpu-bf16" cpu::op<bf16>, on their own memory.
TEST(CpuBackend, OpsForwardToTheirInstantiationAndMemoryIsHostMemory) {
  std::mt19937_64 rng(18);
  const int N = 9, C = 16;
  const std::vector<float> x = to_float(random_vec(N * C, rng)), g = to_float(random_vec(C, rng)),
                           b = to_float(random_vec(C, rng));
  std::unique_ptr<Backend> cpu = make_cpu_backend(DType::F32, 0);
  EXPECT_EQ(cpu->name(), "cpu");
  EXPECT_EQ(cpu->act_dtype(), DType::F32);
  EXPECT_FALSE(cpu->capabilities().static_shapes);
  EXPECT_FALSE(cpu->capabilities().asynchronous);
  EXPECT_NE(cpu->describe().find("threads"), std::string::npos);
  std::vector<float> out1(N * C), out2(N * C), sum(N * C), m1(N), m2(N), r1(N), r2(N);
  ops::ResidualLayerNormForward p{out1.data(), sum.data(), m1.data(), r1.data(), x.data(), b.data(), x.data(),
                                  g.data(), b.data(), N, C, dropout_of(0.5f)};
  cpu->residual_layernorm_forward(p);
  p.out = out2.data();
  p.mean = m2.data();
  p.rstd = r2.data();
  cpu::residual_layernorm_forward<float>(p);
  EXPECT_EQ(out1, out2);
  EXPECT_EQ(m1, m2);

  std::unique_ptr<Backend> f64 = make_cpu_backend(DType::F64, 0);
  EXPECT_EQ(f64->name(), "cpu-f64");
  EXPECT_EQ(f64->master_dtype(), DType::F64);
  DeviceBuffer a(*f64, 100 * sizeof(double)), c(*f64, 100 * sizeof(float));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 256, 0u);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.as<double>()[i], 0.0) << "zero-filled";
  std::vector<float> host = to_float(random_vec(100, rng)), back(100);
  upload_floats(*f64, a.data(), DType::F64, host.data(), 100);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.as<double>()[i], static_cast<double>(host[i]));
  f64->convert(c.data(), DType::F32, a.data(), DType::F64, 100);
  f64->download(back.data(), c.data(), 100 * sizeof(float));
  f64->synchronize();
  EXPECT_EQ(back, host);
  f64->fill_zero(c.data(), 100 * sizeof(float));
  EXPECT_EQ(c.as<float>()[99], 0.0f);
  EXPECT_THROW(f64->convert(c.data(), DType::BF16, a.data(), DType::F64, 100), InternalError);
  // "cpu-bf16" runs cpu::op<bf16>: bf16 activations and weight copy, fp32 master, its attention buffers in fp32.
  const std::unique_ptr<Backend> bf16 = make_cpu_backend(DType::BF16, 0);
  EXPECT_EQ(bf16->name(), "cpu-bf16");
  EXPECT_EQ(bf16->act_dtype(), DType::BF16);
  EXPECT_EQ(bf16->weight_dtype(), DType::BF16);
  EXPECT_EQ(bf16->master_dtype(), DType::F32);
  EXPECT_EQ(bf16->attention_saved_bytes(256, 4, 128, 12), size_t{12} * 256 * 128 * sizeof(float));
  // The attention buffers hold the largest batch: heads * tokens * max_seqlen probabilities.
  EXPECT_EQ(f64->attention_saved_bytes(256, 4, 128, 12), size_t{12} * 256 * 128 * sizeof(double));
  EXPECT_EQ(cpu->attention_workspace_bytes(256, 4, 128, 12), size_t{12} * 256 * 128 * sizeof(float));
}

}  // namespace
}  // namespace bertperf
