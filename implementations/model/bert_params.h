// The BERT parameter set: the tensor table with the reference's TF variable names and shapes, the element offset
// of every tensor in a flat buffer laid out by it, and the reference's initialisation. The model, LAMB, checkpoints
// and the weights_initialization log lines all use these names.
#pragma once

#include <string>
#include <vector>

#include "core/tensor_table.h"
#include "model/bert_config.h"

namespace bertperf {

// The 398 tensors of BERT-large (5 + 16 per layer + 2 + 7), in the reference's order, with LAMB's exclusions
// marked (lamb_excluded below).
TensorTable bert_parameter_table(const BertConfig& config);

// Whether LAMB applies weight decay and the trust ratio: the reference excludes every variable whose name contains
// "LayerNorm", "layer_norm" or "bias".
bool lamb_excluded(const std::string& tf_name);

// Element offsets of the tensors in any flat buffer laid out by the table (parameters, weight copy, gradients).
struct BertLayerOffsets {
  size_t q_kernel, q_bias, k_kernel, k_bias, v_kernel, v_bias;  // (H, H), (H)
  size_t attn_out_kernel, attn_out_bias;                        // (H, H), (H)
  size_t attn_ln_gamma, attn_ln_beta;                           // (H)
  size_t inter_kernel, inter_bias;                              // (H, I), (I)
  size_t out_kernel, out_bias;                                  // (I, H), (H)
  size_t out_ln_gamma, out_ln_beta;                             // (H)
};

struct BertOffsets {
  size_t word_emb, pos_emb, type_emb;        // (V, H), (P, H), (T, H)
  size_t emb_ln_gamma, emb_ln_beta;          // (H)
  std::vector<BertLayerOffsets> layers;
  size_t pooler_kernel, pooler_bias;         // (H, H), (H)
  size_t mlm_output_bias;                    // (V)
  size_t mlm_transform_kernel, mlm_transform_bias;  // (H, H), (H)
  size_t mlm_ln_gamma, mlm_ln_beta;          // (H)
  size_t nsp_weights, nsp_bias;              // (2, H) used transposed, (2)
  // The uniform distance between the q, k and v kernels (and between their biases) of a layer: the fused QKV
  // projection reads them as three groups of one linear.
  size_t qkv_stride;
};

BertOffsets bert_offsets(const TensorTable& table, const BertConfig& config);

// Truncated-normal (2 sigma) kernels and embeddings, zero biases, unit gammas, as the reference.
void bert_init_parameters(FlatTensors& params, const BertConfig& config, uint64_t seed);

}  // namespace bertperf
