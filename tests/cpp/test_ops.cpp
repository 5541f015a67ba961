// Tests of the CPU op vocabulary (backends/cpu/cpu_ops.h, backends/ops.h).
//
// Three independent oracles:
//  - every backward against central finite differences of its own forward, in fp64, for a scalar
//    loss sum(w * outputs) with random w; gradient buffers start non-zero so accumulation is checked;
//  - every forward against a direct naive formula written here (triple loops, the textbook formulas);
//  - the fp32 instantiation against the fp64 one on the same inputs.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_math.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/ops.h"
#include "core/errors.h"
#include "core/philox.h"

namespace bertperf {
namespace {

using ops::WeightLayout;
using Vec = std::vector<double>;
using Ids = std::vector<int32_t>;

constexpr RngKey kKey{0x1234567890abcdefULL, 7, 3};

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

// Central differences of loss() with respect to every element of every input.
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
      if (err > tolerance * std::max(1.0, std::fabs(numeric)) && failures++ < 5) {
        ADD_FAILURE() << check.name << "[" << i << "]: analytic " << check.analytic[i] << ", numeric "
                      << numeric;
      }
    }
  }
  loss();  // leave the forward outputs of the unperturbed inputs behind
}

// Fills a gradient buffer with random values; the backward must add to them.
Vec prefilled(size_t n, std::mt19937_64& rng) { return random_vec(n, rng, -0.5, 0.5); }

// ---- naive oracles ---------------------------------------------------------------------------------

// out = inp . W (+ bias), W as stored by `layout`.
Vec naive_linear(const Vec& inp, const Vec& w, const Vec* bias, int N, int I, int O, WeightLayout layout) {
  Vec out(static_cast<size_t>(N) * O);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < O; ++o) {
      double s = bias ? (*bias)[o] : 0.0;
      for (int i = 0; i < I; ++i)
        s += inp[n * I + i] * (layout == WeightLayout::IN_OUT ? w[i * O + o] : w[o * I + i]);
      out[n * O + o] = s;
    }
  return out;
}

double naive_gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

// probs (B, A, S, S) before dropout and ctx (B, S, A*D), straight from the definition in ops.h.
void naive_attention(Vec& ctx, Vec& probs, const Vec& q, const Vec& k, const Vec& v, const Ids& seq, int B,
                     int S, int A, int D, float p, RngKey key) {
  const int AD = A * D;
  ctx.assign(static_cast<size_t>(B) * S * AD, 0.0);
  probs.assign(static_cast<size_t>(B) * A * S * S, 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < A; ++h)
      for (int f = 0; f < S; ++f) {
        std::vector<double> score(S);
        for (int t = 0; t < S; ++t) {
          double s = 0;
          for (int d = 0; d < D; ++d) s += q[(b * S + f) * AD + h * D + d] * k[(b * S + t) * AD + h * D + d];
          const int32_t qs = seq[b * S + f], ks = seq[b * S + t];
          const bool hidden = ks == 0 || (qs != 0 && qs != ks);
          score[t] = s / std::sqrt(double(D)) + (hidden ? -10000.0 : 0.0);
        }
        double mx = score[0], sum = 0;
        for (double s : score) mx = std::max(mx, s);
        for (double& s : score) sum += (s = std::exp(s - mx));
        for (int t = 0; t < S; ++t) {
          const size_t flat = ((static_cast<size_t>(b) * A + h) * S + f) * S + t;
          probs[flat] = score[t] / sum;
          const double kept = p > 0 ? (dropout_keep(key, flat, p) ? probs[flat] / (1.0 - p) : 0.0) : probs[flat];
          for (int d = 0; d < D; ++d) ctx[(b * S + f) * AD + h * D + d] += kept * v[(b * S + t) * AD + h * D + d];
        }
      }
}

void expect_near_all(const Vec& got, const Vec& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) > tol * std::max(1.0, std::fabs(want[i])) && failures++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
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

