// CUDA linear layers over cuBLASLt (linear.h).
#include "backends/cuda/linear.h"

#include <algorithm>
#include <cstdio>

#include "backends/cuda/elementwise.h"
#include "backends/cuda/fp8_cast.h"
#include "backends/fp8.h"

namespace bertperf::cuda {

namespace {

// The largest power of two (up to 256) dividing a pointer's address: what cuBLASLt's heuristic must assume.
int64_t alignment_of(const void* p) {
  if (!p) return 256;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  int64_t align = 1;
  while (align < 256 && (a & static_cast<uintptr_t>(align)) == 0) align <<= 1;
  return align;
}

void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* value, size_t size) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, value, size));
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int rows, int cols, int ld, int batch, int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, rows, cols, ld));
  if (batch > 1) {
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                  sizeof stride));
  }
  return layout;
}

bool has_aux(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU ||
         e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
bool has_bias(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}

const char* epilogue_name(cublasLtEpilogue_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "none";
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX: return "GELU_AUX";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
    default: return "other";
  }
}

std::string describe_gemm(const Gemm& g) {
  return cat("m ", g.m, " n ", g.n, " k ", g.k, " (lda ", g.lda, ", ldb ", g.ldb, ", ldd ", g.ldd, ", batch ", g.batch,
             ", epilogue ", epilogue_name(g.epilogue), ")");
}

void destroy(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t d) {
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (d) cublasLtMatrixLayoutDestroy(d);
  if (desc) cublasLtMatmulDescDestroy(desc);
}

// cuBLASLt's advice: 32 MiB of workspace on Hopper, 4 MiB before it.
size_t usual_workspace(const CudaContext& ctx) { return ctx.sm >= 90 ? (size_t{32} << 20) : (size_t{4} << 20); }

}  // namespace

GemmRunner::GemmRunner(const CudaContext& ctx) : workspace_({&ctx}, ctx.capture, "cuBLASLt workspace") {}

GemmRunner::~GemmRunner() {
  for (auto& [key, plan] : plans_) destroy(plan.desc, plan.a, plan.b, plan.d);
}

GemmRunner::Key GemmRunner::key_of(const Gemm& g) {
  return {g.m, g.n, g.k, g.lda, g.ldb, g.ldd, g.trans_a, g.trans_b, g.type_a, g.type_b, g.type_d,
          g.accumulate, static_cast<int64_t>(g.epilogue), g.type_bias, g.bias_stride, g.ld_aux, g.batch,
          g.stride_a, g.stride_b, g.stride_d, alignment_of(g.A), alignment_of(g.B), alignment_of(g.D),
          alignment_of(g.bias), alignment_of(g.aux), g.scale_a != nullptr, g.scale_b != nullptr,
          g.scale_d != nullptr};
}

void GemmRunner::note_once(const Gemm& g, const std::string& message) {
  if (noted_.insert(key_of(g)).second) std::fprintf(stderr, "cuda backend: %s\n", message.c_str());
}

