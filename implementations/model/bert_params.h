// The BERT parameter set: the tensor table with the reference's TF variable names and shapes, and
// typed views into a flat buffer laid out by it. The model, LAMB, checkpoints and the
// weights_initialization log lines all use these names.
#pragma once

#include <vector>

#include "core/tensor_table.h"
#include "model/bert_config.h"

namespace bertperf {

// The 398 tensors of BERT-large (5 + 16 per layer + 2 + 7), in the reference's order.
TensorTable bert_parameter_table(const BertConfig& config);

// Whether LAMB applies weight decay and the trust ratio: the reference excludes every variable whose
// name contains "LayerNorm", "layer_norm" or "bias".
bool lamb_excluded(const std::string& tf_name);

// Views of one flat buffer (parameters, or gradients with the same layout).
template <typename T>
struct BertLayerView {
  T* q_kernel; T* q_bias; T* k_kernel; T* k_bias; T* v_kernel; T* v_bias;  // (H, H), (H)
  T* attn_out_kernel; T* attn_out_bias;                                  // (H, H), (H)
  T* attn_ln_gamma; T* attn_ln_beta;                                     // (H)
  T* inter_kernel; T* inter_bias;                                        // (H, I), (I)
  T* out_kernel; T* out_bias;                                            // (I, H), (H)
  T* out_ln_gamma; T* out_ln_beta;                                       // (H)
};

template <typename T>
struct BertView {
  T* word_emb; T* pos_emb; T* type_emb;   // (V, H), (P, H), (T, H)
  T* emb_ln_gamma; T* emb_ln_beta;        // (H)
  std::vector<BertLayerView<T>> layers;
  T* pooler_kernel; T* pooler_bias;       // (H, H), (H)
  T* mlm_output_bias;                     // (V)
  T* mlm_transform_kernel; T* mlm_transform_bias;  // (H, H), (H)
  T* mlm_ln_gamma; T* mlm_ln_beta;        // (H)
  T* nsp_weights; T* nsp_bias;            // (2, H) used transposed, (2)
};

BertView<float> bert_view(FlatTensors& flat, const BertConfig& config);
BertView<const float> bert_view(const FlatTensors& flat, const BertConfig& config);

// Truncated-normal (2 sigma) kernels and embeddings, zero biases, unit gammas, as the reference.
void bert_init_parameters(FlatTensors& params, const BertConfig& config, uint64_t seed);

}  // namespace bertperf