TEST(Linear, ForwardMatchesNaiveBothLayouts) {
  std::mt19937_64 rng(1);
  const int N = 7, I = 5, O = 9;
  for (WeightLayout layout : {WeightLayout::IN_OUT, WeightLayout::OUT_IN}) {
    for (bool with_bias : {true, false}) {
      Vec x = random_vec(N * I, rng), w = random_vec(I * O, rng), bias = random_vec(O, rng), out(N * O, 99.0);
      cpu::linear_forward<double>(out.data(), x.data(), w.data(), with_bias ? bias.data() : nullptr, N, I, O,
                                  layout);
      expect_near_all(out, naive_linear(x, w, with_bias ? &bias : nullptr, N, I, O, layout), 1e-12, "linear");
    }
  }
}

TEST(Linear, GradientsMatchFiniteDifferencesBothLayouts) {
  std::mt19937_64 rng(2);
  const int N = 6, I = 5, O = 7;
  for (WeightLayout layout : {WeightLayout::IN_OUT, WeightLayout::OUT_IN}) {
    SCOPED_TRACE(layout == WeightLayout::IN_OUT ? "IN_OUT" : "OUT_IN");
    Vec x = random_vec(N * I, rng), w = random_vec(I * O, rng), bias = random_vec(O, rng);
    Vec weights = random_vec(N * O, rng), out(N * O);
    auto loss = [&] {
      cpu::linear_forward<double>(out.data(), x.data(), w.data(), bias.data(), N, I, O, layout);
      return dot(weights, out);
    };
    loss();
    const Vec dx0 = prefilled(x.size(), rng), dw0 = prefilled(w.size(), rng), db0 = prefilled(O, rng);
    Vec dx = dx0, dw = dw0, db = db0;
    cpu::linear_backward<double>(dx.data(), dw.data(), db.data(), weights.data(), x.data(), w.data(), N, I, O,
                                 layout);
    expect_gradients_match(loss, {{"inp", &x, minus(dx, dx0)},
                                  {"weight", &w, minus(dw, dw0)},
                                  {"bias", &bias, minus(db, db0)}});
  }
}

TEST(Linear, NullGradientsAreSkippedAndOthersUnchanged) {
  std::mt19937_64 rng(3);
  const int N = 4, I = 3, O = 5;
  Vec x = random_vec(N * I, rng), w = random_vec(I * O, rng), dout = random_vec(N * O, rng);
  Vec dx_all(N * I), dw_all(I * O), db_all(O);
  cpu::linear_backward<double>(dx_all.data(), dw_all.data(), db_all.data(), dout.data(), x.data(), w.data(), N,
                               I, O, WeightLayout::IN_OUT);
  Vec db_only(O);
  cpu::linear_backward<double>(nullptr, nullptr, db_only.data(), dout.data(), x.data(), w.data(), N, I, O,
                               WeightLayout::IN_OUT);
  EXPECT_EQ(db_only, db_all);
  Vec dx_only(N * I);
  cpu::linear_backward<double>(dx_only.data(), nullptr, nullptr, dout.data(), x.data(), w.data(), N, I, O,
                               WeightLayout::IN_OUT);
  EXPECT_EQ(dx_only, dx_all);
}

// ---- embeddings and gather -------------------------------------------------------------------------