GemmRunner::Plan& GemmRunner::plan_for(CudaContext& ctx, const Gemm& g) {
  const Key key = key_of(g);
  auto found = plans_.find(key);
  if (found != plans_.end()) return found->second;
  Plan plan;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &g.epilogue, sizeof g.epilogue);
  if (has_bias(g.epilogue)) {
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &g.type_bias, sizeof g.type_bias);
    if (g.batch > 1) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &g.bias_stride, sizeof g.bias_stride);
  }
  if (has_aux(g.epilogue)) {
    const int64_t ld_aux = g.ld_aux;
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux, sizeof ld_aux);
  }
  // The heuristic reads the bias and aux pointers' alignment from their values (the key holds those alignments).
  if (has_bias(g.epilogue)) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias);
  if (has_aux(g.epilogue)) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux, sizeof g.aux);
  // Operand shapes as stored (before op()).
  plan.a = make_layout(g.type_a, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda, g.batch, g.stride_a);
  plan.b = make_layout(g.type_b, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb, g.batch, g.stride_b);
  plan.d = make_layout(g.type_d, g.m, g.n, g.ldd, g.batch, g.stride_d);

  // The heuristic's algorithms for `count` requested within `workspace` bytes; the first is its choice.
  auto ask = [&](int count, uint64_t workspace, std::vector<cublasLtMatmulHeuristicResult_t>& results) {
    cublasLtMatmulPreference_t pref = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    auto prefer = [&](cublasLtMatmulPreferenceAttributes_t attr, const void* value, size_t size) {
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, value, size));
    };
    const uint32_t align_a = static_cast<uint32_t>(alignment_of(g.A)), align_b = static_cast<uint32_t>(alignment_of(g.B)),
                   align_d = static_cast<uint32_t>(alignment_of(g.D));
    prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace);
    prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a);
    prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b);
    prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof align_d);
    prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof align_d);
    results.assign(static_cast<size_t>(count), cublasLtMatmulHeuristicResult_t{});
    int found_count = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(ctx.lt, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                                                 pref, count, results.data(), &found_count);
    cublasLtMatmulPreferenceDestroy(pref);
    results.resize(status == CUBLAS_STATUS_SUCCESS ? static_cast<size_t>(found_count) : 0);
    return status;
  };
  const size_t usual = usual_workspace(ctx), wide = kWideWorkspace * usual;
  std::vector<cublasLtMatmulHeuristicResult_t> results;
  const cublasStatus_t first = ask(1, usual, results);
  if (results.empty()) {
    ask(kWideRequest, wide, results);
    if (!results.empty()) {
      note_once(g, cat("cuBLASLt's heuristic had no algorithm for the GEMM ", describe_gemm(g), " within ", usual,
                       " bytes of workspace (", cublasLtGetStatusString(first), "); a request for up to ", kWideRequest,
                       " within ", wide, " bytes gave ", results.size(), ", running the first (",
                       results[0].workspaceSize, " bytes of workspace)"));
    }
  }
  if (results.empty()) {  // remembered: the caller may run the op another way
    destroy(plan.desc, plan.a, plan.b, plan.d);
    return plans_.emplace(key, Plan{}).first->second;
  }
  plan.algo = results[0].algo;
  plan.ok = true;
  workspace_.get(std::max(usual, results[0].workspaceSize));
  return plans_.emplace(key, plan).first->second;
}

bool GemmRunner::plannable(CudaContext& ctx, const Gemm& g) { return g.m <= 0 || g.n <= 0 || plan_for(ctx, g).ok; }

void GemmRunner::run(CudaContext& ctx, const Gemm& g) {
  if (g.m <= 0 || g.n <= 0) return;
  Plan& plan = plan_for(ctx, g);
  BERT_CHECK(plan.ok, "cuBLASLt has no algorithm for the GEMM ", describe_gemm(g), ", asked for its best within ",
             usual_workspace(ctx), " bytes of workspace and for up to ", kWideRequest, " within ",
             kWideWorkspace * usual_workspace(ctx));
  // Pointers change from call to call; the rest of the descriptor is the plan's.
  if (has_bias(g.epilogue)) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias);
  if (has_aux(g.epilogue)) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux, sizeof g.aux);
  if (g.scale_a) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g.scale_a, sizeof g.scale_a);
  if (g.scale_b) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g.scale_b, sizeof g.scale_b);
  if (g.scale_d) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &g.scale_d, sizeof g.scale_d);
  const float alpha = 1.0f, beta = g.accumulate ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(ctx.lt, plan.desc, &alpha, g.A, plan.a, g.B, plan.b, &beta, g.D, plan.d, g.D, plan.d,
                              &plan.algo, workspace_.data(), workspace_.bytes(), ctx.stream));
}

