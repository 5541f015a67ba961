// The CUDA linear layers' GEMMs (backends/cuda/linear_gemms.cpp), checked without a GPU: each GEMM the CUDA
// backend would hand cuBLASLt (column-major, its transposes, leading dimensions, group offsets, epilogues with
// their bias and aux matrices, accumulation) is run by a reference GEMM here in fp64, and the result is compared
// with the CPU backend's fp64 linear ops on the same inputs. The FP8 GEMMs are checked the same way on copies laid out
// as linear.h's Fp8Operands says (scaled by powers of two, so fp64 stays exact), and each must be one Hopper's FP8
// GEMMs take: A transposed, B not, never two E5M2 operands. What this cannot check is cuBLASLt itself (and its
// GELU formula) and the cast kernels that make the copies: the backend-conformance test does that on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/linear.h"
#include "backends/fp8.h"
#include "backends/kernel_math.h"

namespace bertperf {
namespace {

using cuda::Gemm;
using ops::Activation;
using ops::WeightLayout;
using Vec = std::vector<double>;

const cuda::LinearDtypes kF64{CUDA_R_64F, CUDA_R_64F, CUDA_R_64F};

struct StdTanh {
  double operator()(double x) const { return std::tanh(x); }
};

// cuBLASLt's semantics, column-major: D (m, n) = epilogue(scale_a scale_b op(A) . op(B)) (+ D when accumulating),
// batch 1.
void reference_gemm(const Gemm& g) {
  ASSERT_EQ(g.batch, 1);
  const double* A = static_cast<const double*>(g.A);
  const double* B = static_cast<const double*>(g.B);
  double* D = static_cast<double*>(g.D);
  const double* bias = static_cast<const double*>(g.bias);
  double* aux = static_cast<double*>(g.aux);
  for (int j = 0; j < g.n; ++j) {
    for (int i = 0; i < g.m; ++i) {
      double acc = 0;
      for (int l = 0; l < g.k; ++l) {
        const double a = g.trans_a ? A[l + static_cast<size_t>(i) * g.lda] : A[i + static_cast<size_t>(l) * g.lda];
        const double b = g.trans_b ? B[j + static_cast<size_t>(l) * g.ldb] : B[l + static_cast<size_t>(j) * g.ldb];
        acc += a * b;
      }
      if (g.scale_a) acc *= *g.scale_a;
      if (g.scale_b) acc *= *g.scale_b;
      double v = acc;
      const size_t at_aux = i + static_cast<size_t>(j) * g.ld_aux;
      switch (g.epilogue) {
        case CUBLASLT_EPILOGUE_DEFAULT: break;
        case CUBLASLT_EPILOGUE_BIAS: v = acc + bias[i]; break;
        case CUBLASLT_EPILOGUE_GELU_AUX: aux[at_aux] = acc; v = kmath::gelu(acc, StdTanh{}); break;
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
          aux[at_aux] = acc + bias[i];
          v = kmath::gelu(acc + bias[i], StdTanh{});
          break;
        case CUBLASLT_EPILOGUE_DGELU: v = acc * kmath::gelu_grad(aux[at_aux], StdTanh{}); break;
        default: FAIL() << "epilogue " << static_cast<int>(g.epilogue) << " has no reference here";
      }
      double& d = D[i + static_cast<size_t>(j) * g.ldd];
      d = g.accumulate ? d + v : v;
    }
  }
}

struct Shape {
  int N, I, O, groups, ldo;
  WeightLayout layout;
  Activation act;
  bool bias;
};

std::vector<Shape> shapes() {
  return {
      {7, 5, 3, 1, 3, WeightLayout::IN_OUT, Activation::NONE, true},
      {6, 4, 5, 1, 5, WeightLayout::OUT_IN, Activation::NONE, false},
      {5, 6, 4, 3, 13, WeightLayout::IN_OUT, Activation::NONE, true},  // fused QKV into wider rows
      {4, 3, 8, 1, 8, WeightLayout::IN_OUT, Activation::GELU, true},
      {4, 3, 8, 1, 10, WeightLayout::IN_OUT, Activation::GELU, false},
      {3, 6, 6, 1, 6, WeightLayout::IN_OUT, Activation::TANH, true},
      {5, 4, 7, 1, 9, WeightLayout::OUT_IN, Activation::NONE, true},   // a padded decoder row
  };
}

Vec random(std::mt19937_64& rng, size_t n) {
  std::uniform_real_distribution<double> d(-1, 1);
  Vec v(n);
  for (double& x : v) x = d(rng);
  return v;
}

void expect_near(const Vec& got, const Vec& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << "[" << i << "] is written, the CPU leaves it";
      continue;
    }
    EXPECT_NEAR(got[i], want[i], 1e-12) << what << "[" << i << "]";
  }
}

