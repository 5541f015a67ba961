// The BERT pretraining model over the op vocabulary (bert.h). The backward walks the forward in
// reverse; every backward op accumulates, so each gradient buffer is zeroed right before the op
// that first writes it, and residual branches simply add into the same buffer.
#include "model/bert.h"

#include <cmath>
#include <cstring>

#include "backends/ops.h"

namespace bertperf {

namespace {

using ops::WeightLayout;

// Dropout sites: one Philox stream per place a mask is drawn, so masks never repeat across sites.
uint32_t site_embedding() { return 0; }
uint32_t site_attention_probs(int layer) { return 1 + 3 * layer; }
uint32_t site_attention_output(int layer) { return 2 + 3 * layer; }
uint32_t site_ffn_output(int layer) { return 3 + 3 * layer; }

void zero(float* p, size_t n) { std::memset(p, 0, n * sizeof(float)); }

}  // namespace

struct BertModel::Activations {
  struct Layer {
    float* q; float* k; float* v;          // (N, H)
    float* probs;                          // (B, A, S, S)
    float* ctx;                            // (N, H)
    float* attn_proj;                      // (N, H) ctx . Wo + bo
    float* attn_res;                       // (N, H) dropout(attn_proj) + x
    float* attn_ln_mean; float* attn_ln_rstd;  // (N)
    float* attn_ln;                        // (N, H)
    float* inter_pre;                      // (N, I)
    float* inter;                          // (N, I) gelu
    float* out_proj;                       // (N, H)
    float* out_res;                        // (N, H) dropout(out_proj) + attn_ln
    float* out_ln_mean; float* out_ln_rstd;  // (N)
    float* out_ln;                         // (N, H) the layer's output
  };
  float* emb_sum;                          // (N, H)
  float* emb_ln_mean; float* emb_ln_rstd;  // (N)
  float* emb_ln;                           // (N, H)
  float* emb_out;                          // (N, H) after dropout: layer 0's input
  std::vector<Layer> layers;
  // NSP head, (Q) = sequences
  float* cls_rows; float* pooled_pre; float* pooled;  // (Q, H)
  float* nsp_logits; float* nsp_losses;               // (Q, 2), (Q)
  // MLM head, (M) = prediction slots
  float* mlm_rows; float* trans_pre; float* trans_gelu;  // (M, H)
  float* trans_ln_mean; float* trans_ln_rstd;            // (M)
  float* trans_ln;                                       // (M, H)
  float* mlm_logits; float* mlm_losses;                  // (M, V), (M)
  int32_t* mlm_argmax;                                   // (M)
  // Backward working memory, reused by every layer.
  float* d_seq;                           // (N, H) gradient of the current layer's output
  float* d_x;                             // (N, H) gradient of its input
  float* d_res; float* d_proj; float* d_mid;  // (N, H)
  float* d_q; float* d_k; float* d_v; float* d_ctx;  // (N, H)
  float* d_inter; float* d_inter_pre;     // (N, I)
  float* d_probs_scratch;                 // (B, A, S, S)
  float* d_head_a; float* d_head_b; float* d_head_c;  // (max(M, Q), H)
  float* d_mlm_logits;                    // (M, V)
  float* d_nsp_logits;                    // (Q, 2)
  float* d_losses;                        // (max(M, Q))