TEST(Embedding, ForwardMatchesLookupAndGradientsWithRepeatedIds) {
  std::mt19937_64 rng(4);
  const int N = 11, C = 6, V = 5, T = 2, P = 8;
  Ids ids = random_ids(N, V, rng), types = random_ids(N, T, rng), positions = random_ids(N, P, rng);
  ids[3] = ids[0];  // a repeated id must accumulate both rows
  ids[7] = ids[0];
  Vec word = random_vec(V * C, rng), type = random_vec(T * C, rng), pos = random_vec(P * C, rng);
  Vec weights = random_vec(N * C, rng), out(N * C);
  auto loss = [&] {
    cpu::embedding_forward<double>(out.data(), ids.data(), types.data(), positions.data(), word.data(),
                                   type.data(), pos.data(), N, C);
    return dot(weights, out);
  };
  loss();
  for (int t = 0; t < N; ++t)
    for (int c = 0; c < C; ++c)
      EXPECT_EQ(out[t * C + c], word[ids[t] * C + c] + type[types[t] * C + c] + pos[positions[t] * C + c]);
  const Vec dw0 = prefilled(word.size(), rng), dt0 = prefilled(type.size(), rng), dp0 = prefilled(pos.size(), rng);
  Vec dw = dw0, dt = dt0, dp = dp0;
  cpu::embedding_backward<double>(dw.data(), dt.data(), dp.data(), weights.data(), ids.data(), types.data(),
                                  positions.data(), N, C);
  expect_gradients_match(loss, {{"word", &word, minus(dw, dw0)},
                                {"type", &type, minus(dt, dt0)},
                                {"pos", &pos, minus(dp, dp0)}});
}

TEST(GatherRows, ForwardCopiesAndBackwardAccumulatesRepeatedRows) {
  std::mt19937_64 rng(5);
  const int R = 6, M = 9, C = 5;
  Ids rows = random_ids(M, R, rng);
  rows[4] = rows[1];
  rows[8] = rows[1];
  Vec inp = random_vec(R * C, rng), weights = random_vec(M * C, rng), out(M * C);
  auto loss = [&] {
    cpu::gather_rows_forward<double>(out.data(), inp.data(), rows.data(), M, C);
    return dot(weights, out);
  };
  loss();
  for (int m = 0; m < M; ++m)
    for (int c = 0; c < C; ++c) EXPECT_EQ(out[m * C + c], inp[rows[m] * C + c]);
  const Vec d0 = prefilled(inp.size(), rng);
  Vec d = d0;
  cpu::gather_rows_backward<double>(d.data(), weights.data(), rows.data(), M, C);
  expect_gradients_match(loss, {{"inp", &inp, minus(d, d0)}});
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
  const Vec dx0 = prefilled(x.size(), rng), dg0 = prefilled(C, rng), db0 = prefilled(C, rng);
  Vec dx = dx0, dg = dg0, db = db0;
  cpu::layernorm_backward<double>(dx.data(), dg.data(), db.data(), weights.data(), x.data(), gamma.data(),
                                  mean.data(), rstd.data(), N, C);
  expect_gradients_match(loss, {{"inp", &x, minus(dx, dx0)}, {"gamma", &gamma, minus(dg, dg0)},
                                {"beta", &beta, minus(db, db0)}});
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
  const Vec d0 = prefilled(n, rng);
  Vec d = d0;
  cpu::gelu_backward<double>(d.data(), x.data(), weights.data(), n);
  expect_gradients_match(loss, {{"inp", &x, minus(d, d0)}});
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
  const Vec d0 = prefilled(n, rng);
  Vec d = d0;
  cpu::tanh_backward<double>(d.data(), out.data(), weights.data(), n);
  expect_gradients_match(loss, {{"inp", &x, minus(d, d0)}});
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

TEST(Dropout, MaskIsPhiloxKeepRateAndScaleAreRight) {
  std::mt19937_64 rng(10);
  const size_t n = 100003;  // not a multiple of the Philox block or the chunk
  const float p = 0.1f;
  Vec x = random_vec(n, rng), residual = random_vec(n, rng), out(n);
  cpu::dropout_residual_forward<double>(out.data(), x.data(), residual.data(), n, p, kKey);
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool keep = dropout_keep(kKey, i, p);
    kept += keep;
    ASSERT_NEAR(out[i], (keep ? x[i] / (1.0 - p) : 0.0) + residual[i], 1e-12) << i;
  }
  // Binomial(n, 0.9): five standard deviations is about 474.
  EXPECT_NEAR(static_cast<double>(kept), 0.9 * n, 5 * std::sqrt(n * 0.9 * 0.1));
  // The keep rate really is the Philox stream's: a different step draws a different mask.
  Vec other(n);
  RngKey next = kKey;
  next.step += 1;
  cpu::dropout_residual_forward<double>(other.data(), x.data(), nullptr, n, p, next);
  size_t differ = 0;
  for (size_t i = 0; i < n; ++i) differ += (other[i] == 0) != (out[i] == residual[i]);
  EXPECT_GT(differ, n / 10);
}

