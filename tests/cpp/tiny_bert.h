// The tests' tiny BERT, once: the BertConfig factory every test builds its model from, and the one training config
// (with its benchmark.json) the tests that train write, with a JSON merge patch (RFC 7386) for what a test changes.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/bert_config.h"

namespace bertperf::testing {

// The shape of a tiny BERT; the defaults are the model the training tests learn with. Designated initializers name
// what a test changes: tiny_bert({.vocab = 50, .hidden = 8, .heads = 2}).
struct TinyBert {
  int vocab = 64;
  int hidden = 32;
  int layers = 2;
  int heads = 4;
  int intermediate = 64;
  int positions = 64;
  double dropout = 0.1;  // hidden and attention dropout
};

inline BertConfig tiny_bert(const TinyBert& shape = {}) {
  BertConfig c;
  c.vocab_size = shape.vocab;
  c.hidden_size = shape.hidden;
  c.num_hidden_layers = shape.layers;
  c.num_attention_heads = shape.heads;
  c.intermediate_size = shape.intermediate;
  c.max_position_embeddings = shape.positions;
  c.hidden_dropout_prob = static_cast<float>(shape.dropout);
  c.attention_probs_dropout_prob = static_cast<float>(shape.dropout);
  return c;
}

// The "bert_config" block of a tiny BERT, as bert_config.json writes it.
inline nlohmann::ordered_json tiny_bert_json(const TinyBert& shape = {}) {
  return {{"vocab_size", shape.vocab},
          {"hidden_size", shape.hidden},
          {"num_hidden_layers", shape.layers},
          {"num_attention_heads", shape.heads},
          {"intermediate_size", shape.intermediate},
          {"hidden_act", "gelu"},
          {"hidden_dropout_prob", shape.dropout},
          {"attention_probs_dropout_prob", shape.dropout},
          {"max_position_embeddings", shape.positions},
          {"type_vocab_size", 2},
          {"initializer_range", 0.02}};
}

// Writes `dir`/benchmark.json: the "synthetic" benchmark (target 0.5, an evaluation every 256 samples).
inline void write_tiny_benchmark(const std::filesystem::path& dir, int eval_samples = 64, int runs = 2) {
  std::filesystem::create_directories(dir);
  const nlohmann::ordered_json benchmark = {
      {"name", "synthetic"},
      {"submission_benchmark", "bert"},
      {"division", "open"},
      {"description", "test data"},
      {"target_accuracy", 0.5},
      {"eval_samples", eval_samples},
      {"eval_interval", {{"scale", 1.0}, {"per_global_batch_sample", 0.0}, {"offset", 256}, {"round_down_to", 1}}},
      {"runs", runs}};
  std::ofstream(dir / "benchmark.json") << benchmark.dump(2) << "\n";
}

// Writes the training config of the tiny BERT to `path` (beside a benchmark.json of write_tiny_benchmark): its data
// train.hdf5 and eval.hdf5 in the config's folder (sequences of at most 32 tokens, 5 predictions), batches of 8, one
// rank, the CPU backend on one thread, 1000 LAMB steps; `patch` changes it (a JSON merge patch: null removes a key).
// Returns the path.
inline std::string write_tiny_config(const std::filesystem::path& path,
                                     const nlohmann::ordered_json& patch = nlohmann::ordered_json::object()) {
  nlohmann::ordered_json config = {
      {"benchmark", "synthetic"},
      {"system", "test_cpu"},
      {"bert_config", tiny_bert_json()},
      {"data",
       {{"train_files", {"train.hdf5"}},
        {"eval_file", "eval.hdf5"},
        {"seq_len", 32},
        {"max_predictions", 5},
        {"packed", false}}},
      {"batch", {{"local_batch_size", 8}, {"grad_accum_steps", 1}, {"ranks", 1}}},
      {"backend", {{"name", "cpu"}, {"threads", 1}}},
      {"lamb",
       {{"learning_rate", 0.01},
        {"beta1", 0.9},
        {"beta2", 0.999},
        {"epsilon", 1e-06},
        {"weight_decay", 0.01},
        {"max_grad_norm", 1.0},
        {"train_steps", 1000},
        {"warmup_steps", 0},
        {"start_warmup_step", 0},
        {"poly_power", 1.0}}},
      {"eval", {{"batch_size", 16}}}};
  config.merge_patch(patch);
  std::ofstream(path) << config.dump(2) << "\n";
  return path.string();
}

}  // namespace bertperf::testing