TEST(CudaLinearGemms, ForwardMatchesTheCpuLinear) {
  auto cpu = make_cpu_backend(DType::F64, 1);
  std::mt19937_64 rng(5);
  for (const Shape& s : shapes()) {
    for (bool lt_gelu : {false, true}) {
      if (lt_gelu && s.act != Activation::GELU) continue;
      SCOPED_TRACE(testing::Message() << "N " << s.N << " I " << s.I << " O " << s.O << " x" << s.groups << " ldo "
                                      << s.ldo << " act " << static_cast<int>(s.act) << " lt_gelu " << lt_gelu);
      const size_t ws = static_cast<size_t>(s.I) * s.O;
      const Vec x = random(rng, static_cast<size_t>(s.N) * s.I), w = random(rng, ws * s.groups),
                b = random(rng, static_cast<size_t>(s.O) * s.groups);
      const size_t n_out = static_cast<size_t>(s.N) * s.ldo;
      Vec out_ref(n_out, NAN), pre_ref(n_out, NAN), out(n_out, NAN), pre(n_out, NAN);
      const bool gelu = s.act == Activation::GELU;
      ops::LinearForward p{out_ref.data(), gelu ? pre_ref.data() : nullptr, x.data(), w.data(),
                           s.bias ? b.data() : nullptr, s.N, s.I, s.O, s.groups, ws, static_cast<size_t>(s.O), s.ldo,
                           s.layout, s.act};
      cpu->linear_forward(p);
      p.out = out.data();
      p.pre = gelu ? pre.data() : nullptr;
      for (const Gemm& g : cuda::linear_forward_gemms(p, lt_gelu, kF64)) reference_gemm(g);
      // What linear_forward's kernels do after the GEMMs.
      for (int r = 0; r < s.N; ++r)
        for (int c = 0; c < s.groups * s.O; ++c) {
          const size_t at = static_cast<size_t>(r) * s.ldo + c;
          if (gelu && !lt_gelu) out[at] = kmath::gelu(pre[at], StdTanh{});
          if (s.act == Activation::TANH) out[at] = std::tanh(out[at]);
        }
      expect_near(out, out_ref, "out");
      if (gelu) expect_near(pre, pre_ref, "pre");
    }
  }
}