TEST(Dropout, GradientsMatchFiniteDifferencesAndZeroProbabilityIsAnAdd) {
  std::mt19937_64 rng(11);
  const size_t n = 1037;
  for (float p : {0.0f, 0.3f}) {
    SCOPED_TRACE(p);
    Vec x = random_vec(n, rng), residual = random_vec(n, rng), weights = random_vec(n, rng), out(n);
    auto loss = [&] {
      cpu::dropout_residual_forward<double>(out.data(), x.data(), residual.data(), n, p, kKey);
      return dot(weights, out);
    };
    loss();
    if (p == 0.0f) {
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(out[i], x[i] + residual[i]);
    }
    const Vec dx0 = prefilled(n, rng), dr0 = prefilled(n, rng);
    Vec dx = dx0, dr = dr0;
    cpu::dropout_residual_backward<double>(dx.data(), dr.data(), weights.data(), n, p, kKey);
    expect_gradients_match(loss, {{"inp", &x, minus(dx, dx0)}, {"residual", &residual, minus(dr, dr0)}});
  }
}

TEST(Dropout, ProbabilityOutsideZeroToOneIsAnError) {
  std::vector<float> x(8, 1.0f), out(8);
  const Ids seq(4, 1);
  for (float p : {1.0f, -0.1f, 1.5f}) {
    EXPECT_THROW(cpu::dropout_residual_forward<float>(out.data(), x.data(), nullptr, 8, p, kKey), InternalError);
    EXPECT_THROW(cpu::dropout_residual_backward<float>(out.data(), nullptr, x.data(), 8, p, kKey), InternalError);
    EXPECT_THROW(cpu::attention_forward<float>(out.data(), x.data(), x.data(), x.data(), x.data(), seq.data(), 1,
                                               2, 1, 2, p, kKey),
                 InternalError);
  }
}

// ---- attention ---------------------------------------------------------------------------------------

struct AttentionCase {
  const char* name;
  int B, S, A, D;
  Ids seq;
  float p;
};

// One packed row: two sequences, then padding.
Ids long_row_seq_ids(int S) {
  Ids seq(S);
  for (int s = 0; s < S; ++s) seq[s] = s < S / 2 ? 1 : (s < S - 7 ? 2 : 0);
  return seq;
}

std::vector<AttentionCase> attention_cases() {
  return {
      {"no padding", 2, 5, 2, 3, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 0.0f},
      {"padding", 2, 6, 2, 3, {1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1}, 0.0f},
      {"packed", 2, 7, 2, 3, {1, 1, 2, 2, 2, 3, 0, 1, 2, 2, 3, 3, 0, 0}, 0.0f},
      {"packed + dropout", 2, 7, 3, 2, {1, 1, 2, 2, 2, 3, 0, 1, 2, 2, 3, 3, 0, 0}, 0.25f},
      // S * S above the forward's dropout tile, so the context is built in several row blocks.
      {"long rows + dropout", 1, 130, 1, 2, long_row_seq_ids(130), 0.1f},
  };
}

