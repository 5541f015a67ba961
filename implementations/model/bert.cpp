// The BERT pretraining model over the op vocabulary (bert.h). Every op runs on the backend; the model only carves
// its arena, sequences the ops and names the buffers. The backward walks the forward in reverse: activation
// gradients are overwritten by the op that first produces them, and the two residual branches of a layer add into
// the gradient the LayerNorm backward wrote (accumulate_dinp), so nothing is ever zeroed here.
#include "model/bert.h"

#include <algorithm>
#include <vector>

#include "backends/fp8.h"
#include "core/errors.h"
#include "model/checkpoint.h"

namespace bertperf {

namespace {

using ops::Activation;
using ops::WeightLayout;

// Dropout sites: one Philox stream per place a mask is drawn, so masks never repeat across sites.
uint32_t site_embedding() { return 0; }
uint32_t site_attention_probs(int layer) { return 1 + 3 * layer; }
uint32_t site_attention_output(int layer) { return 2 + 3 * layer; }
uint32_t site_ffn_output(int layer) { return 3 + 3 * layer; }

// The decoder's logits rows are padded to a multiple of 64 classes, so every row starts aligned.
int padded_vocab(int V) { return (V + 63) / 64 * 64; }

}  // namespace

struct BertModel::Activations {
  struct Layer {
    void* qkv;                          // (N, 3H)
    void* attn_saved;                   // backend-defined
    void* ctx;                          // (N, H)
    void* attn_proj;                    // (N, H) ctx . Wo
    void* attn_sum;                     // (N, H) dropout(attn_proj + bo) + x
    void* attn_mean; void* attn_rstd;   // (N) F
    void* attn_ln;                      // (N, H)
    void* inter_pre;                    // (N, I) attn_ln . Wi + bi
    void* inter;                        // (N, I) gelu
    void* out_proj;                     // (N, H) inter . Wout
    void* out_sum;                      // (N, H) dropout(out_proj + bout) + attn_ln
    void* out_mean; void* out_rstd;     // (N) F
    void* out_ln;                       // (N, H) the layer's output
  };
  void* emb_sum;                        // (N, H)
  void* emb_mean; void* emb_rstd;       // (N) F
  void* emb_out;                        // (N, H) layer 0's input
  std::vector<Layer> layers;
  // NSP head, (Q) = sequences
  void* cls_rows; void* pooled;         // (Q, H)
  void* nsp_logits;                     // (Q, 2), also their gradient after the backward
  void* nsp_lse;                        // (Q) F
  // MLM head, (M) = prediction slots
  void* mlm_rows; void* trans_pre; void* trans_gelu;  // (M, H)
  void* trans_mean; void* trans_rstd;                 // (M) F
  void* trans_ln;                                     // (M, H)
  void* mlm_logits;                                   // (M, Vp), also their gradient after the backward
  void* mlm_lse;                                      // (M) F
  double* stats;                                      // (4) f64
  // Backward working memory, shared by every layer.
  void* d_seq;                          // (N, H) gradient of the current layer's output
  void* d_x;                            // (N, H) gradient of its input
  void* d_a;                            // (2, N, H): d_a and d_mid, contiguous (the embedding backward's scratch)
  void* d_mid;
  void* d_ctx;                          // (N, H)
  void* d_qkv;                          // (N, 3H)
  void* d_inter;                        // (N, I)
  void* attn_workspace;
  void* d_head_a; void* d_head_b;       // (max(M, Q), H)
  // FP8 (a backend with an FP8 recipe): per encoder GEMM (layer-major: QKV, attention output, FFN up, FFN down) the
  // scales of its three operands and their amax history (ops.h: GemmPrecision, Fp8ScaleUpdate); kept across steps.
  float* fp8_scale = nullptr;           // (fp8_tensors) f32
  float* fp8_history = nullptr;         // (H, fp8_tensors) f32
  int fp8_tensors = 0;