TEST(CudaLinearGemms, BackwardMatchesTheCpuLinear) {
  auto cpu = make_cpu_backend(DType::F64, 1);
  std::mt19937_64 rng(6);
  for (const Shape& s : shapes()) {
    for (int variant = 0; variant < 4; ++variant) {
      // 0: plain; 1: dinp accumulated; 2: GELU backward fused, own kernel; 3: the same through cuBLASLt's DGELU.
      const bool accumulate = variant == 1;
      const Activation dinp_act = variant >= 2 ? Activation::GELU : Activation::NONE;
      const bool lt_dgelu = variant == 3;
      if (lt_dgelu && s.groups != 1) continue;
      SCOPED_TRACE(testing::Message() << "N " << s.N << " I " << s.I << " O " << s.O << " x" << s.groups << " ldo "
                                      << s.ldo << " variant " << variant);
      const size_t ws = static_cast<size_t>(s.I) * s.O, NI = static_cast<size_t>(s.N) * s.I;
      const Vec dout = random(rng, static_cast<size_t>(s.N) * s.ldo), x = random(rng, NI),
                w = random(rng, ws * s.groups), saved = random(rng, NI), dinp0 = random(rng, NI),
                dw0 = random(rng, ws * s.groups);
      Vec dinp_ref = accumulate ? dinp0 : Vec(NI, NAN), dw_ref = dw0, dinp = dinp_ref, dw = dw0;
      ops::LinearBackward p{dinp_ref.data(), dw_ref.data(), nullptr, dout.data(), x.data(), w.data(), s.N, s.I, s.O,
                            s.groups, ws, static_cast<size_t>(s.O), s.ldo, s.layout, accumulate};
      p.dinp_act = dinp_act;
      p.dinp_act_saved = dinp_act != Activation::NONE ? saved.data() : nullptr;
      cpu->linear_backward(p);
      p.dinp = dinp.data();
      p.dweight = dw.data();
      for (const Gemm& g : cuda::linear_dinp_gemms(p, lt_dgelu, kF64)) reference_gemm(g);
      if (dinp_act == Activation::GELU && !lt_dgelu)
        for (size_t i = 0; i < NI; ++i) dinp[i] *= kmath::gelu_grad(saved[i], StdTanh{});
      for (const Gemm& g : cuda::linear_dweight_gemms(p, kF64)) reference_gemm(g);
      expect_near(dinp, dinp_ref, "dinp");
      expect_near(dw, dw_ref, "dweight");
    }
  }
}

// An FP8 linear op's copies in fp64 (linear.h Fp8Operands), each operand scaled by its scale, and the inverse scales.
struct Fp8Copies {
  Vec inp, inp_t, weight_oi, weight_io, dout, dout_t;
  float inv_scale[kFp8Operands] = {1 / 4.0f, 1 / 0.5f, 1 / 8.0f};  // powers of two: every product stays exact
  cuda::Fp8Operands operands() const {
    return {inp.data(), inp_t.data(), weight_oi.data(), weight_io.data(), dout.data(), dout_t.data(), inv_scale,
            CUDA_R_64F, CUDA_R_64F};
  }
};

Fp8Copies fp8_copies(const Shape& s, const Vec& x, const Vec& w, const Vec& dout) {
  Fp8Copies c;
  const size_t N = s.N, I = s.I, O = s.O, G = s.groups, ws = I * O;
  const double si = 1 / c.inv_scale[FP8_INPUT], sw = 1 / c.inv_scale[FP8_WEIGHT], sg = 1 / c.inv_scale[FP8_GRAD];
  c.inp.resize(N * I);
  c.inp_t.resize(I * N);
  for (size_t n = 0; n < N; ++n)
    for (size_t i = 0; i < I; ++i) c.inp[n * I + i] = c.inp_t[i * N + n] = x[n * I + i] * si;
  c.weight_oi.resize(G * ws);
  c.weight_io.resize(G * ws);
  for (size_t g = 0; g < G; ++g)
    for (size_t i = 0; i < I; ++i)
      for (size_t o = 0; o < O; ++o) {
        const double v = s.layout == WeightLayout::IN_OUT ? w[g * ws + i * O + o] : w[g * ws + o * I + i];
        c.weight_oi[g * ws + o * I + i] = c.weight_io[g * ws + i * O + o] = v * sw;
      }
  if (!dout.empty()) {
    c.dout.resize(N * G * O);
    c.dout_t.resize(G * O * N);
    for (size_t n = 0; n < N; ++n)
      for (size_t col = 0; col < G * O; ++col)
        c.dout[n * G * O + col] = c.dout_t[col * N + n] = dout[n * s.ldo + col] * sg;
  }
  return c;
}

// The GEMMs the CUDA backend hands cuBLASLt for FP8 are ones its FP8 kernels take, with the types of the recipe.
void expect_hopper_fp8(const std::vector<Gemm>& gemms, const char* what) {
  for (const Gemm& g : gemms) {
    EXPECT_TRUE(g.trans_a && !g.trans_b) << what << ": FP8 GEMMs take A transposed and B not";
    EXPECT_FALSE(g.type_a == CUDA_R_8F_E5M2 && g.type_b == CUDA_R_8F_E5M2) << what << ": no E5M2 x E5M2 FP8 GEMM";
    EXPECT_TRUE(g.scale_a && g.scale_b) << what << ": both operands' inverse scales";
    for (cudaDataType_t t : {g.type_a, g.type_b})
      EXPECT_TRUE(t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2) << what;
  }
}

