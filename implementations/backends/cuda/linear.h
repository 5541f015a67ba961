// Linear layers on the GPU (ops::LinearForward / LinearBackward) over cuBLASLt GEMMs in bf16 with fp32
// accumulation, and the GEMM wrapper under them: one cuBLASLt plan (descriptors and the heuristic's algorithm)
// per shape, chosen on first use and cached, so a step's GEMMs cost no heuristic calls after the first step.
//
// Epilogues: BIAS in the forward; GELU_AUX_BIAS (gelu(x . W + b) with the pre-activation saved as the aux matrix)
// for the FFN up-projection, and DGELU (the GELU derivative applied from the aux matrix) for the backward of
// the layer feeding it. Where cuBLASLt has no algorithm with a GELU epilogue, the GEMM runs without it and this
// backend's GELU kernel follows (said once on stderr); where it has none with the bias epilogue, the bias is
// written into the output and the GEMM adds its product to it (one rounding, as the epilogue's; said once too). cuBLASLt's GELU is the tanh form (it is what PyTorch's
// use_gelu fusion, compared with gelu(approximate="tanh"), and NVIDIA's BERT builds rely on; the cuBLASLt docs do
// not name the formula), and the conformance test compares it with the CPU's kmath::gelu. The backend option
// "gelu": "kernel" replaces both with this backend's own kernels over kmath::gelu and kmath::gelu_grad. Bias
// gradients are this backend's own deterministic column sums (ops.h accumulates them in fp32; cuBLASLt's BGRAD
// epilogues overwrite, in the bias type).
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cuda/cuda_context.h"
#include "backends/cuda/scratch.h"
#include "backends/ops.h"

namespace bertperf::cuda {

// One GEMM in cuBLASLt's column-major terms: D (m, n) = op(A) (m, k) . op(B) (k, n) (+ D when accumulate), with
// a data type per operand (bf16 today; FP8 operands need only their types and the scale pointers), `batch`
// products at the given element strides (a stride of 0 shares an operand), and an epilogue with its bias (length
// m, per batch at bias_stride) and aux matrix (m, n) at ld_aux.
struct Gemm {
  int m = 0, n = 0, k = 0;
  const void* A = nullptr; int lda = 0; bool trans_a = false; cudaDataType_t type_a = CUDA_R_16BF;
  const void* B = nullptr; int ldb = 0; bool trans_b = false; cudaDataType_t type_b = CUDA_R_16BF;
  void* D = nullptr; int ldd = 0; cudaDataType_t type_d = CUDA_R_16BF;
  bool accumulate = false;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr; cudaDataType_t type_bias = CUDA_R_16BF; int64_t bias_stride = 0;
  void* aux = nullptr; int ld_aux = 0;
  int batch = 1; int64_t stride_a = 0, stride_b = 0, stride_d = 0;
  // FP8: per-tensor scales of A, B and D (device fp32), null for none.
  const float* scale_a = nullptr; const float* scale_b = nullptr; const float* scale_d = nullptr;
};

// Runs GEMMs through cuBLASLt plans made on a shape's first call, and owns the GEMMs' workspace. A plan comes from
// cuBLASLt's heuristic, asked for its best algorithm within the usual workspace (32 MiB on Hopper, 4 MiB before);
// when it has none, asked again for up to kWideRequest algorithms within kWideWorkspace times that workspace, the
// first taken and the workspace grown to what it needs (said once on stderr). A GEMM with no algorithm either way
// is remembered as such: plannable() says so, run() throws.
class GemmRunner {
 public:
  static constexpr int kWideRequest = 16;
  static constexpr size_t kWideWorkspace = 4;

  explicit GemmRunner(const CudaContext& ctx);
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  // Whether cuBLASLt has an algorithm for g (asking its heuristic on the first call of g's shape).
  bool plannable(CudaContext& ctx, const Gemm& g);
  void run(CudaContext& ctx, const Gemm& g);
  size_t plans() const { return plans_.size(); }
  // One line on stderr, the first time for g's shape: a GEMM that ran another way than asked.
  void note_once(const Gemm& g, const std::string& message);

