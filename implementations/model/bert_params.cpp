// The BERT tensor table, views and initialisation (bert_params.h).
#include "model/bert_params.h"

#include <algorithm>
#include <cmath>

#include "core/philox.h"

namespace bertperf {

namespace {

const char* const kLayerSuffixes[] = {
    "attention/self/query/kernel",      "attention/self/query/bias",
    "attention/self/key/kernel",        "attention/self/key/bias",
    "attention/self/value/kernel",      "attention/self/value/bias",
    "attention/output/dense/kernel",    "attention/output/dense/bias",
    "attention/output/LayerNorm/gamma", "attention/output/LayerNorm/beta",
    "intermediate/dense/kernel",        "intermediate/dense/bias",
    "output/dense/kernel",              "output/dense/bias",
    "output/LayerNorm/gamma",           "output/LayerNorm/beta",
};

std::string layer_prefix(int layer) { return cat("bert/encoder/layer_", layer, "/"); }

size_t offset_of(const TensorTable& table, const std::string& name) { return table.at(name).offset; }

}  // namespace

BertOffsets bert_offsets(const TensorTable& table, const BertConfig& config) {
  auto p = [&](const std::string& name) { return offset_of(table, name); };
  BertOffsets v;
  v.word_emb = p("bert/embeddings/word_embeddings");
  v.pos_emb = p("bert/embeddings/position_embeddings");
  v.type_emb = p("bert/embeddings/token_type_embeddings");
  v.emb_ln_gamma = p("bert/embeddings/LayerNorm/gamma");
  v.emb_ln_beta = p("bert/embeddings/LayerNorm/beta");
  for (int l = 0; l < config.num_hidden_layers; ++l) {
    const std::string pre = layer_prefix(l);
    BertLayerOffsets lv;
    size_t* slots[] = {&lv.q_kernel,      &lv.q_bias,       &lv.k_kernel,        &lv.k_bias,
                       &lv.v_kernel,      &lv.v_bias,       &lv.attn_out_kernel, &lv.attn_out_bias,
                       &lv.attn_ln_gamma, &lv.attn_ln_beta, &lv.inter_kernel,    &lv.inter_bias,
                       &lv.out_kernel,    &lv.out_bias,     &lv.out_ln_gamma,    &lv.out_ln_beta};
    for (size_t i = 0; i < std::size(kLayerSuffixes); ++i) *slots[i] = p(pre + kLayerSuffixes[i]);
    v.layers.push_back(lv);
  }
  v.pooler_kernel = p("bert/pooler/dense/kernel");
  v.pooler_bias = p("bert/pooler/dense/bias");
  v.mlm_output_bias = p("cls/predictions/output_bias");
  v.mlm_transform_kernel = p("cls/predictions/transform/dense/kernel");
  v.mlm_transform_bias = p("cls/predictions/transform/dense/bias");
  v.mlm_ln_gamma = p("cls/predictions/transform/LayerNorm/gamma");
  v.mlm_ln_beta = p("cls/predictions/transform/LayerNorm/beta");
  v.nsp_weights = p("cls/seq_relationship/output_weights");
  v.nsp_bias = p("cls/seq_relationship/output_bias");
  // The table lays every layer out as q kernel, q bias, k kernel, k bias, v kernel, v bias at aligned offsets, so
  // the three kernels (and the three biases) are one stride apart.
  v.qkv_stride = v.layers.empty() ? 0 : v.layers[0].k_kernel - v.layers[0].q_kernel;
  for (const BertLayerOffsets& l : v.layers) {
    BERT_CHECK(l.k_kernel - l.q_kernel == v.qkv_stride && l.v_kernel - l.k_kernel == v.qkv_stride &&
                   l.k_bias - l.q_bias == v.qkv_stride && l.v_bias - l.k_bias == v.qkv_stride,
               "the q, k and v tensors of a layer are not evenly spaced in the parameter table");
  }
  return v;
}

TensorTable bert_parameter_table(const BertConfig& c) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  TensorTable t;
  auto add = [&t](const std::string& name, std::vector<int64_t> shape) {
    t.add(name, std::move(shape), lamb_excluded(name));
  };
  add("bert/embeddings/word_embeddings", {V, H});
  add("bert/embeddings/position_embeddings", {c.max_position_embeddings, H});
  add("bert/embeddings/token_type_embeddings", {c.type_vocab_size, H});
  add("bert/embeddings/LayerNorm/gamma", {H});
  add("bert/embeddings/LayerNorm/beta", {H});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string pre = layer_prefix(l);
    for (const char* s : {"query", "key", "value"}) {
      add(pre + "attention/self/" + s + "/kernel", {H, H});
      add(pre + "attention/self/" + s + "/bias", {H});
    }
    add(pre + "attention/output/dense/kernel", {H, H});
    add(pre + "attention/output/dense/bias", {H});
    add(pre + "attention/output/LayerNorm/gamma", {H});
    add(pre + "attention/output/LayerNorm/beta", {H});
    add(pre + "intermediate/dense/kernel", {H, I});
    add(pre + "intermediate/dense/bias", {I});
    add(pre + "output/dense/kernel", {I, H});
    add(pre + "output/dense/bias", {H});
    add(pre + "output/LayerNorm/gamma", {H});
    add(pre + "output/LayerNorm/beta", {H});
  }
  add("bert/pooler/dense/kernel", {H, H});
  add("bert/pooler/dense/bias", {H});
  add("cls/predictions/output_bias", {V});
  add("cls/predictions/transform/dense/kernel", {H, H});
  add("cls/predictions/transform/dense/bias", {H});
  add("cls/predictions/transform/LayerNorm/gamma", {H});
  add("cls/predictions/transform/LayerNorm/beta", {H});
  add("cls/seq_relationship/output_weights", {2, H});
  add("cls/seq_relationship/output_bias", {2});
  return t;
}

bool lamb_excluded(const std::string& name) {
  // The reference matches these as regex searches; all three are plain substrings.
  return name.find("LayerNorm") != std::string::npos || name.find("layer_norm") != std::string::npos ||
         name.find("bias") != std::string::npos;
}

void bert_init_parameters(FlatTensors& params, const BertConfig& config, uint64_t seed) {
  params.zero();
  const TensorTable& table = params.table();
  for (size_t ti = 0; ti < table.size(); ++ti) {
    const TensorInfo& t = table[ti];
    float* dst = params.get(t);
    const bool is_gamma = t.name.size() >= 5 && t.name.compare(t.name.size() - 5, 5, "gamma") == 0;
    if (is_gamma) {
      std::fill(dst, dst + t.numel, 1.0f);
      continue;
    }
    if (t.lamb_excluded) continue;  // biases and betas start at zero
    // Truncated normal: redraw anything beyond two standard deviations, as TF does. Each tensor
    // is its own Philox site, so the draw does not depend on the table's padding.
    const RngKey key{seed, 0, static_cast<uint32_t>(ti)};
    uint64_t draw = 0;
    for (size_t i = 0; i < t.numel; ++i) {
      float z;
      do {
        const float u1 = philox_uniform(key, draw++) + 0x1p-25f;  // avoid log(0)
        const float u2 = philox_uniform(key, draw++);
        z = std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853071795864f * u2);
      } while (std::fabs(z) > 2.0f);
      dst[i] = z * config.initializer_range;
    }
  }
}

}  // namespace bertperf
