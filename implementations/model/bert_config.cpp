// bert_config.json reading and validation (bert_config.h).
#include "model/bert_config.h"

namespace bertperf {

BertConfig bert_config_from_json(const Json& object, const std::string& where) {
  JsonFields f(object, where);
  BertConfig c;
  c.vocab_size = f.required<int>("vocab_size");
  c.hidden_size = f.required<int>("hidden_size");
  c.num_hidden_layers = f.required<int>("num_hidden_layers");
  c.num_attention_heads = f.required<int>("num_attention_heads");
  c.intermediate_size = f.required<int>("intermediate_size");
  c.hidden_act = f.required<std::string>("hidden_act");
  c.hidden_dropout_prob = f.required<float>("hidden_dropout_prob");
  c.attention_probs_dropout_prob = f.required<float>("attention_probs_dropout_prob");
  c.max_position_embeddings = f.required<int>("max_position_embeddings");
  c.type_vocab_size = f.required<int>("type_vocab_size");
  c.initializer_range = f.required<float>("initializer_range");
  f.reject_unknown();

  auto positive = [&](const char* key, int v) {
    if (v <= 0) throw_input(where, cat("field '", key, "' must be positive, got ", v));
  };
  positive("vocab_size", c.vocab_size);
  positive("hidden_size", c.hidden_size);
  positive("num_hidden_layers", c.num_hidden_layers);
  positive("num_attention_heads", c.num_attention_heads);
  positive("intermediate_size", c.intermediate_size);
  positive("max_position_embeddings", c.max_position_embeddings);
  positive("type_vocab_size", c.type_vocab_size);
  if (c.hidden_size % c.num_attention_heads != 0)
    throw_input(where, cat("hidden_size ", c.hidden_size, " is not a multiple of num_attention_heads ",
                           c.num_attention_heads));
  if (c.hidden_act != "gelu")
    throw_input(where, "field 'hidden_act' must be \"gelu\" (the reference's tanh GELU), got \"" + c.hidden_act + "\"");
  for (auto [key, p] : {std::pair{"hidden_dropout_prob", c.hidden_dropout_prob},
                        std::pair{"attention_probs_dropout_prob", c.attention_probs_dropout_prob}}) {
    if (!(p >= 0.0f && p < 1.0f)) throw_input(where, cat("field '", key, "' must be in [0, 1), got ", p));
  }
  return c;
}

BertConfig load_bert_config(const std::string& path) { return bert_config_from_json(read_json_file(path), path); }

Json bert_config_to_json(const BertConfig& c) {
  return Json{{"vocab_size", c.vocab_size},
              {"hidden_size", c.hidden_size},
              {"num_hidden_layers", c.num_hidden_layers},
              {"num_attention_heads", c.num_attention_heads},
              {"intermediate_size", c.intermediate_size},
              {"hidden_act", c.hidden_act},
              {"hidden_dropout_prob", c.hidden_dropout_prob},
              {"attention_probs_dropout_prob", c.attention_probs_dropout_prob},
              {"max_position_embeddings", c.max_position_embeddings},
              {"type_vocab_size", c.type_vocab_size},
              {"initializer_range", c.initializer_range}};
}

}  // namespace bertperf