namespace {

// An FP8 linear op's working copies (Fp8Operands), carved from the FP8 scratch buffer, each 256-byte aligned as
// cuBLASLt's FP8 GEMMs want: the input and its transpose (N x I), the weight (groups x I x O, in the layout the GEMM
// at hand reads), dout and its transpose (N x groups x O), and the three inverse scales.
struct Fp8Copies {
  uint8_t *inp, *inp_t, *weight, *dout, *dout_t;
  float* inv_scale;

  Fp8Copies(DeviceScratch& buffer, size_t N, size_t I, size_t O, size_t groups) {
    auto up = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
    const size_t ni = up(N * I), w = up(groups * I * O), no = up(N * groups * O);
    auto* base = static_cast<uint8_t*>(buffer.get(2 * ni + w + 2 * no + up(kFp8Operands * sizeof(float))));
    inp = base;
    inp_t = inp + ni;
    weight = inp_t + ni;
    dout = weight + w;
    dout_t = dout + no;
    inv_scale = reinterpret_cast<float*>(dout_t + no);
  }
};

// The weight's groups cast with the weight's scale, each packed at g * I * O, plainly or transposed (I x O rows of
// an IN_OUT weight, O x I of an OUT_IN one, as stored); its amax where `amax`.
void cast_weight(CudaContext& ctx, const void* weight, size_t stride, int groups, int rows, int cols, bool transpose,
                 const ops::GemmPrecision& precision, float* amax, uint8_t* dst, float* inv_scale) {
  for (int g = 0; g < groups; ++g) {
    Fp8Cast c;
    c.src = static_cast<const bf16*>(weight) + g * stride;
    c.ld_src = static_cast<size_t>(cols);
    c.rows = rows;
    c.cols = cols;
    c.scale = precision.scale + FP8_WEIGHT;
    c.format = fp8_type(FP8_WEIGHT);
    (transpose ? c.out_t : c.out) = dst + static_cast<size_t>(g) * rows * cols;
    c.amax = amax;
    c.inv_scale = inv_scale + FP8_WEIGHT;
    fp8_cast(ctx, c);
  }
}

// The input (N x I) cast with its scale into `out` and/or `out_t`; its amax where `amax`.
void cast_input(CudaContext& ctx, const void* inp, int N, int I, const ops::GemmPrecision& precision, float* amax,
                uint8_t* out, uint8_t* out_t, float* inv_scale) {
  Fp8Cast c;
  c.src = inp;
  c.ld_src = static_cast<size_t>(I);
  c.rows = N;
  c.cols = I;
  c.scale = precision.scale + FP8_INPUT;
  c.format = fp8_type(FP8_INPUT);
  c.out = out;
  c.out_t = out_t;
  c.amax = amax;
  c.inv_scale = inv_scale + FP8_INPUT;
  fp8_cast(ctx, c);
}

// cuBLASLt's FP8 GEMMs read one-byte operands in rows of a multiple of 16 bytes: N, I and O multiples of 16 (the
// encoder's sizes are).
void check_fp8_sizes(int N, int I, int O) {
  BERT_CHECK(N % 16 == 0 && I % 16 == 0 && O % 16 == 0, "linear: the GPU's FP8 GEMMs need N, I and O multiples of 16, "
             "got N ", N, ", I ", I, ", O ", O);
}

float* amax_of(const ops::GemmPrecision& precision, int operand) {
  return precision.amax ? precision.amax + operand : nullptr;
}

}  // namespace

