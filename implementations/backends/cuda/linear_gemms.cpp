// The GEMMs of the linear ops in cuBLASLt's column-major terms (linear.h). Host code only, so the layouts can be
// checked without a GPU (tests/cpp/test_cuda_linear_gemms.cpp runs them through a reference GEMM).
//
// Row-major X (R, C) is column-major X^T (C, R) with the same leading dimension, so
//   forward   out^T (O, N) = W' (O, I) . inp^T (I, N): A is the weight (IN_OUT: stored (O, I), ld O; OUT_IN: stored
//             (I, O), ld I, transposed), B is inp (I, N), ld I; one GEMM per group, into column block g of out.
//   dinp      dinp^T (I, N) = sum_g W_g'' (I, O) . dout_g^T (O, N): IN_OUT's weight transposed, OUT_IN's as stored.
//   dweight   IN_OUT: dW^T (O, I) += dout_g^T (O, N) . inp (N, I); OUT_IN: dW^T (I, O) += inp^T (I, N) . dout_g (N, O).
// With FP8 operands the same products read the copies of linear.h's Fp8Operands, every A transposed and no B.
#include "backends/cuda/linear.h"

#include "backends/fp8.h"

#include <type_traits>
#include <vector>

namespace bertperf::cuda {

size_t cuda_type_size(cudaDataType_t type) {
  switch (type) {
    case CUDA_R_64F: return 8;
    case CUDA_R_32F: return 4;
    case CUDA_R_16BF: case CUDA_R_16F: return 2;
    default: return 1;  // FP8
  }
}

namespace {

template <typename P>
P* offset(P* p, size_t elements, cudaDataType_t type) {
  using Byte = std::conditional_t<std::is_const_v<P>, const char, char>;
  return p ? reinterpret_cast<P*>(reinterpret_cast<Byte*>(p) + elements * cuda_type_size(type)) : nullptr;
}

// The inverse scale of `operand` (fp8.h's Fp8Operand).
const float* inverse_scale(const Fp8Operands& f, int operand) { return f.inv_scale ? f.inv_scale + operand : nullptr; }

}  // namespace

std::vector<Gemm> linear_forward_gemms(const ops::LinearForward& p, bool lt_gelu, const LinearDtypes& t,
                                       const Fp8Operands* fp8) {
  const int N = p.N, I = p.I, O = p.O, G = p.groups;
  const int ldo = p.ldo ? p.ldo : G * O;
  const bool out_in = p.layout == ops::WeightLayout::OUT_IN;
  std::vector<Gemm> gemms;
  for (int k = 0; k < G; ++k) {
    Gemm g;
    g.m = O;
    g.n = N;
    g.k = I;
    g.A = offset(p.weight, k * p.weight_stride, t.weight);
    g.lda = out_in ? I : O;
    g.trans_a = out_in;
    g.type_a = t.weight;
    g.B = p.inp;
    g.ldb = I;
    g.type_b = t.act;
    if (fp8) {
      g.A = offset(fp8->weight_oi, static_cast<size_t>(k) * I * O, fp8->forward);
      g.lda = I;
      g.trans_a = true;
      g.type_a = fp8->forward;
      g.B = fp8->inp;
      g.type_b = fp8->forward;
      g.scale_a = inverse_scale(*fp8, FP8_WEIGHT);
      g.scale_b = inverse_scale(*fp8, FP8_INPUT);
    }
    g.ldd = ldo;
    g.type_d = t.act;
    g.bias = offset(p.bias, k * p.bias_stride, t.weight);
    g.type_bias = t.weight;
    const size_t column = static_cast<size_t>(k) * O;
    if (lt_gelu) {
      g.D = offset(p.out, column, t.act);
      g.aux = offset(p.pre, column, t.act);
      g.ld_aux = ldo;
      g.epilogue = p.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    } else {
      g.D = offset(p.act == ops::Activation::GELU ? p.pre : p.out, column, t.act);
      g.epilogue = p.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    }
    gemms.push_back(g);
  }
  return gemms;
}

std::vector<Gemm> linear_dinp_gemms(const ops::LinearBackward& p, bool lt_dgelu, const LinearDtypes& t,
                                    const Fp8Operands* fp8) {
  const int N = p.N, I = p.I, O = p.O, G = p.groups;
  const int ldo = p.ldo ? p.ldo : G * O;
  const bool out_in = p.layout == ops::WeightLayout::OUT_IN;
  std::vector<Gemm> gemms;
  for (int k = 0; k < G; ++k) {
    Gemm g;
    g.m = I;
    g.n = N;
    g.k = O;
    g.A = offset(p.weight, k * p.weight_stride, t.weight);
    g.lda = out_in ? I : O;
    g.trans_a = !out_in;
    g.type_a = t.weight;
    g.B = offset(p.dout, static_cast<size_t>(k) * O, t.act);
    g.ldb = ldo;
    g.type_b = t.act;
    if (fp8) {
      g.A = offset(fp8->weight_io, static_cast<size_t>(k) * I * O, fp8->forward);
      g.lda = O;
      g.trans_a = true;
      g.type_a = fp8->forward;
      g.B = offset(fp8->dout, static_cast<size_t>(k) * O, fp8->gradient);
      g.ldb = G * O;
      g.type_b = fp8->gradient;
      g.scale_a = inverse_scale(*fp8, FP8_WEIGHT);
      g.scale_b = inverse_scale(*fp8, FP8_GRAD);
    }
    g.D = p.dinp;
    g.ldd = I;
    g.type_d = t.act;
    g.accumulate = k > 0 || p.accumulate_dinp;
    if (lt_dgelu) {
      g.epilogue = CUBLASLT_EPILOGUE_DGELU;
      g.aux = const_cast<void*>(p.dinp_act_saved);
      g.ld_aux = I;
    }
    gemms.push_back(g);
  }
  return gemms;
}

std::vector<Gemm> linear_dweight_gemms(const ops::LinearBackward& p, const LinearDtypes& t, const Fp8Operands* fp8) {
  const int N = p.N, I = p.I, O = p.O, G = p.groups;
  const int ldo = p.ldo ? p.ldo : G * O;
  const bool out_in = p.layout == ops::WeightLayout::OUT_IN;
  std::vector<Gemm> gemms;
  if (!p.dweight) return gemms;
  for (int k = 0; k < G; ++k) {
    const void* dout_g = offset(p.dout, static_cast<size_t>(k) * O, t.act);
    Gemm g;
    g.k = N;
    g.type_a = t.act;
    g.type_b = t.act;
    g.type_d = t.master;
    g.accumulate = true;
    g.D = offset(p.dweight, k * p.weight_stride, t.master);
    g.trans_b = true;
    if (out_in) {
      g.m = I;
      g.n = O;
      g.A = p.inp;
      g.lda = I;
      g.B = dout_g;
      g.ldb = ldo;
      g.ldd = I;
    } else {
      g.m = O;
      g.n = I;
      g.A = dout_g;
      g.lda = ldo;
      g.B = p.inp;
      g.ldb = I;
      g.ldd = O;
    }
    if (fp8) {  // the same products, TN: the transposed copies of dout and inp
      const void* dout_t = offset(fp8->dout_t, static_cast<size_t>(k) * O * N, fp8->gradient);
      g.A = out_in ? fp8->inp_t : dout_t;
      g.B = out_in ? dout_t : fp8->inp_t;
      g.type_a = out_in ? fp8->forward : fp8->gradient;
      g.type_b = out_in ? fp8->gradient : fp8->forward;
      g.lda = N;
      g.ldb = N;
      g.trans_a = true;
      g.trans_b = false;
      g.scale_a = inverse_scale(*fp8, out_in ? FP8_INPUT : FP8_GRAD);
      g.scale_b = inverse_scale(*fp8, out_in ? FP8_GRAD : FP8_INPUT);
    }
    gemms.push_back(g);
  }
  return gemms;
}

}  // namespace bertperf::cuda