  // Carves every buffer from `arena`; run once on a measuring arena to size the real one.
  void carve(Arena& a, const BertConfig& c, BatchShape s) {
    const size_t N = size_t(s.rows) * s.seq_len, H = c.hidden_size, I = c.intermediate_size,
                 V = c.vocab_size, M = s.predictions, Q = s.sequences;
    const size_t P = size_t(s.rows) * c.num_attention_heads * s.seq_len * s.seq_len;
    emb_sum = a.take<float>(N * H);
    emb_ln_mean = a.take<float>(N);
    emb_ln_rstd = a.take<float>(N);
    emb_ln = a.take<float>(N * H);
    emb_out = a.take<float>(N * H);
    layers.resize(c.num_hidden_layers);
    for (Layer& l : layers) {
      l.q = a.take<float>(N * H);
      l.k = a.take<float>(N * H);
      l.v = a.take<float>(N * H);
      l.probs = a.take<float>(P);
      l.ctx = a.take<float>(N * H);
      l.attn_proj = a.take<float>(N * H);
      l.attn_res = a.take<float>(N * H);
      l.attn_ln_mean = a.take<float>(N);
      l.attn_ln_rstd = a.take<float>(N);
      l.attn_ln = a.take<float>(N * H);
      l.inter_pre = a.take<float>(N * I);
      l.inter = a.take<float>(N * I);
      l.out_proj = a.take<float>(N * H);
      l.out_res = a.take<float>(N * H);
      l.out_ln_mean = a.take<float>(N);
      l.out_ln_rstd = a.take<float>(N);
      l.out_ln = a.take<float>(N * H);
    }
    cls_rows = a.take<float>(Q * H);
    pooled_pre = a.take<float>(Q * H);
    pooled = a.take<float>(Q * H);
    nsp_logits = a.take<float>(Q * 2);
    nsp_losses = a.take<float>(Q);
    mlm_rows = a.take<float>(M * H);
    trans_pre = a.take<float>(M * H);
    trans_gelu = a.take<float>(M * H);
    trans_ln_mean = a.take<float>(M);
    trans_ln_rstd = a.take<float>(M);
    trans_ln = a.take<float>(M * H);
    mlm_logits = a.take<float>(M * V);
    mlm_losses = a.take<float>(M);
    mlm_argmax = a.take<int32_t>(M);
    for (float** p : {&d_seq, &d_x, &d_res, &d_proj, &d_mid, &d_q, &d_k, &d_v, &d_ctx}) *p = a.take<float>(N * H);
    d_inter = a.take<float>(N * I);
    d_inter_pre = a.take<float>(N * I);
    d_probs_scratch = a.take<float>(P);
    const size_t heads = std::max(M, Q);
    d_head_a = a.take<float>(heads * H);
    d_head_b = a.take<float>(heads * H);
    d_head_c = a.take<float>(heads * H);
    d_mlm_logits = a.take<float>(M * V);
    d_nsp_logits = a.take<float>(Q * 2);
    d_losses = a.take<float>(heads);
  }
};

BertModel::BertModel(const BertConfig& config, BatchShape max_shape)
    : config_(config), max_shape_(max_shape), acts_(std::make_unique<Activations>()) {
  BERT_CHECK(max_shape.rows > 0 && max_shape.seq_len > 0 && max_shape.predictions > 0 && max_shape.sequences > 0,
             "BertModel needs a positive batch shape");
  BERT_CHECK(max_shape.seq_len <= config.max_position_embeddings, "seq_len ", max_shape.seq_len,
             " exceeds max_position_embeddings ", config.max_position_embeddings);
  Arena measuring;
  acts_->carve(measuring, config_, max_shape_);
  arena_ = Arena(measuring.used());
  acts_->carve(arena_, config_, max_shape_);
}

BertModel::~BertModel() = default;

const BertView<const float>& BertModel::params_view(const FlatTensors& params) {
  if (params.data() != params_view_base_) {
    params_view_ = bert_view(params, config_);
    params_view_base_ = params.data();
  }
  return params_view_;
}

const BertView<float>& BertModel::grads_view(FlatTensors& grads) {
  if (grads.data() != grads_view_base_) {
    grads_view_ = bert_view(grads, config_);
    grads_view_base_ = grads.data();
  }
  return grads_view_;
}

const float* BertModel::mlm_logits() const { return acts_->mlm_logits; }
const float* BertModel::nsp_logits() const { return acts_->nsp_logits; }
size_t BertModel::arena_bytes() const { return arena_.capacity(); }

namespace {

void check_batch(const Batch& b, const BatchShape& max) {
  BERT_CHECK(b.rows > 0 && b.rows <= max.rows && b.seq_len == max.seq_len, "batch of ", b.rows, "x", b.seq_len,
             " does not fit the model's ", max.rows, "x", max.seq_len);
  BERT_CHECK(b.predictions() <= max.predictions && b.sequences() <= max.sequences && b.sequences() > 0,
             "batch has ", b.predictions(), " predictions and ", b.sequences(), " sequences; the model holds ",
             max.predictions, " and ", max.sequences);
  const size_t n = size_t(b.tokens());
  BERT_CHECK(b.input_ids.size() == n && b.segment_ids.size() == n && b.position_ids.size() == n &&
                 b.seq_id.size() == n && b.mlm_labels.size() == b.mlm_positions.size() &&
                 b.mlm_weights.size() == b.mlm_positions.size() && b.nsp_labels.size() == b.cls_positions.size(),
             "batch arrays have inconsistent sizes");
}

}  // namespace

BertOutputs BertModel::forward(const FlatTensors& params, const Batch& batch, bool training, uint64_t dropout_seed,
                               uint32_t step) {
  check_batch(batch, max_shape_);
  training_ = training;
  dropout_seed_ = dropout_seed;
  step_ = step;
  const BertConfig& c = config_;
  const auto& p = params_view(params);
  Activations& a = *acts_;
  const int B = batch.rows, S = batch.seq_len, N = batch.tokens(), H = c.hidden_size, I = c.intermediate_size,
            V = c.vocab_size, A = c.num_attention_heads, D = c.head_size(), M = batch.predictions(),
            Q = batch.sequences();
  const float hidden_p = training ? c.hidden_dropout_prob : 0.0f;
  const float attn_p = training ? c.attention_probs_dropout_prob : 0.0f;
  auto key = [&](uint32_t site) { return RngKey{dropout_seed, step, site}; };

  ops::embedding_forward(a.emb_sum, batch.input_ids.data(), batch.segment_ids.data(), batch.position_ids.data(),
                         p.word_emb, p.type_emb, p.pos_emb, N, H);
  ops::layernorm_forward(a.emb_ln, a.emb_ln_mean, a.emb_ln_rstd, a.emb_sum, p.emb_ln_gamma, p.emb_ln_beta, N, H);
  ops::dropout_residual_forward(a.emb_out, a.emb_ln, nullptr, size_t(N) * H, hidden_p, key(site_embedding()));

  const float* x = a.emb_out;
  for (int li = 0; li < c.num_hidden_layers; ++li) {
    auto& l = a.layers[li];
    const auto& w = p.layers[li];
    ops::linear_forward(l.q, x, w.q_kernel, w.q_bias, N, H, H, WeightLayout::IN_OUT);
    ops::linear_forward(l.k, x, w.k_kernel, w.k_bias, N, H, H, WeightLayout::IN_OUT);
    ops::linear_forward(l.v, x, w.v_kernel, w.v_bias, N, H, H, WeightLayout::IN_OUT);
    ops::attention_forward(l.ctx, l.probs, l.q, l.k, l.v, batch.seq_id.data(), B, S, A, D, attn_p,
                           key(site_attention_probs(li)));
    ops::linear_forward(l.attn_proj, l.ctx, w.attn_out_kernel, w.attn_out_bias, N, H, H, WeightLayout::IN_OUT);
    ops::dropout_residual_forward(l.attn_res, l.attn_proj, x, size_t(N) * H, hidden_p, key(site_attention_output(li)));
    ops::layernorm_forward(l.attn_ln, l.attn_ln_mean, l.attn_ln_rstd, l.attn_res, w.attn_ln_gamma, w.attn_ln_beta, N, H);
    ops::linear_forward(l.inter_pre, l.attn_ln, w.inter_kernel, w.inter_bias, N, H, I, WeightLayout::IN_OUT);
    ops::gelu_forward(l.inter, l.inter_pre, size_t(N) * I);
    ops::linear_forward(l.out_proj, l.inter, w.out_kernel, w.out_bias, N, I, H, WeightLayout::IN_OUT);
    ops::dropout_residual_forward(l.out_res, l.out_proj, l.attn_ln, size_t(N) * H, hidden_p, key(site_ffn_output(li)));
    ops::layernorm_forward(l.out_ln, l.out_ln_mean, l.out_ln_rstd, l.out_res, w.out_ln_gamma, w.out_ln_beta, N, H);
    x = l.out_ln;
  }
  const float* seq_out = x;

  // NSP: pooler on each sequence's [CLS], then a 2-way classifier.
  ops::gather_rows_forward(a.cls_rows, seq_out, batch.cls_positions.data(), Q, H);
  ops::linear_forward(a.pooled_pre, a.cls_rows, p.pooler_kernel, p.pooler_bias, Q, H, H, WeightLayout::IN_OUT);
  ops::tanh_forward(a.pooled, a.pooled_pre, size_t(Q) * H);
  ops::linear_forward(a.nsp_logits, a.pooled, p.nsp_weights, p.nsp_bias, Q, H, 2, WeightLayout::OUT_IN);
  ops::cross_entropy_forward(a.nsp_losses, a.nsp_logits, batch.nsp_labels.data(), Q, 2);

  // MLM: only the masked positions go through the transform and the tied decoder.
  ops::gather_rows_forward(a.mlm_rows, seq_out, batch.mlm_positions.data(), M, H);
  ops::linear_forward(a.trans_pre, a.mlm_rows, p.mlm_transform_kernel, p.mlm_transform_bias, M, H, H,
                      WeightLayout::IN_OUT);
  ops::gelu_forward(a.trans_gelu, a.trans_pre, size_t(M) * H);
  ops::layernorm_forward(a.trans_ln, a.trans_ln_mean, a.trans_ln_rstd, a.trans_gelu, p.mlm_ln_gamma, p.mlm_ln_beta, M, H);
  ops::linear_forward(a.mlm_logits, a.trans_ln, p.word_emb, p.mlm_output_bias, M, H, V, WeightLayout::OUT_IN);
  ops::cross_entropy_forward(a.mlm_losses, a.mlm_logits, batch.mlm_labels.data(), M, V);
  ops::argmax_rows(a.mlm_argmax, a.mlm_logits, M, V);

  BertOutputs out;
  double weighted = 0, weight_sum = 0, correct = 0;
  for (int i = 0; i < M; ++i) {
    const double w = batch.mlm_weights[i];
    weighted += w * a.mlm_losses[i];
    weight_sum += w;
    correct += w * (a.mlm_argmax[i] == batch.mlm_labels[i]);
  }
  double nsp = 0, nsp_correct = 0;
  for (int i = 0; i < Q; ++i) {
    nsp += a.nsp_losses[i];
    const int predicted = a.nsp_logits[2 * i + 1] > a.nsp_logits[2 * i] ? 1 : 0;
    nsp_correct += predicted == batch.nsp_labels[i];
  }
  // The reference's weighting: the +1e-5 keeps an all-padding batch finite.
  out.mlm_loss = static_cast<float>(weighted / (weight_sum + 1e-5));
  out.nsp_loss = static_cast<float>(nsp / Q);
  out.total_loss = out.mlm_loss + out.nsp_loss;
  out.mlm_correct = correct;
  out.mlm_weight = weight_sum;
  out.nsp_correct = nsp_correct;
  return out;
}

void BertModel::backward(const FlatTensors& params, FlatTensors& grads, const Batch& batch) {
  const BertConfig& c = config_;
  const auto& p = params_view(params);
  const auto& g = grads_view(grads);
  Activations& a = *acts_;
  const int B = batch.rows, S = batch.seq_len, N = batch.tokens(), H = c.hidden_size, I = c.intermediate_size,
            V = c.vocab_size, A = c.num_attention_heads, D = c.head_size(), M = batch.predictions(),
            Q = batch.sequences();
  const size_t NH = size_t(N) * H, NI = size_t(N) * I;
  const float hidden_p = training_ ? c.hidden_dropout_prob : 0.0f;
  const float attn_p = training_ ? c.attention_probs_dropout_prob : 0.0f;
  auto key = [&](uint32_t site) { return RngKey{dropout_seed_, step_, site}; };

  zero(a.d_seq, NH);

  // MLM head. d loss / d per-example loss = w / (sum w + 1e-5).
  double weight_sum = 0;
  for (int i = 0; i < M; ++i) weight_sum += batch.mlm_weights[i];
  for (int i = 0; i < M; ++i) a.d_losses[i] = static_cast<float>(batch.mlm_weights[i] / (weight_sum + 1e-5));
  zero(a.d_mlm_logits, size_t(M) * V);
  ops::cross_entropy_backward(a.d_mlm_logits, a.mlm_logits, batch.mlm_labels.data(), a.d_losses, M, V);
  zero(a.d_head_a, size_t(M) * H);
  ops::linear_backward(a.d_head_a, g.word_emb, g.mlm_output_bias, a.d_mlm_logits, a.trans_ln, p.word_emb, M, H, V,
                       WeightLayout::OUT_IN);
  zero(a.d_head_b, size_t(M) * H);
  ops::layernorm_backward(a.d_head_b, g.mlm_ln_gamma, g.mlm_ln_beta, a.d_head_a, a.trans_gelu, p.mlm_ln_gamma,
                          a.trans_ln_mean, a.trans_ln_rstd, M, H);
  zero(a.d_head_c, size_t(M) * H);
  ops::gelu_backward(a.d_head_c, a.trans_pre, a.d_head_b, size_t(M) * H);
  zero(a.d_head_a, size_t(M) * H);
  ops::linear_backward(a.d_head_a, g.mlm_transform_kernel, g.mlm_transform_bias, a.d_head_c, a.mlm_rows,
                       p.mlm_transform_kernel, M, H, H, WeightLayout::IN_OUT);
  ops::gather_rows_backward(a.d_seq, a.d_head_a, batch.mlm_positions.data(), M, H);

  // NSP head: mean over sequences.
  for (int i = 0; i < Q; ++i) a.d_losses[i] = 1.0f / static_cast<float>(Q);
  zero(a.d_nsp_logits, size_t(Q) * 2);
  ops::cross_entropy_backward(a.d_nsp_logits, a.nsp_logits, batch.nsp_labels.data(), a.d_losses, Q, 2);
  zero(a.d_head_a, size_t(Q) * H);
  ops::linear_backward(a.d_head_a, g.nsp_weights, g.nsp_bias, a.d_nsp_logits, a.pooled, p.nsp_weights, Q, H, 2,
                       WeightLayout::OUT_IN);
  zero(a.d_head_b, size_t(Q) * H);
  ops::tanh_backward(a.d_head_b, a.pooled, a.d_head_a, size_t(Q) * H);
  zero(a.d_head_c, size_t(Q) * H);
  ops::linear_backward(a.d_head_c, g.pooler_kernel, g.pooler_bias, a.d_head_b, a.cls_rows, p.pooler_kernel, Q, H, H,
                       WeightLayout::IN_OUT);
  ops::gather_rows_backward(a.d_seq, a.d_head_c, batch.cls_positions.data(), Q, H);

  // Encoder layers, last to first. d_seq holds the gradient of the layer's output on entry and
  // of its input on exit.
  for (int li = c.num_hidden_layers - 1; li >= 0; --li) {
    auto& l = a.layers[li];
    const auto& w = p.layers[li];
    auto& gw = g.layers[li];
    const float* x = li == 0 ? a.emb_out : a.layers[li - 1].out_ln;

    zero(a.d_res, NH);
    ops::layernorm_backward(a.d_res, gw.out_ln_gamma, gw.out_ln_beta, a.d_seq, l.out_res, w.out_ln_gamma,
                            l.out_ln_mean, l.out_ln_rstd, N, H);
    zero(a.d_proj, NH);
    zero(a.d_mid, NH);  // gradient of attn_ln: residual branch plus the FFN input
    ops::dropout_residual_backward(a.d_proj, a.d_mid, a.d_res, NH, hidden_p, key(site_ffn_output(li)));
    zero(a.d_inter, NI);
    ops::linear_backward(a.d_inter, gw.out_kernel, gw.out_bias, a.d_proj, l.inter, w.out_kernel, N, I, H,
                         WeightLayout::IN_OUT);
    zero(a.d_inter_pre, NI);
    ops::gelu_backward(a.d_inter_pre, l.inter_pre, a.d_inter, NI);
    ops::linear_backward(a.d_mid, gw.inter_kernel, gw.inter_bias, a.d_inter_pre, l.attn_ln, w.inter_kernel, N, H, I,
                         WeightLayout::IN_OUT);

    zero(a.d_res, NH);
    ops::layernorm_backward(a.d_res, gw.attn_ln_gamma, gw.attn_ln_beta, a.d_mid, l.attn_res, w.attn_ln_gamma,
                            l.attn_ln_mean, l.attn_ln_rstd, N, H);
    zero(a.d_proj, NH);
    zero(a.d_x, NH);
    ops::dropout_residual_backward(a.d_proj, a.d_x, a.d_res, NH, hidden_p, key(site_attention_output(li)));
    zero(a.d_ctx, NH);
    ops::linear_backward(a.d_ctx, gw.attn_out_kernel, gw.attn_out_bias, a.d_proj, l.ctx, w.attn_out_kernel, N, H, H,
                         WeightLayout::IN_OUT);
    zero(a.d_q, NH);
    zero(a.d_k, NH);
    zero(a.d_v, NH);
    ops::attention_backward(a.d_q, a.d_k, a.d_v, a.d_probs_scratch, a.d_ctx, l.probs, l.q, l.k, l.v, B, S, A, D,
                            attn_p, key(site_attention_probs(li)));
    ops::linear_backward(a.d_x, gw.q_kernel, gw.q_bias, a.d_q, x, w.q_kernel, N, H, H, WeightLayout::IN_OUT);
    ops::linear_backward(a.d_x, gw.k_kernel, gw.k_bias, a.d_k, x, w.k_kernel, N, H, H, WeightLayout::IN_OUT);
    ops::linear_backward(a.d_x, gw.v_kernel, gw.v_bias, a.d_v, x, w.v_kernel, N, H, H, WeightLayout::IN_OUT);
    std::swap(a.d_seq, a.d_x);
  }

  // Embeddings: dropout, LayerNorm, then scatter into the three tables.
  zero(a.d_res, NH);
  ops::dropout_residual_backward(a.d_res, nullptr, a.d_seq, NH, hidden_p, key(site_embedding()));
  zero(a.d_proj, NH);
  ops::layernorm_backward(a.d_proj, g.emb_ln_gamma, g.emb_ln_beta, a.d_res, a.emb_sum, p.emb_ln_gamma, a.emb_ln_mean,
                          a.emb_ln_rstd, N, H);
  ops::embedding_backward(g.word_emb, g.type_emb, g.pos_emb, a.d_proj, batch.input_ids.data(),
                          batch.segment_ids.data(), batch.position_ids.data(), N, H);
}

}  // namespace bertperf