void linear_forward(CudaContext& ctx, GemmRunner& gemm, OpScratch& scratch, bool own_gelu,
                    const ops::LinearForward& p) {
  const int N = p.N, O = p.O, G = p.groups;
  const int ldo = p.ldo ? p.ldo : G * O;
  BERT_CHECK(G >= 1 && ldo >= G * O, "linear: ", G, " groups of ", O, " columns in rows of ", ldo);
  BERT_CHECK(p.act != ops::Activation::GELU || p.pre, "linear: GELU needs its pre-activation buffer");
  if (N <= 0) return;
  // FP8: the input and the weight quantized, the weight as (O, I) rows (the GEMMs' A transposed).
  Fp8Operands fp8;
  const Fp8Operands* f = nullptr;
  if (p.precision.scale) {
    check_fp8_sizes(N, p.I, O);
    const Fp8Copies copies(scratch.fp8, N, p.I, O, G);
    cast_input(ctx, p.inp, N, p.I, p.precision, amax_of(p.precision, FP8_INPUT), copies.inp, nullptr,
               copies.inv_scale);
    const bool out_in = p.layout == ops::WeightLayout::OUT_IN;
    cast_weight(ctx, p.weight, p.weight_stride, G, out_in ? O : p.I, out_in ? p.I : O, !out_in, p.precision,
                amax_of(p.precision, FP8_WEIGHT), copies.weight, copies.inv_scale);
    fp8.inp = copies.inp;
    fp8.weight_oi = copies.weight;
    fp8.inv_scale = copies.inv_scale;
    f = &fp8;
  }
  // cuBLASLt's GELU epilogue wants its aux matrix's leading dimension a multiple of 8 and 16-byte aligned.
  bool lt_gelu = p.act == ops::Activation::GELU && !own_gelu && G == 1 && ldo % 8 == 0 && aligned16(p.pre);
  if (lt_gelu) {
    const Gemm fused = linear_forward_gemms(p, true, {}, f).front();
    if (!gemm.plannable(ctx, fused)) {
      lt_gelu = false;
      gemm.note_once(fused, cat("cuBLASLt has no algorithm for the forward GEMM m ", fused.m, " n ", fused.n, " k ",
                                fused.k, " with its GELU epilogue: running it with the bias epilogue alone, then "
                                "GELU in this backend's kernel"));
    }
  }
  // One GEMM per group (the fused QKV is three products of one input into column blocks of one output).
  for (Gemm g : linear_forward_gemms(p, lt_gelu, {}, f)) {
    if (g.epilogue == CUBLASLT_EPILOGUE_BIAS && !gemm.plannable(ctx, g)) {
      // The bias written into the output, then the GEMM without an epilogue adding its product to it: the sum in
      // fp32 and one rounding, as the bias epilogue's.
      BERT_CHECK(g.type_d == CUDA_R_16BF && g.type_bias == CUDA_R_16BF && !g.accumulate && g.batch == 1,
                 "cuBLASLt has no algorithm for the GEMM m ", g.m, " n ", g.n, " k ", g.k, " with its bias epilogue");
      gemm.note_once(g, cat("cuBLASLt has no algorithm for the forward GEMM m ", g.m, " n ", g.n, " k ", g.k,
                            " with its bias epilogue: the bias written into the output first, then the GEMM without "
                            "an epilogue adding to it"));
      broadcast_row(ctx, static_cast<bf16*>(g.D), static_cast<const bf16*>(g.bias), g.n, g.m, g.ldd);
      g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
      g.bias = nullptr;
      g.accumulate = true;
    }
    gemm.run(ctx, g);
  }
  if (p.act == ops::Activation::GELU && !lt_gelu) {
    activation_forward_rows(ctx, static_cast<bf16*>(p.out), static_cast<const bf16*>(p.pre), N, G * O, ldo,
                            ops::Activation::GELU);
  } else if (p.act == ops::Activation::TANH) {
    activation_forward_rows(ctx, static_cast<bf16*>(p.out), static_cast<const bf16*>(p.out), N, G * O, ldo,
                            ops::Activation::TANH);
  }
}