TEST(Attention, ForwardMatchesNaiveTripleLoop) {
  std::mt19937_64 rng(12);
  for (const AttentionCase& c : attention_cases()) {
    SCOPED_TRACE(c.name);
    const size_t n = static_cast<size_t>(c.B) * c.S * c.A * c.D;
    Vec q = random_vec(n, rng, -2, 2), k = random_vec(n, rng, -2, 2), v = random_vec(n, rng);
    Vec ctx(n), probs(static_cast<size_t>(c.B) * c.A * c.S * c.S), want_ctx, want_probs;
    cpu::attention_forward<double>(ctx.data(), probs.data(), q.data(), k.data(), v.data(), c.seq.data(), c.B,
                                   c.S, c.A, c.D, c.p, kKey);
    naive_attention(want_ctx, want_probs, q, k, v, c.seq, c.B, c.S, c.A, c.D, c.p, kKey);
    expect_near_all(probs, want_probs, 1e-13, "probs");
    expect_near_all(ctx, want_ctx, 1e-12, "ctx");
  }
}

TEST(Attention, PackedSequencesDoNotSeeEachOther) {
  // Changing the values of sequence 2 of a packed row must leave sequence 1's context unchanged.
  std::mt19937_64 rng(13);
  const int B = 1, S = 8, A = 2, D = 4, AD = A * D;
  const Ids seq = {1, 1, 1, 2, 2, 2, 2, 0};
  const size_t n = S * AD;
  Vec q = random_vec(n, rng), k = random_vec(n, rng), v = random_vec(n, rng);
  std::vector<float> qf = to_float(q), kf = to_float(k), vf = to_float(v), ctx(n), ctx2(n), probs(A * S * S);
  cpu::attention_forward<float>(ctx.data(), probs.data(), qf.data(), kf.data(), vf.data(), seq.data(), B, S, A,
                                D, 0.0f, kKey);
  for (int h = 0; h < A; ++h)
    for (int f = 0; f < 3; ++f)
      for (int t = 3; t < S; ++t) EXPECT_EQ(probs[(h * S + f) * S + t], 0.0f);
  for (int t = 3; t < S; ++t)
    for (int c = 0; c < AD; ++c) {
      vf[t * AD + c] += 10.0f;
      kf[t * AD + c] -= 3.0f;
    }
  cpu::attention_forward<float>(ctx2.data(), probs.data(), qf.data(), kf.data(), vf.data(), seq.data(), B, S, A,
                                D, 0.0f, kKey);
  for (int f = 0; f < 3; ++f)
    for (int c = 0; c < AD; ++c) EXPECT_EQ(ctx[f * AD + c], ctx2[f * AD + c]);
}

TEST(Attention, GradientsMatchFiniteDifferences) {
  std::mt19937_64 rng(14);
  for (const AttentionCase& c : attention_cases()) {
    SCOPED_TRACE(c.name);
    const size_t n = static_cast<size_t>(c.B) * c.S * c.A * c.D, nprobs = static_cast<size_t>(c.B) * c.A * c.S * c.S;
    Vec q = random_vec(n, rng, -2, 2), k = random_vec(n, rng, -2, 2), v = random_vec(n, rng);
    Vec weights = random_vec(n, rng), ctx(n), probs(nprobs), scratch(nprobs, 123.0);
    auto loss = [&] {
      cpu::attention_forward<double>(ctx.data(), probs.data(), q.data(), k.data(), v.data(), c.seq.data(), c.B,
                                     c.S, c.A, c.D, c.p, kKey);
      return dot(weights, ctx);
    };
    loss();
    const Vec dq0 = prefilled(n, rng), dk0 = prefilled(n, rng), dv0 = prefilled(n, rng);
    Vec dq = dq0, dk = dk0, dv = dv0;
    cpu::attention_backward<double>(dq.data(), dk.data(), dv.data(), scratch.data(), weights.data(), probs.data(),
                                    q.data(), k.data(), v.data(), c.B, c.S, c.A, c.D, c.p, kKey);
    expect_gradients_match(loss, {{"q", &q, minus(dq, dq0)}, {"k", &k, minus(dk, dk0)}, {"v", &v, minus(dv, dv0)}});
    // Each gradient alone (the others null) is the same as all three together.
    Vec dv_only(n), dq_only(n);
    cpu::attention_backward<double>(nullptr, nullptr, dv_only.data(), scratch.data(), weights.data(),
                                    probs.data(), q.data(), k.data(), v.data(), c.B, c.S, c.A, c.D, c.p, kKey);
    cpu::attention_backward<double>(dq_only.data(), nullptr, nullptr, scratch.data(), weights.data(),
                                    probs.data(), q.data(), k.data(), v.data(), c.B, c.S, c.A, c.D, c.p, kKey);
    expect_near_all(dv_only, minus(dv, dv0), 1e-14, "dv alone");
    expect_near_all(dq_only, minus(dq, dq0), 1e-14, "dq alone");
  }
}