  // Carves every buffer from `a`; run once on a measuring arena to size the real one.
  void carve(Arena& a, const Backend& backend, const BertConfig& c, BatchCapacity cap) {
    const size_t A = dtype_size(backend.act_dtype()), F = dtype_size(backend.master_dtype());
    const size_t N = size_t(cap.tokens), H = c.hidden_size, I = c.intermediate_size, M = cap.predictions,
                 Q = cap.sequences, Vp = padded_vocab(c.vocab_size);
    auto act = [&](size_t count) { return a.take_bytes(count * A); };
    auto fp = [&](size_t count) { return a.take_bytes(count * F); };
    emb_sum = act(N * H);
    emb_mean = fp(N);
    emb_rstd = fp(N);
    emb_out = act(N * H);
    layers.resize(c.num_hidden_layers);
    const size_t saved = backend.attention_saved_bytes(cap.tokens, cap.sequences, cap.max_seqlen,
                                                       c.num_attention_heads);
    for (Layer& l : layers) {
      l.qkv = act(N * 3 * H);
      l.attn_saved = a.take_bytes(saved);
      l.ctx = act(N * H);
      l.attn_proj = act(N * H);
      l.attn_sum = act(N * H);
      l.attn_mean = fp(N);
      l.attn_rstd = fp(N);
      l.attn_ln = act(N * H);
      l.inter_pre = act(N * I);
      l.inter = act(N * I);
      l.out_proj = act(N * H);
      l.out_sum = act(N * H);
      l.out_mean = fp(N);
      l.out_rstd = fp(N);
      l.out_ln = act(N * H);
    }
    cls_rows = act(Q * H);
    pooled = act(Q * H);
    nsp_logits = act(Q * 2);
    nsp_lse = fp(Q);
    mlm_rows = act(M * H);
    trans_pre = act(M * H);
    trans_gelu = act(M * H);
    trans_mean = fp(M);
    trans_rstd = fp(M);
    trans_ln = act(M * H);
    mlm_logits = act(M * Vp);
    mlm_lse = fp(M);
    stats = a.take<double>(4);
    d_seq = act(N * H);
    d_x = act(N * H);
    d_a = act(2 * N * H);
    d_mid = d_a ? static_cast<unsigned char*>(d_a) + N * H * A : nullptr;
    d_ctx = act(N * H);
    d_qkv = act(N * 3 * H);
    d_inter = act(N * I);
    attn_workspace = a.take_bytes(backend.attention_workspace_bytes(cap.tokens, cap.sequences, cap.max_seqlen,
                                                                    c.num_attention_heads));
    const size_t heads = std::max(M, Q);
    d_head_a = act(heads * H);
    d_head_b = act(heads * H);
    if (const Fp8Recipe* fp8 = backend.fp8_recipe()) {
      fp8_tensors = c.num_hidden_layers * kFp8Gemms * kFp8Operands;
      fp8_scale = a.take<float>(fp8_tensors);
      fp8_history = a.take<float>(static_cast<size_t>(fp8->history) * fp8_tensors);
    }
  }