void linear_backward(CudaContext& ctx, GemmRunner& gemm, OpScratch& scratch, bool own_gelu,
                     const ops::LinearBackward& p) {
  const int N = p.N, I = p.I, O = p.O, G = p.groups;
  const int ldo = p.ldo ? p.ldo : G * O;
  BERT_CHECK(G >= 1 && ldo >= G * O, "linear backward: ", G, " groups of ", O, " columns in rows of ", ldo);
  BERT_CHECK(p.dinp_act == ops::Activation::NONE || (!p.accumulate_dinp && p.dinp_act_saved),
             "linear backward: a fused activation backward overwrites dinp and needs its saved tensor");
  if (N <= 0) return;
  const bf16* dout = static_cast<const bf16*>(p.dout);
  // FP8: dout quantized (amax recorded) as rows and as their transpose; the forward's operands again with the
  // forward's scales: the weight as (I, O) rows for dinp, the input transposed for dweight.
  Fp8Operands fp8;
  const Fp8Operands* f = nullptr;
  if (p.precision.scale) {
    check_fp8_sizes(N, I, O);
    const Fp8Copies copies(scratch.fp8, N, I, O, G);
    Fp8Cast c;
    c.src = p.dout;
    c.ld_src = static_cast<size_t>(ldo);
    c.rows = N;
    c.cols = G * O;
    c.scale = p.precision.scale + FP8_GRAD;
    c.format = fp8_type(FP8_GRAD);
    c.out = copies.dout;
    c.out_t = p.dweight ? copies.dout_t : nullptr;
    c.amax = amax_of(p.precision, FP8_GRAD);
    c.inv_scale = copies.inv_scale + FP8_GRAD;
    fp8_cast(ctx, c);
    if (p.dweight) cast_input(ctx, p.inp, N, I, p.precision, nullptr, nullptr, copies.inp_t, copies.inv_scale);
    const bool out_in = p.layout == ops::WeightLayout::OUT_IN;
    if (p.dinp)
      cast_weight(ctx, p.weight, p.weight_stride, G, out_in ? O : I, out_in ? I : O, out_in, p.precision, nullptr,
                  copies.weight, copies.inv_scale);
    fp8.inp_t = copies.inp_t;
    fp8.weight_io = copies.weight;
    fp8.dout = copies.dout;
    fp8.dout_t = copies.dout_t;
    fp8.inv_scale = copies.inv_scale;
    f = &fp8;
  }
  if (p.dinp) {
    bool lt_dgelu = p.dinp_act == ops::Activation::GELU && !own_gelu && G == 1 && I % 8 == 0 &&
                    aligned16(p.dinp_act_saved) && aligned16(p.dinp);
    if (lt_dgelu) {
      const Gemm fused = linear_dinp_gemms(p, true, {}, f).front();
      if (!gemm.plannable(ctx, fused)) {
        lt_dgelu = false;
        gemm.note_once(fused, cat("cuBLASLt has no algorithm for the input-gradient GEMM m ", fused.m, " n ", fused.n,
                                  " k ", fused.k, " with its DGELU epilogue: running it without, then the GELU "
                                  "derivative in this backend's kernel"));
      }
    }
    for (const Gemm& g : linear_dinp_gemms(p, lt_dgelu, {}, f)) gemm.run(ctx, g);
    if (p.dinp_act != ops::Activation::NONE) {
      bf16* dinp = static_cast<bf16*>(p.dinp);
      if (!lt_dgelu)
        activation_backward_rows(ctx, dinp, dinp, static_cast<const bf16*>(p.dinp_act_saved), N, I, I, p.dinp_act);
      if (p.dinp_act_dbias)
        add_column_sums(ctx, scratch.bias_grad, static_cast<float*>(p.dinp_act_dbias), dinp, N, I, I);
    }
  }
  for (const Gemm& g : linear_dweight_gemms(p, {}, f)) gemm.run(ctx, g);
  if (p.dbias) {
    for (int k = 0; k < G; ++k)
      add_column_sums(ctx, scratch.reduce, static_cast<float*>(p.dbias) + k * p.bias_stride,
                      dout + static_cast<size_t>(k) * O, N, O, ldo);
  }
}

}  // namespace bertperf::cuda
