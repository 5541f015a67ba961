// The model hyperparameters: the fields of bert_config.json, BERT-tiny to BERT-large.
#pragma once

#include <string>

#include "core/json_fields.h"

namespace bertperf {

struct BertConfig {
  int vocab_size = 30522;
  int hidden_size = 1024;
  int num_hidden_layers = 24;
  int num_attention_heads = 16;
  int intermediate_size = 4096;
  std::string hidden_act = "gelu";  // the reference's "gelu" is the tanh approximation
  float hidden_dropout_prob = 0.1f;
  float attention_probs_dropout_prob = 0.1f;
  int max_position_embeddings = 512;
  int type_vocab_size = 2;
  float initializer_range = 0.02f;

  int head_size() const { return hidden_size / num_attention_heads; }
};

// Reads and validates a bert_config.json object; `where` names it in errors.
BertConfig bert_config_from_json(const Json& object, const std::string& where);
BertConfig load_bert_config(const std::string& path);
Json bert_config_to_json(const BertConfig& config);

}  // namespace bertperf