TEST(CudaLinearGemms, Fp8GemmsOnTheirCopiesMatchTheCpuLinear) {
  auto cpu = make_cpu_backend(DType::F64, 1);
  std::mt19937_64 rng(7);
  for (const Shape& s : shapes()) {
    if (s.act == Activation::TANH) continue;  // not an encoder linear: never in FP8
    SCOPED_TRACE(testing::Message() << "N " << s.N << " I " << s.I << " O " << s.O << " x" << s.groups << " ldo "
                                    << s.ldo);
    const size_t ws = static_cast<size_t>(s.I) * s.O, NI = static_cast<size_t>(s.N) * s.I;
    const size_t n_out = static_cast<size_t>(s.N) * s.ldo;
    const Vec x = random(rng, NI), w = random(rng, ws * s.groups), b = random(rng, static_cast<size_t>(s.O) * s.groups),
              dout = random(rng, n_out), dw0 = random(rng, ws * s.groups);
    const Fp8Copies copies = fp8_copies(s, x, w, dout);
    const cuda::Fp8Operands f = copies.operands();
    const bool gelu = s.act == Activation::GELU;

    // Forward, with cuBLASLt's epilogues as without FP8.
    Vec out_ref(n_out, NAN), pre_ref(n_out, NAN), out(n_out, NAN), pre(n_out, NAN);
    ops::LinearForward fw{out_ref.data(), gelu ? pre_ref.data() : nullptr, x.data(), w.data(),
                          s.bias ? b.data() : nullptr, s.N, s.I, s.O, s.groups, ws, static_cast<size_t>(s.O), s.ldo,
                          s.layout, s.act};
    cpu->linear_forward(fw);
    fw.out = out.data();
    fw.pre = gelu ? pre.data() : nullptr;
    const bool lt_gelu = gelu && s.groups == 1;
    for (const Gemm& g : cuda::linear_forward_gemms(fw, lt_gelu, kF64, &f)) reference_gemm(g);
    if (gelu && !lt_gelu)
      for (size_t i = 0; i < n_out; ++i) out[i] = kmath::gelu(pre[i], StdTanh{});
    expect_near(out, out_ref, "FP8 out");
    if (gelu) expect_near(pre, pre_ref, "FP8 pre");

    // Backward: dinp and dweight (accumulated onto dw0).
    Vec dinp_ref(NI, NAN), dinp(NI, NAN), dw_ref = dw0, dw = dw0;
    ops::LinearBackward bw{dinp_ref.data(), dw_ref.data(), nullptr, dout.data(), x.data(), w.data(), s.N, s.I, s.O,
                           s.groups, ws, static_cast<size_t>(s.O), s.ldo, s.layout, false};
    cpu->linear_backward(bw);
    bw.dinp = dinp.data();
    bw.dweight = dw.data();
    for (const Gemm& g : cuda::linear_dinp_gemms(bw, false, kF64, &f)) reference_gemm(g);
    for (const Gemm& g : cuda::linear_dweight_gemms(bw, kF64, &f)) reference_gemm(g);
    expect_near(dinp, dinp_ref, "FP8 dinp");
    expect_near(dw, dw_ref, "FP8 dweight");

    // With the recipe's types, every one of them is a GEMM Hopper's FP8 kernels take.
    cuda::Fp8Operands real = f;
    real.forward = CUDA_R_8F_E4M3;
    real.gradient = CUDA_R_8F_E5M2;
    const cuda::LinearDtypes bf16;
    expect_hopper_fp8(cuda::linear_forward_gemms(fw, lt_gelu, bf16, &real), "forward");
    expect_hopper_fp8(cuda::linear_dinp_gemms(bw, false, bf16, &real), "dinp");
    expect_hopper_fp8(cuda::linear_dweight_gemms(bw, bf16, &real), "dweight");
  }
}

}  // namespace
}  // namespace bertperf
