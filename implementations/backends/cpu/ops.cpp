// bertperf::ops on the CPU: the fp32 op vocabulary of ops.h, forwarded to the templates of
// cpu_ops.h instantiated for float.
#include "backends/ops.h"

#include "backends/cpu/cpu_ops.h"

namespace bertperf::ops {

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int I, int O,
                    WeightLayout layout) {
  cpu::linear_forward<float>(out, inp, weight, bias, N, I, O, layout);
}
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int I, int O, WeightLayout layout) {
  cpu::linear_backward<float>(dinp, dweight, dbias, dout, inp, weight, N, I, O, layout);
}

void embedding_forward(float* out, const int32_t* ids, const int32_t* types, const int32_t* positions,
                       const float* word, const float* type, const float* pos, int N, int C) {
  cpu::embedding_forward<float>(out, ids, types, positions, word, type, pos, N, C);
}
void embedding_backward(float* dword, float* dtype, float* dpos, const float* dout, const int32_t* ids,
                        const int32_t* types, const int32_t* positions, int N, int C) {
  cpu::embedding_backward<float>(dword, dtype, dpos, dout, ids, types, positions, N, C);
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* gamma,
                       const float* beta, int N, int C) {
  cpu::layernorm_forward<float>(out, mean, rstd, inp, gamma, beta, N, C);
}
void layernorm_backward(float* dinp, float* dgamma, float* dbeta, const float* dout, const float* inp,
                        const float* gamma, const float* mean, const float* rstd, int N, int C) {
  cpu::layernorm_backward<float>(dinp, dgamma, dbeta, dout, inp, gamma, mean, rstd, N, C);
}

void gelu_forward(float* out, const float* inp, size_t n) { cpu::gelu_forward<float>(out, inp, n); }
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  cpu::gelu_backward<float>(dinp, inp, dout, n);
}
void tanh_forward(float* out, const float* inp, size_t n) { cpu::tanh_forward<float>(out, inp, n); }
void tanh_backward(float* dinp, const float* out, const float* dout, size_t n) {
  cpu::tanh_backward<float>(dinp, out, dout, n);
}

void dropout_residual_forward(float* out, const float* inp, const float* residual, size_t n, float drop_prob,
                              RngKey key) {
  cpu::dropout_residual_forward<float>(out, inp, residual, n, drop_prob, key);
}
void dropout_residual_backward(float* dinp, float* dresidual, const float* dout, size_t n, float drop_prob,
                               RngKey key) {
  cpu::dropout_residual_backward<float>(dinp, dresidual, dout, n, drop_prob, key);
}

void attention_forward(float* ctx, float* probs, const float* q, const float* k, const float* v,
                       const int32_t* seq_id, int B, int S, int A, int D, float drop_prob, RngKey key) {
  cpu::attention_forward<float>(ctx, probs, q, k, v, seq_id, B, S, A, D, drop_prob, key);
}
void attention_backward(float* dq, float* dk, float* dv, float* scratch, const float* dctx, const float* probs,
                        const float* q, const float* k, const float* v, int B, int S, int A, int D,
                        float drop_prob, RngKey key) {
  cpu::attention_backward<float>(dq, dk, dv, scratch, dctx, probs, q, k, v, B, S, A, D, drop_prob, key);
}

void gather_rows_forward(float* out, const float* inp, const int32_t* rows, int M, int C) {
  cpu::gather_rows_forward<float>(out, inp, rows, M, C);
}
void gather_rows_backward(float* dinp, const float* dout, const int32_t* rows, int M, int C) {
  cpu::gather_rows_backward<float>(dinp, dout, rows, M, C);
}

void cross_entropy_forward(float* losses, const float* logits, const int32_t* labels, int M, int V) {
  cpu::cross_entropy_forward<float>(losses, logits, labels, M, V);
}
void cross_entropy_backward(float* dlogits, const float* logits, const int32_t* labels, const float* dlosses,
                            int M, int V) {
  cpu::cross_entropy_backward<float>(dlogits, logits, labels, dlosses, M, V);
}
void argmax_rows(int32_t* out, const float* logits, int M, int V) { cpu::argmax_rows<float>(out, logits, M, V); }

}  // namespace bertperf::ops