 private:
  struct Plan {
    bool ok = false;
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::vector<int64_t>;
  static Key key_of(const Gemm& g);
  Plan& plan_for(CudaContext& ctx, const Gemm& g);
  std::map<Key, Plan> plans_;
  std::set<Key> noted_;
  DeviceScratch workspace_;
};

// The element types of a linear op's operands: A (activations), W (weights), F (weight gradients).
struct LinearDtypes {
  cudaDataType_t act = CUDA_R_16BF, weight = CUDA_R_16BF, master = CUDA_R_32F;
};
size_t cuda_type_size(cudaDataType_t type);

// The FP8 operands of a linear op whose precision has a scale (ops.h GemmPrecision, backends/fp8.h): copies of its
// operands quantized with their scales, each laid out for Hopper's FP8 GEMMs, which take A transposed and B not
// ("TN" in cuBLASLt's column-major terms), so some copies are transposed. Row-major, per group g at g * I * O
// (weights) or g * O (columns of dout) or g * O * N (rows of dout_t):
//   forward   out^T = (weight_oi)^T' . inp        A: weight_oi (O, I) per group; B: inp (N, I)
//   dinp      dinp^T = (weight_io)^T' . dout^T     A: weight_io (I, O) per group; B: dout (N, G * O)
//   dweight   IN_OUT: dW^T = dout_t' . inp_t       A: dout_t (G * O, N);  B: inp_t (I, N)
//             OUT_IN: dW^T = inp_t' . dout_t       A: inp_t (I, N);       B: dout_t (G * O, N)
// (X' is the transpose cuBLASLt applies to A.) Each GEMM reads the inverses of its operands' scales as cuBLASLt's A
// and B scale pointers, so D = (1/s_a)(1/s_b) A.B in the op's own output type, as the CPU twin scales its fp32 sum.
struct Fp8Operands {
  const void* inp = nullptr;
  const void* inp_t = nullptr;
  const void* weight_oi = nullptr;
  const void* weight_io = nullptr;
  const void* dout = nullptr;
  const void* dout_t = nullptr;
  const float* inv_scale = nullptr;  // (kFp8Operands) 1 / s, by fp8.h's Fp8Operand, in device memory
  // The element types of the forward's operands and of the gradient (the host test runs the layouts in fp64).
  cudaDataType_t forward = CUDA_R_8F_E4M3, gradient = CUDA_R_8F_E5M2;
};

// The GEMMs of a linear op, in issue order (linear_gemms.cpp): the forward's (with cuBLASLt's GELU epilogue when
// lt_gelu), the backward's dinp (with its DGELU epilogue when lt_dgelu) and dweight products; with `fp8`, on its
// copies (every GEMM then TN; the output and its epilogue as without).
std::vector<Gemm> linear_forward_gemms(const ops::LinearForward& p, bool lt_gelu, const LinearDtypes& t = {},
                                       const Fp8Operands* fp8 = nullptr);
std::vector<Gemm> linear_dinp_gemms(const ops::LinearBackward& p, bool lt_dgelu, const LinearDtypes& t = {},
                                    const Fp8Operands* fp8 = nullptr);
std::vector<Gemm> linear_dweight_gemms(const ops::LinearBackward& p, const LinearDtypes& t = {},
                                       const Fp8Operands* fp8 = nullptr);

// The linear ops. `own_gelu`: GELU and its derivative in this backend's kernels rather than cuBLASLt's epilogues.
// An op whose precision has a scale runs its GEMMs in FP8: this backend's casts (fp8_cast.h) quantize its operands
// into scratch.fp8 as Fp8Operands lays them out, recording the amaxes the precision asks for (the forward's input
// and weight, the backward's gradient; the backward casts the input and weight again with the forward's scales).
void linear_forward(CudaContext& ctx, GemmRunner& gemm, OpScratch& scratch, bool own_gelu,
                    const ops::LinearForward& p);
void linear_backward(CudaContext& ctx, GemmRunner& gemm, OpScratch& scratch, bool own_gelu,
                     const ops::LinearBackward& p);

}  // namespace bertperf::cuda