// ---- cross-entropy -----------------------------------------------------------------------------------

TEST(CrossEntropy, ForwardIsStableLogSoftmaxAndGradientMatches) {
  std::mt19937_64 rng(15);
  const int M = 5, V = 13;
  Vec logits = random_vec(M * V, rng, -3, 3), weights = random_vec(M, rng), losses(M);
  Ids labels = random_ids(M, V, rng);
  auto loss = [&] {
    cpu::cross_entropy_forward<double>(losses.data(), logits.data(), labels.data(), M, V);
    return dot(weights, losses);
  };
  loss();
  for (int i = 0; i < M; ++i) {
    long double sum = 0;
    for (int j = 0; j < V; ++j) sum += std::exp(static_cast<long double>(logits[i * V + j]));
    EXPECT_NEAR(losses[i], static_cast<double>(std::log(sum) - logits[i * V + labels[i]]), 1e-13);
  }
  const Vec d0 = prefilled(logits.size(), rng);
  Vec d = d0;
  cpu::cross_entropy_backward<double>(d.data(), logits.data(), labels.data(), weights.data(), M, V);
  expect_gradients_match(loss, {{"logits", &logits, minus(d, d0)}});
}

TEST(CrossEntropy, LargeLogitsDoNotOverflowInFloat) {
  // Shifting every logit by a constant leaves the loss unchanged; exp(1000) would overflow.
  const int V = 4;
  const std::vector<float> small = {0.5f, -1.0f, 2.0f, 0.25f};
  std::vector<float> big(V);
  for (int j = 0; j < V; ++j) big[j] = small[j] + 1000.0f;
  const Ids label = {2};
  float loss_small = 0, loss_big = 0;
  cpu::cross_entropy_forward<float>(&loss_small, small.data(), label.data(), 1, V);
  cpu::cross_entropy_forward<float>(&loss_big, big.data(), label.data(), 1, V);
  EXPECT_TRUE(std::isfinite(loss_big));
  EXPECT_NEAR(loss_big, loss_small, 1e-4);
}

TEST(CrossEntropy, LabelOutsideVocabularyIsAnError) {
  const std::vector<float> logits(6, 0.0f);
  const Ids labels = {6};
  float loss = 0;
  EXPECT_THROW(cpu::cross_entropy_forward<float>(&loss, logits.data(), labels.data(), 1, 6), InternalError);
}

TEST(Argmax, MatchesAScanOnLongRowsWithTies) {
  // Rows longer than the search block, the maximum repeated at random places, including across
  // block boundaries; the oracle is a plain strict-greater scan.
  std::mt19937_64 rng(21);
  const int M = 40, V = 1000;
  std::vector<float> logits = to_float(random_vec(M * V, rng));
  std::uniform_int_distribution<int> pick(0, V - 1);
  for (int i = 0; i < M; ++i)
    for (int copies = i % 4; copies > 0; --copies) logits[i * V + pick(rng)] = 5.0f;
  logits[3 * V + 255] = logits[3 * V + 256] = 9.0f;
  std::vector<int32_t> out(M);
  cpu::argmax_rows<float>(out.data(), logits.data(), M, V);
  for (int i = 0; i < M; ++i) {
    int best = 0;
    for (int j = 1; j < V; ++j)
      if (logits[i * V + j] > logits[i * V + best]) best = j;
    EXPECT_EQ(out[i], best) << "row " << i;
  }
}