  // The encoder's FP8 GEMMs, per layer.
  static constexpr int kFp8Gemms = 4;
  enum Fp8Gemm { QKV = 0, ATTENTION_OUTPUT = 1, FFN_UP = 2, FFN_DOWN = 3 };
  // GEMM `gemm` of layer `layer` at its scales, recording its amaxes where `record`; the backend's own precision
  // where it has no FP8 recipe.
  ops::GemmPrecision fp8(int layer, Fp8Gemm gemm, bool record) const {
    if (!fp8_scale) return {};
    const size_t at = static_cast<size_t>(layer * kFp8Gemms + gemm) * kFp8Operands;
    return {fp8_scale + at, record ? fp8_history + at : nullptr};
  }
};

BertModel::BertModel(Backend& backend, const BertConfig& config, const TensorTable& table, BatchCapacity capacity)
    : backend_(backend),
      config_(config),
      capacity_(capacity),
      offsets_(bert_offsets(table, config)),
      table_elements_(table.total_elements()),
      acts_(std::make_unique<Activations>()) {
  BERT_CHECK(capacity.tokens > 0 && capacity.sequences > 0 && capacity.predictions > 0 && capacity.max_seqlen > 0,
             "BertModel needs a positive batch capacity");
  BERT_CHECK(capacity.max_seqlen <= config.max_position_embeddings, "seq_len ", capacity.max_seqlen,
             " exceeds max_position_embeddings ", config.max_position_embeddings);
  Arena measuring;
  acts_->carve(measuring, backend_, config_, capacity_);
  arena_memory_ = DeviceBuffer(backend_, measuring.used());
  Arena arena(arena_memory_.data(), arena_memory_.bytes());
  acts_->carve(arena, backend_, config_, capacity_);
  if (acts_->fp8_scale) {  // every scale starts at 1, every amax at 0 (Transformer Engine's start)
    const int64_t layers = config.num_hidden_layers, H = backend_.fp8_recipe()->history;
    fp8_table_.add(cat(kFp8StateGroup, "/scale"), {layers, Activations::kFp8Gemms, kFp8Operands});
    fp8_table_.add(cat(kFp8StateGroup, "/amax_history"), {H, layers, Activations::kFp8Gemms, kFp8Operands});
    const std::vector<float> ones(acts_->fp8_tensors, 1.0f);
    upload_floats(backend_, acts_->fp8_scale, DType::F32, ones.data(), ones.size());
    backend_.fill_zero(acts_->fp8_history, H * ones.size() * sizeof(float));
  }
}

void BertModel::download_fp8_state(FlatTensors& host) const {
  if (fp8_table_.size() == 0) return;
  download_floats(backend_, host.get(fp8_table_[0]), acts_->fp8_scale, DType::F32, fp8_table_[0].numel);
  download_floats(backend_, host.get(fp8_table_[1]), acts_->fp8_history, DType::F32, fp8_table_[1].numel);
}

void BertModel::upload_fp8_state(const FlatTensors& host) {
  if (fp8_table_.size() == 0) return;
  upload_floats(backend_, acts_->fp8_scale, DType::F32, host.get(fp8_table_[0]), fp8_table_[0].numel);
  upload_floats(backend_, acts_->fp8_history, DType::F32, host.get(fp8_table_[1]), fp8_table_[1].numel);
}

BertModel::~BertModel() = default;

double* BertModel::stats() { return acts_->stats; }
void BertModel::zero_stats() { backend_.fill_zero(acts_->stats, 4 * sizeof(double)); }

LossStats BertModel::read_stats() {
  double s[4];
  backend_.download(s, acts_->stats, sizeof s);
  backend_.synchronize();  // the download has landed
  return {s[0], s[1], s[2], s[3]};
}

const void* BertModel::mlm_logits() const { return acts_->mlm_logits; }
int BertModel::mlm_logits_stride() const { return padded_vocab(config_.vocab_size); }
const void* BertModel::nsp_logits() const { return acts_->nsp_logits; }
size_t BertModel::arena_bytes() const { return arena_memory_.bytes(); }

namespace {

// Typed offsets into a flat buffer of element size `elem`.
struct Flat {
  unsigned char* base;
  size_t elem;
  void* operator()(size_t offset) const { return base + offset * elem; }
};

void check_batch(const DeviceBatch& b, const BatchCapacity& cap) {
  BERT_CHECK(b.tokens > 0 && b.tokens <= cap.tokens && b.sequences > 0 && b.sequences <= cap.sequences &&
                 b.predictions > 0 && b.predictions <= cap.predictions && b.max_seqlen <= cap.max_seqlen,
             "batch of ", b.tokens, " tokens, ", b.sequences, " sequences and ", b.predictions,
             " predictions does not fit the model's ", cap.tokens, ", ", cap.sequences, " and ", cap.predictions);
}

}  // namespace

void BertModel::forward(const DeviceBatch& batch, const void* weights, bool training,
                        const ops::DropoutCounter* counter, uint32_t step_offset) {
  check_batch(batch, capacity_);
  training_ = training;
  counter_ = counter;
  step_offset_ = step_offset;
  const BertConfig& c = config_;
  const BertOffsets& o = offsets_;
  const Flat w{static_cast<unsigned char*>(const_cast<void*>(weights)), dtype_size(backend_.weight_dtype())};
  Activations& a = *acts_;
  Backend& be = backend_;
  const int N = batch.tokens, H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size,
            M = batch.predictions, Q = batch.sequences;
  auto dropout = [&](float p, uint32_t site) {
    return ops::Dropout{training ? p : 0.0f, counter, step_offset, site};
  };
  const float hidden_p = c.hidden_dropout_prob, attn_p = c.attention_probs_dropout_prob;
  // FP8: the scales from the amaxes the last training step recorded (delayed scaling); a training forward records
  // its own, an eval forward uses the scales as they are.
  if (training && a.fp8_scale) {
    const Fp8Recipe& recipe = *be.fp8_recipe();
    be.fp8_scale_update({.scale = a.fp8_scale, .history = a.fp8_history, .count = a.fp8_tensors,
                         .history_len = recipe.history, .margin = recipe.margin});
  }
  using G = Activations::Fp8Gemm;

  be.embedding_forward({.out = a.emb_out, .sum = a.emb_sum, .mean = a.emb_mean, .rstd = a.emb_rstd,
                        .ids = batch.input_ids, .types = batch.segment_ids, .positions = batch.position_ids,
                        .word = w(o.word_emb), .type = w(o.type_emb), .pos = w(o.pos_emb),
                        .gamma = w(o.emb_ln_gamma), .beta = w(o.emb_ln_beta), .N = N, .C = H,
                        .dropout = dropout(hidden_p, site_embedding())});

  const void* x = a.emb_out;
  for (int li = 0; li < c.num_hidden_layers; ++li) {
    auto& l = a.layers[li];
    const BertLayerOffsets& lo = o.layers[li];
    be.linear_forward({.out = l.qkv, .pre = nullptr, .inp = x, .weight = w(lo.q_kernel), .bias = w(lo.q_bias),
                       .N = N, .I = H, .O = H, .groups = 3, .weight_stride = o.qkv_stride,
                       .bias_stride = o.qkv_stride, .precision = a.fp8(li, G::QKV, training)});
    be.attention_forward({.ctx = l.ctx, .saved = l.attn_saved, .qkv = l.qkv, .cu_seqlens = batch.cu_seqlens, .N = N,
                          .sequences = Q, .max_seqlen = batch.max_seqlen, .heads = c.num_attention_heads,
                          .head_dim = c.head_size(), .dropout = dropout(attn_p, site_attention_probs(li))});
    be.linear_forward({.out = l.attn_proj, .pre = nullptr, .inp = l.ctx, .weight = w(lo.attn_out_kernel),
                       .bias = nullptr, .N = N, .I = H, .O = H,
                       .precision = a.fp8(li, G::ATTENTION_OUTPUT, training)});
    be.residual_layernorm_forward({.out = l.attn_ln, .sum = l.attn_sum, .mean = l.attn_mean, .rstd = l.attn_rstd,
                                   .inp = l.attn_proj, .bias = w(lo.attn_out_bias), .residual = x,
                                   .gamma = w(lo.attn_ln_gamma), .beta = w(lo.attn_ln_beta), .N = N, .C = H,
                                   .dropout = dropout(hidden_p, site_attention_output(li))});
    be.linear_forward({.out = l.inter, .pre = l.inter_pre, .inp = l.attn_ln, .weight = w(lo.inter_kernel),
                       .bias = w(lo.inter_bias), .N = N, .I = H, .O = I, .act = Activation::GELU,
                       .precision = a.fp8(li, G::FFN_UP, training)});
    be.linear_forward({.out = l.out_proj, .pre = nullptr, .inp = l.inter, .weight = w(lo.out_kernel),
                       .bias = nullptr, .N = N, .I = I, .O = H, .precision = a.fp8(li, G::FFN_DOWN, training)});
    be.residual_layernorm_forward({.out = l.out_ln, .sum = l.out_sum, .mean = l.out_mean, .rstd = l.out_rstd,
                                   .inp = l.out_proj, .bias = w(lo.out_bias), .residual = l.attn_ln,
                                   .gamma = w(lo.out_ln_gamma), .beta = w(lo.out_ln_beta), .N = N, .C = H,
                                   .dropout = dropout(hidden_p, site_ffn_output(li))});
    x = l.out_ln;
  }

  // NSP: the pooler on each sequence's [CLS], then a 2-way classifier.
  be.gather_forward({.out = a.cls_rows, .inp = x, .rows = batch.cls_positions, .M = Q, .C = H});
  be.linear_forward({.out = a.pooled, .pre = nullptr, .inp = a.cls_rows, .weight = w(o.pooler_kernel),
                     .bias = w(o.pooler_bias), .N = Q, .I = H, .O = H, .act = Activation::TANH});
  be.linear_forward({.out = a.nsp_logits, .pre = nullptr, .inp = a.pooled, .weight = w(o.nsp_weights),
                     .bias = w(o.nsp_bias), .N = Q, .I = H, .O = 2, .layout = WeightLayout::OUT_IN});
  be.cross_entropy_forward({.lse = a.nsp_lse, .stats = a.stats + 2, .logits = a.nsp_logits,
                            .labels = batch.nsp_labels, .loss_weight = batch.nsp_loss_weight,
                            .count_weight = batch.nsp_count_weight, .M = Q, .V = 2, .ldl = 2});

  // MLM: only the masked positions go through the transform and the tied decoder.
  be.gather_forward({.out = a.mlm_rows, .inp = x, .rows = batch.mlm_positions, .M = M, .C = H});
  be.linear_forward({.out = a.trans_gelu, .pre = a.trans_pre, .inp = a.mlm_rows, .weight = w(o.mlm_transform_kernel),
                     .bias = w(o.mlm_transform_bias), .N = M, .I = H, .O = H, .act = Activation::GELU});
  be.residual_layernorm_forward({.out = a.trans_ln, .sum = nullptr, .mean = a.trans_mean, .rstd = a.trans_rstd,
                                 .inp = a.trans_gelu, .bias = nullptr, .residual = nullptr,
                                 .gamma = w(o.mlm_ln_gamma), .beta = w(o.mlm_ln_beta), .N = M, .C = H, .dropout = {}});
  const int Vp = padded_vocab(V);
  be.linear_forward({.out = a.mlm_logits, .pre = nullptr, .inp = a.trans_ln, .weight = w(o.word_emb),
                     .bias = w(o.mlm_output_bias), .N = M, .I = H, .O = V, .ldo = Vp,
                     .layout = WeightLayout::OUT_IN});
  be.cross_entropy_forward({.lse = a.mlm_lse, .stats = a.stats, .logits = a.mlm_logits, .labels = batch.mlm_labels,
                            .loss_weight = batch.mlm_loss_weight, .count_weight = batch.mlm_count_weight, .M = M,
                            .V = V, .ldl = Vp});
}

void BertModel::backward(const DeviceBatch& batch, const void* weights, void* grads, float loss_scale,
                         const GradientsReady& ready) {
  const BertConfig& c = config_;
  const BertOffsets& o = offsets_;
  const Flat w{static_cast<unsigned char*>(const_cast<void*>(weights)), dtype_size(backend_.weight_dtype())};
  const Flat g{static_cast<unsigned char*>(grads), dtype_size(backend_.master_dtype())};
  Activations& a = *acts_;
  Backend& be = backend_;
  const int N = batch.tokens, H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size,
            M = batch.predictions, Q = batch.sequences, Vp = padded_vocab(V);
  auto dropout = [&](float p, uint32_t site) {
    return ops::Dropout{training_ ? p : 0.0f, counter_, step_offset_, site};
  };
  const float hidden_p = c.hidden_dropout_prob, attn_p = c.attention_probs_dropout_prob;
  auto announce = [&](size_t begin, size_t end) {
    if (ready) ready(begin, end);
  };
  using G = Activations::Fp8Gemm;

  // MLM head, into d_seq at the masked positions (everything else zero).
  be.cross_entropy_backward({.dlogits = a.mlm_logits, .logits = a.mlm_logits, .lse = a.mlm_lse,
                             .labels = batch.mlm_labels, .loss_weight = batch.mlm_loss_weight, .M = M, .V = V,
                             .ldl = Vp, .scale = loss_scale});
  be.linear_backward({.dinp = a.d_head_a, .dweight = g(o.word_emb), .dbias = g(o.mlm_output_bias),
                      .dout = a.mlm_logits, .inp = a.trans_ln, .weight = w(o.word_emb), .N = M, .I = H, .O = V,
                      .ldo = Vp, .layout = WeightLayout::OUT_IN});
  be.residual_layernorm_backward({.dinp = a.d_head_b, .dresidual = nullptr, .dbias = nullptr,
                                  .dgamma = g(o.mlm_ln_gamma), .dbeta = g(o.mlm_ln_beta), .dout = a.d_head_a,
                                  .sum = a.trans_gelu, .mean = a.trans_mean, .rstd = a.trans_rstd,
                                  .gamma = w(o.mlm_ln_gamma), .N = M, .C = H, .dropout = {}});
  be.activation_backward({.dinp = a.d_head_a, .dout = a.d_head_b, .saved = a.trans_pre, .n = size_t(M) * H,
                          .act = Activation::GELU});
  be.linear_backward({.dinp = a.d_head_b, .dweight = g(o.mlm_transform_kernel), .dbias = g(o.mlm_transform_bias),
                      .dout = a.d_head_a, .inp = a.mlm_rows, .weight = w(o.mlm_transform_kernel), .N = M, .I = H,
                      .O = H});
  be.gather_backward({.dinp = a.d_seq, .dout = a.d_head_b, .rows = batch.mlm_positions, .M = M, .N = N, .C = H});

  // NSP head, added into d_seq at the [CLS] tokens.
  be.cross_entropy_backward({.dlogits = a.nsp_logits, .logits = a.nsp_logits, .lse = a.nsp_lse,
                             .labels = batch.nsp_labels, .loss_weight = batch.nsp_loss_weight, .M = Q, .V = 2,
                             .ldl = 2, .scale = loss_scale});
  be.linear_backward({.dinp = a.d_head_a, .dweight = g(o.nsp_weights), .dbias = g(o.nsp_bias), .dout = a.nsp_logits,
                      .inp = a.pooled, .weight = w(o.nsp_weights), .N = Q, .I = H, .O = 2,
                      .layout = WeightLayout::OUT_IN, .dinp_act = Activation::TANH, .dinp_act_saved = a.pooled,
                      .dinp_act_dbias = g(o.pooler_bias)});
  be.linear_backward({.dinp = a.d_head_b, .dweight = g(o.pooler_kernel), .dbias = nullptr, .dout = a.d_head_a,
                      .inp = a.cls_rows, .weight = w(o.pooler_kernel), .N = Q, .I = H, .O = H});
  be.gather_backward({.dinp = a.d_seq, .dout = a.d_head_b, .rows = batch.cls_positions, .M = Q, .N = N, .C = H,
                      .accumulate = true});
  announce(o.pooler_kernel, table_elements_);  // pooler and cls/*: the end of the table

  // Encoder layers, last to first. d_seq holds the gradient of the layer's output on entry and of its input on
  // exit.
  for (int li = c.num_hidden_layers - 1; li >= 0; --li) {
    auto& l = a.layers[li];
    const BertLayerOffsets& lo = o.layers[li];
    const void* x = li == 0 ? a.emb_out : a.layers[li - 1].out_ln;

    be.residual_layernorm_backward({.dinp = a.d_a, .dresidual = a.d_mid, .dbias = g(lo.out_bias),
                                    .dgamma = g(lo.out_ln_gamma), .dbeta = g(lo.out_ln_beta), .dout = a.d_seq,
                                    .sum = l.out_sum, .mean = l.out_mean, .rstd = l.out_rstd,
                                    .gamma = w(lo.out_ln_gamma), .N = N, .C = H,
                                    .dropout = dropout(hidden_p, site_ffn_output(li))});
    be.linear_backward({.dinp = a.d_inter, .dweight = g(lo.out_kernel), .dbias = nullptr, .dout = a.d_a,
                        .inp = l.inter, .weight = w(lo.out_kernel), .N = N, .I = I, .O = H,
                        .dinp_act = Activation::GELU, .dinp_act_saved = l.inter_pre,
                        .dinp_act_dbias = g(lo.inter_bias), .precision = a.fp8(li, G::FFN_DOWN, true)});
    be.linear_backward({.dinp = a.d_mid, .dweight = g(lo.inter_kernel), .dbias = nullptr, .dout = a.d_inter,
                        .inp = l.attn_ln, .weight = w(lo.inter_kernel), .N = N, .I = H, .O = I,
                        .accumulate_dinp = true, .precision = a.fp8(li, G::FFN_UP, true)});
    be.residual_layernorm_backward({.dinp = a.d_a, .dresidual = a.d_x, .dbias = g(lo.attn_out_bias),
                                    .dgamma = g(lo.attn_ln_gamma), .dbeta = g(lo.attn_ln_beta), .dout = a.d_mid,
                                    .sum = l.attn_sum, .mean = l.attn_mean, .rstd = l.attn_rstd,
                                    .gamma = w(lo.attn_ln_gamma), .N = N, .C = H,
                                    .dropout = dropout(hidden_p, site_attention_output(li))});
    be.linear_backward({.dinp = a.d_ctx, .dweight = g(lo.attn_out_kernel), .dbias = nullptr, .dout = a.d_a,
                        .inp = l.ctx, .weight = w(lo.attn_out_kernel), .N = N, .I = H, .O = H,
                        .precision = a.fp8(li, G::ATTENTION_OUTPUT, true)});
    be.attention_backward({.dqkv = a.d_qkv, .workspace = a.attn_workspace, .dctx = a.d_ctx, .ctx = l.ctx,
                           .qkv = l.qkv, .saved = l.attn_saved, .cu_seqlens = batch.cu_seqlens, .N = N,
                           .sequences = Q, .max_seqlen = batch.max_seqlen, .heads = c.num_attention_heads,
                           .head_dim = c.head_size(), .dropout = dropout(attn_p, site_attention_probs(li))});
    be.linear_backward({.dinp = a.d_x, .dweight = g(lo.q_kernel), .dbias = g(lo.q_bias), .dout = a.d_qkv, .inp = x,
                        .weight = w(lo.q_kernel), .N = N, .I = H, .O = H, .groups = 3,
                        .weight_stride = o.qkv_stride, .bias_stride = o.qkv_stride, .accumulate_dinp = true,
                        .precision = a.fp8(li, G::QKV, true)});
    const size_t layer_end = li + 1 < c.num_hidden_layers ? o.layers[li + 1].q_kernel : o.pooler_kernel;
    announce(lo.q_kernel, layer_end);
    std::swap(a.d_seq, a.d_x);
  }

  // Embeddings: dropout, LayerNorm, then the scatter into the three tables (the word table also holds the
  // decoder's gradient, so it is final only now).
  be.embedding_backward({.dword = g(o.word_emb), .dtype = g(o.type_emb), .dpos = g(o.pos_emb),
                         .dgamma = g(o.emb_ln_gamma), .dbeta = g(o.emb_ln_beta), .scratch = a.d_a, .dout = a.d_seq,
                         .sum = a.emb_sum, .mean = a.emb_mean, .rstd = a.emb_rstd, .gamma = w(o.emb_ln_gamma),
                         .ids = batch.input_ids, .types = batch.segment_ids, .positions = batch.position_ids,
                         .N = N, .C = H, .dropout = dropout(hidden_p, site_embedding())});
  announce(0, c.num_hidden_layers > 0 ? o.layers[0].q_kernel : o.pooler_kernel);
}

}  // namespace bertperf
