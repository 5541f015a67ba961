// The op-cost recorder (op_cost.h).
#include "backends/op_cost.h"

#include <sys/mman.h>

#include <cstring>

#include "core/errors.h"

namespace bertperf {

namespace {

class NoEvent final : public Event {};

const char* activation_name(ops::Activation act) {
  switch (act) {
    case ops::Activation::NONE: return "";
    case ops::Activation::GELU: return " gelu";
    case ops::Activation::TANH: return " tanh";
  }
  return "";
}

// 2 m n k for each head's products over every sequence: `per_sequence` products of L x L x D a head.
double attention_flops(const int32_t* cu_seqlens, int sequences, int heads, int head_dim, int products) {
  double sum = 0;
  for (int s = 0; s < sequences; ++s) {
    const double L = cu_seqlens[s + 1] - cu_seqlens[s];
    sum += products * 2.0 * L * L * head_dim * heads;
  }
  return sum;
}

}  // namespace

OpCostRecorder::OpCostRecorder(DType act, DType weight, DType master)
    : act_(act), weight_(weight), master_(master), a_(double(dtype_size(act))), w_(double(dtype_size(weight))),
      f_(double(dtype_size(master))) {
  capabilities_.static_shapes = true;
  capabilities_.host_memory = true;
}

OpCostRecorder::~OpCostRecorder() {
  for (const auto& [p, bytes] : mapped_) munmap(p, bytes);
}

std::string OpCostRecorder::describe() const {
  return cat("op-cost recorder: runs nothing, notes each op's FLOPs and bytes at ", dtype_name(act_), " activations, ",
             dtype_name(weight_), " weights, ", dtype_name(master_), " master weights");
}

void* OpCostRecorder::allocate(size_t bytes, MemoryKind) {
  const size_t size = bytes == 0 ? 1 : bytes;
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw_input("op-cost recorder", cat("cannot map ", bytes, " bytes of memory"));
  mapped_[p] = size;
  return p;
}

void OpCostRecorder::deallocate(void* p, MemoryKind) noexcept {
  const auto it = mapped_.find(p);
  if (it == mapped_.end()) return;
  munmap(p, it->second);
  mapped_.erase(it);
}

void OpCostRecorder::upload(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void OpCostRecorder::download(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

void OpCostRecorder::copy(void* dst, const void* src, size_t bytes) {
  std::memmove(dst, src, bytes);
  note("copy", cat(bytes, " bytes"), 0, 2.0 * double(bytes));
}

void OpCostRecorder::fill_zero(void*, size_t bytes) { note("fill_zero", cat(bytes, " bytes"), 0, double(bytes)); }

void OpCostRecorder::convert(void*, DType dst_type, const void*, DType src_type, size_t n) {
  note("convert", cat(n, " ", dtype_name(src_type), " to ", dtype_name(dst_type)), 0,
       double(n) * double(dtype_size(src_type) + dtype_size(dst_type)));
}

std::unique_ptr<Event> OpCostRecorder::make_event() { return std::make_unique<NoEvent>(); }

size_t OpCostRecorder::attention_saved_bytes(int, int sequences, int max_seqlen, int heads) const {
  return size_t(sequences) * heads * max_seqlen * sizeof(float);  // a fused kernel's log-sum-exp a row
}

size_t OpCostRecorder::attention_workspace_bytes(int, int sequences, int max_seqlen, int heads) const {
  return size_t(sequences) * heads * max_seqlen * sizeof(float);  // its D_i = dctx . ctx a row
}

void OpCostRecorder::note(const char* name, std::string shape, double flops, double bytes, bool encoder_linear,
                          double fp8_bytes) {
  costs_.push_back({name, std::move(shape), flops, bytes, encoder_linear, fp8_bytes < 0 ? bytes : fp8_bytes});
}

double OpCostRecorder::chunk_elements(const ops::Chunks& c) const {
  double n = 0;
  for (int i = c.first; i < c.first + c.count; ++i) n += double(c.end[i] - c.begin[i]);
  return n;
}

// ---- the ops ----------------------------------------------------------------------------------------------------

void OpCostRecorder::linear_forward(const ops::LinearForward& p) {
  const double N = p.N, I = p.I, O = double(p.O) * p.groups;
  // with the GEMM's operands (inp, weight) of `a` and `w` bytes an element
  auto bytes = [&](double a, double w) {
    return N * I * a + I * O * w + (p.bias ? O * w_ : 0) + N * O * a_ * (p.pre ? 2 : 1);
  };
  note(ops::op_name(ops::Op::LINEAR_FORWARD), cat("N=", p.N, " I=", p.I, " O=", p.groups > 1 ? cat(p.groups, "x") : "",
                                                  p.O, activation_name(p.act)),
       2 * N * I * O, bytes(a_, w_), p.layout == ops::WeightLayout::IN_OUT && p.N == tokens_, bytes(1, 1));
}

void OpCostRecorder::linear_backward(const ops::LinearBackward& p) {
  const double N = p.N, I = p.I, O = double(p.O) * p.groups;
  const double flops = (p.dinp ? 2 * N * I * O : 0) + (p.dweight ? 2 * N * I * O : 0);
  // with the GEMMs' operands (dout, inp, weight) of `a` and `w` bytes an element
  auto bytes = [&](double a, double w) {
    double sum = 0;
    if (p.dinp) {  // dinp = dout . W^T (* act'(saved)): dout and W read, dinp written (and read, accumulating)
      sum += N * O * a + I * O * w + N * I * a_ * (p.accumulate_dinp ? 2 : 1);
      if (p.dinp_act != ops::Activation::NONE) sum += N * I * a_ + (p.dinp_act_dbias ? 2 * I * f_ : 0);
    }
    if (p.dweight) sum += N * O * a + N * I * a + 2 * I * O * f_;  // dweight += inp^T . dout, dbias in its epilogue
    if (p.dbias) sum += 2 * O * f_ + (p.dweight ? 0 : N * O * a_);
    return sum;
  };
  note(ops::op_name(ops::Op::LINEAR_BACKWARD), cat("N=", p.N, " I=", p.I, " O=", p.groups > 1 ? cat(p.groups, "x") : "",
                                                   p.O, activation_name(p.dinp_act)),
       flops, bytes(a_, w_), p.layout == ops::WeightLayout::IN_OUT && p.N == tokens_, bytes(1, 1));
}

void OpCostRecorder::activation_backward(const ops::ActivationBackward& p) {
  note(ops::op_name(ops::Op::ACTIVATION_BACKWARD), cat("n=", p.n, activation_name(p.act)), 0, 3.0 * double(p.n) * a_);
}

void OpCostRecorder::embedding_forward(const ops::EmbeddingForward& p) {
  tokens_ = p.N;
  const double N = p.N, C = p.C;
  // three table rows a token, the ids, the sum and the output, the statistics
  note(ops::op_name(ops::Op::EMBEDDING_FORWARD), cat("N=", p.N, " C=", p.C), 0,
       3 * N * C * w_ + 3 * N * 4 + 2 * N * C * a_ + 2 * N * f_);
}

void OpCostRecorder::embedding_backward(const ops::EmbeddingBackward& p) {
  const double N = p.N, C = p.C;
  const int tables = (p.dword ? 1 : 0) + (p.dtype ? 1 : 0) + (p.dpos ? 1 : 0);
  // dout and the saved sum and statistics read, each token's rows of the gradient tables accumulated
  note(ops::op_name(ops::Op::EMBEDDING_BACKWARD), cat("N=", p.N, " C=", p.C), 0,
       2 * N * C * a_ + 2 * N * f_ + 3 * N * 4 + tables * 2 * N * C * f_ + 4 * C * f_);
}

void OpCostRecorder::residual_layernorm_forward(const ops::ResidualLayerNormForward& p) {
  const double N = p.N, C = p.C;
  note(ops::op_name(ops::Op::RESIDUAL_LAYERNORM_FORWARD), cat("N=", p.N, " C=", p.C, p.residual ? " residual" : ""), 0,
       N * C * a_ * (1 + (p.residual ? 1 : 0) + 1 + (p.sum ? 1 : 0)) + 2 * N * f_ + 3 * C * w_);
}

void OpCostRecorder::residual_layernorm_backward(const ops::ResidualLayerNormBackward& p) {
  const double N = p.N, C = p.C;
  note(ops::op_name(ops::Op::RESIDUAL_LAYERNORM_BACKWARD),
       cat("N=", p.N, " C=", p.C, p.dresidual ? " residual" : ""), 0,
       N * C * a_ * (2 + 1 + (p.dresidual ? 1 : 0)) + 2 * N * f_ + C * w_ + 2 * C * f_ * (2 + (p.dbias ? 1 : 0)));
}

void OpCostRecorder::attention_forward(const ops::AttentionForward& p) {
  const double N = p.N, H = double(p.heads) * p.head_dim;
  note(ops::op_name(ops::Op::ATTENTION_FORWARD), cat("N=", p.N, " heads=", p.heads, " D=", p.head_dim),
       attention_flops(p.cu_seqlens, p.sequences, p.heads, p.head_dim, 2),
       3 * N * H * a_ + N * H * a_ + N * p.heads * 4.0);
}

void OpCostRecorder::attention_backward(const ops::AttentionBackward& p) {
  const double N = p.N, H = double(p.heads) * p.head_dim;
  // qkv, dctx, ctx and the saved statistics read, dqkv written, D_i written and read
  note(ops::op_name(ops::Op::ATTENTION_BACKWARD), cat("N=", p.N, " heads=", p.heads, " D=", p.head_dim),
       attention_flops(p.cu_seqlens, p.sequences, p.heads, p.head_dim, 5),
       3 * N * H * a_ + 2 * N * H * a_ + 3 * N * H * a_ + 3 * N * p.heads * 4.0);
}

void OpCostRecorder::gather_forward(const ops::GatherForward& p) {
  const double M = p.M, C = p.C;
  note(ops::op_name(ops::Op::GATHER_FORWARD), cat("M=", p.M, " C=", p.C), 0, 2 * M * C * a_ + M * 4);
}

void OpCostRecorder::gather_backward(const ops::GatherBackward& p) {
  const double M = p.M, N = p.N, C = p.C;
  // accumulating: the gathered rows read and written; else every row of dinp written
  note(ops::op_name(ops::Op::GATHER_BACKWARD), cat("M=", p.M, " N=", p.N, " C=", p.C), 0,
       M * C * a_ + M * 4 + (p.accumulate ? 2 * M * C * a_ : N * C * a_));
}

void OpCostRecorder::cross_entropy_forward(const ops::CrossEntropyForward& p) {
  const double M = p.M, V = p.V;
  note(ops::op_name(ops::Op::CROSS_ENTROPY_FORWARD), cat("M=", p.M, " V=", p.V), 0, M * V * a_ + M * (f_ + 12));
}

void OpCostRecorder::cross_entropy_backward(const ops::CrossEntropyBackward& p) {
  const double M = p.M, V = p.V;
  note(ops::op_name(ops::Op::CROSS_ENTROPY_BACKWARD), cat("M=", p.M, " V=", p.V), 0, 2 * M * V * a_ + M * (f_ + 8));
}

void OpCostRecorder::gradient_clip(const ops::GradientClip& p) {
  const double n = chunk_elements(p.chunks);
  note(ops::op_name(ops::Op::GRADIENT_CLIP), cat(size_t(n), " elements"), 0, n * f_);
}

void OpCostRecorder::gradient_clip_finish(const ops::GradientClipFinish&) {
  note(ops::op_name(ops::Op::GRADIENT_CLIP_FINISH), "", 0, sizeof(ops::StepScalars));
}

void OpCostRecorder::gradient_accumulate(const ops::GradientAccumulate& p) {
  const double n = chunk_elements(p.chunks);
  note(ops::op_name(ops::Op::GRADIENT_ACCUMULATE), cat(size_t(n), " elements"), 0, 3 * n * f_);
}

void OpCostRecorder::lamb_moments(const ops::LambMoments& p) {
  const double n = chunk_elements(p.chunks);
  // gradient, master weights, m and v read; m and v written (u is recomputed by the second stage)
  note(ops::op_name(ops::Op::LAMB_MOMENTS), cat(size_t(n), " elements"), 0, 6 * n * f_);
}

void OpCostRecorder::lamb_apply(const ops::LambApply& p) {
  const double n = chunk_elements(p.chunks);
  // master weights, m and v read; master weights (and the weight copy) written
  note(ops::op_name(ops::Op::LAMB_APPLY), cat(size_t(n), " elements"), 0, 4 * n * f_ + (p.weights ? n * w_ : 0));
}

void OpCostRecorder::fp8_scale_update(const ops::Fp8ScaleUpdate& p) {
  // the amax history read and shifted, the scales read and written (f32)
  const double n = double(p.count);
  note(ops::op_name(ops::Op::FP8_SCALE_UPDATE), cat(p.count, " scales"), 0, 4.0 * n * (2.0 * p.history_len + 2.0));
}

void OpCostRecorder::schedule_step(const ops::ScheduleStep&) {
  note(ops::op_name(ops::Op::SCHEDULE_STEP), "", 0, sizeof(ops::StepScalars));
}

void OpCostRecorder::record_step(const ops::RecordStep&) {
  // the sums and the scalars read, a record and the count written
  note(ops::op_name(ops::Op::RECORD_STEP), "", 0,
       ops::kRecordSums * 8.0 + sizeof(ops::StepScalars) + sizeof(ops::StepRecord));
}

}  // namespace bertperf