TEST(Argmax, FirstMaximumWins) {
  const std::vector<float> logits = {1, 3, 3, 2,  //
                                     -5, -5, -5, -5,  //
                                     0, 1, 2, 7};
  std::vector<int32_t> out(3);
  cpu::argmax_rows<float>(out.data(), logits.data(), 3, 4);
  EXPECT_EQ(out, (std::vector<int32_t>{1, 0, 3}));
}

// ---- fp32 against fp64, and the ops:: entry points ----------------------------------------------

// Runs every op forward and backward in T on one fixed random problem (odd sizes so the vector
// loops have tails; row counts times `scale`) and returns all outputs and gradients, as doubles.
template <typename T>
std::vector<Vec> run_all_ops(uint64_t seed, int scale = 1) {
  std::mt19937_64 rng(seed);
  auto data = [&](size_t n, double lo = -1, double hi = 1) {
    const Vec d = random_vec(n, rng, lo, hi);
    return std::vector<T>(d.begin(), d.end());
  };
  auto as_vec = [](const std::vector<T>& v) { return Vec(v.begin(), v.end()); };
  std::vector<Vec> results;
  {  // linear, both layouts
    const int N = 37 * scale, I = 45, O = 29;
    for (WeightLayout layout : {WeightLayout::IN_OUT, WeightLayout::OUT_IN}) {
      auto x = data(N * I), w = data(I * O), b = data(O), dout = data(N * O);
      std::vector<T> out(N * O), dx(N * I), dw(I * O), db(O);
      cpu::linear_forward<T>(out.data(), x.data(), w.data(), b.data(), N, I, O, layout);
      cpu::linear_backward<T>(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), N, I, O, layout);
      for (auto* v : {&out, &dx, &dw, &db}) results.push_back(as_vec(*v));
    }
  }
  {  // layernorm
    const int N = 19 * scale, C = 77;
    auto x = data(N * C, -2, 3), g = data(C), b = data(C), dout = data(N * C);
    std::vector<T> out(N * C), mean(N), rstd(N), dx(N * C), dg(C), db(C);
    cpu::layernorm_forward<T>(out.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), N, C);
    cpu::layernorm_backward<T>(dx.data(), dg.data(), db.data(), dout.data(), x.data(), g.data(), mean.data(),
                               rstd.data(), N, C);
    for (auto* v : {&out, &dx, &dg, &db}) results.push_back(as_vec(*v));
  }
  {  // gelu, tanh, dropout
    const size_t n = 3001 * scale;
    auto x = data(n, -5, 5), r = data(n), dout = data(n);
    std::vector<T> g(n), dg(n), t(n), dt(n), d(n), dd(n), dr(n);
    cpu::gelu_forward<T>(g.data(), x.data(), n);
    cpu::gelu_backward<T>(dg.data(), x.data(), dout.data(), n);
    cpu::tanh_forward<T>(t.data(), x.data(), n);
    cpu::tanh_backward<T>(dt.data(), t.data(), dout.data(), n);
    cpu::dropout_residual_forward<T>(d.data(), x.data(), r.data(), n, 0.1f, kKey);
    cpu::dropout_residual_backward<T>(dd.data(), dr.data(), dout.data(), n, 0.1f, kKey);
    for (auto* v : {&g, &dg, &t, &dt, &d, &dd, &dr}) results.push_back(as_vec(*v));
  }
  {  // attention, packed rows with padding and dropout; S = 33 leaves Philox blocks split across rows
    const int B = 2 * scale, S = 33, A = 3, D = 16;
    const size_t n = B * S * A * D, np = B * A * S * S;
    Ids seq(B * S);
    for (int b = 0; b < B; b += 2) {
      for (int s = 0; s < S; ++s) seq[b * S + s] = s < 20 ? 1 : (s < 30 ? 2 : 0);
      for (int s = 0; s < S; ++s) seq[(b + 1) * S + s] = s < 31 ? 1 : 0;
    }
    auto q = data(n), k = data(n), v = data(n), dctx = data(n);
    std::vector<T> ctx(n), probs(np), scratch(np), dq(n), dk(n), dv(n);
    cpu::attention_forward<T>(ctx.data(), probs.data(), q.data(), k.data(), v.data(), seq.data(), B, S, A, D,
                              0.1f, kKey);
    cpu::attention_backward<T>(dq.data(), dk.data(), dv.data(), scratch.data(), dctx.data(), probs.data(),
                               q.data(), k.data(), v.data(), B, S, A, D, 0.1f, kKey);
    for (auto* vv : {&ctx, &probs, &dq, &dk, &dv}) results.push_back(as_vec(*vv));
  }
  {  // embeddings, gather, cross-entropy, argmax
    const int N = 50 * scale, C = 24, V = 31, M = 17 * scale, Vout = 1001;
    Ids ids = random_ids(N, V, rng), types = random_ids(N, 2, rng), pos = random_ids(N, 40, rng);
    Ids rows = random_ids(M, N, rng), labels = random_ids(M, Vout, rng);
    auto word = data(V * C), type = data(2 * C), ptab = data(40 * C), dout = data(N * C), dg = data(M * C);
    auto logits = data(M * Vout, -8, 8), dl = data(M);
    std::vector<T> out(N * C), dword(V * C), dtype(2 * C), dpos(40 * C), gathered(M * C), dgin(N * C), losses(M),
        dlogits(M * Vout);
    std::vector<int32_t> am(M);
    cpu::embedding_forward<T>(out.data(), ids.data(), types.data(), pos.data(), word.data(), type.data(),
                              ptab.data(), N, C);
    cpu::embedding_backward<T>(dword.data(), dtype.data(), dpos.data(), dout.data(), ids.data(), types.data(),
                               pos.data(), N, C);
    cpu::gather_rows_forward<T>(gathered.data(), out.data(), rows.data(), M, C);
    cpu::gather_rows_backward<T>(dgin.data(), dg.data(), rows.data(), M, C);
    cpu::cross_entropy_forward<T>(losses.data(), logits.data(), labels.data(), M, Vout);
    cpu::cross_entropy_backward<T>(dlogits.data(), logits.data(), labels.data(), dl.data(), M, Vout);
    cpu::argmax_rows<T>(am.data(), logits.data(), M, Vout);
    for (auto* v : {&out, &dword, &dtype, &dpos, &gathered, &dgin, &losses, &dlogits}) results.push_back(as_vec(*v));
    results.push_back(Vec(am.begin(), am.end()));
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
      if (std::fabs(f[r][i] - d[r][i]) > 2e-5 * std::max(1.0, scale) && failures++ < 3)
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
  EXPECT_EQ(one, many);      // split by rows
  EXPECT_EQ(one_t, many_t);  // split by columns
}

TEST(OpsEntryPoints, ForwardToTheFloatInstantiation) {
  std::mt19937_64 rng(18);
  const int N = 9, C = 16;
  const std::vector<float> x = to_float(random_vec(N * C, rng)), g = to_float(random_vec(C, rng)),
                           b = to_float(random_vec(C, rng));
  std::vector<float> out1(N * C), out2(N * C), m1(N), m2(N), r1(N), r2(N);
  ops::layernorm_forward(out1.data(), m1.data(), r1.data(), x.data(), g.data(), b.data(), N, C);
  cpu::layernorm_forward<float>(out2.data(), m2.data(), r2.data(), x.data(), g.data(), b.data(), N, C);
  EXPECT_EQ(out1, out2);
  std::vector<float> y1(N * C), y2(N * C);
  ops::dropout_residual_forward(y1.data(), x.data(), nullptr, x.size(), 0.5f, kKey);
  cpu::dropout_residual_forward<float>(y2.data(), x.data(), nullptr, x.size(), 0.5f, kKey);
  EXPECT_EQ(y1, y2);
}

}  // namespace
}  // namespace bertperf
