// Small learnable pretraining data for tests that train: segment A repeats one word and segment B
// another (the next word id for "IsNext", a random one otherwise), so a masked token is predictable
// from the rest of its segment and the NSP label from the two words; a tiny model's loss falls
// within a few dozen steps. Written in the variable-length MLPerf layout, and the tiny BERT's config
// (tiny_bert.h: benchmark.json + config.json) beside it in a scratch folder.
#pragma once

#include <filesystem>
#include <random>
#include <string>

#include "data/layouts.h"
#include "tiny_bert.h"

namespace bertperf::testing {

// Special ids of the synthetic vocabulary: 0 padding, 1 [CLS], 2 [SEP], 3 [MASK]; words from 4.
inline SequenceStore synthetic_sequences(int count, int seq_len, int vocab, int predictions, uint32_t seed) {
  std::mt19937 rng(seed);
  SequenceStore s;
  const int words = vocab - 4;
  for (int n = 0; n < count; ++n) {
    const int length = seq_len / 2 + int(rng() % (seq_len / 2 + 1));  // [CLS] ... [SEP] ... [SEP]
    const int split = 1 + int(rng() % (length - 3)) + 1;
    const int8_t random_next = int8_t(rng() % 2);
    const int word_a = int(rng() % words);
    const int word_b = random_next ? int(rng() % words) : (word_a + 1) % words;
    std::vector<int32_t> tokens(length);
    std::vector<int8_t> segments(length);
    for (int i = 0; i < length; ++i) {
      segments[i] = i > split ? 1 : 0;
      tokens[i] = 4 + (segments[i] ? word_b : word_a);
    }
    tokens[0] = 1;
    tokens[split] = 2;
    tokens[length - 1] = 2;
    std::vector<int32_t> positions, labels;
    for (int i = 1; i < length - 1 && int(positions.size()) < predictions; ++i) {
      if (i == split || rng() % 7 != 0) continue;
      positions.push_back(i);
      labels.push_back(tokens[i]);
      tokens[i] = 3;
    }
    if (positions.empty()) {  // every sequence predicts something
      positions.push_back(1);
      labels.push_back(tokens[1]);
      tokens[1] = 3;
    }
    s.input_ids.insert(s.input_ids.end(), tokens.begin(), tokens.end());
    s.segment_ids.insert(s.segment_ids.end(), segments.begin(), segments.end());
    s.token_offsets.push_back(s.input_ids.size());
    s.mlm_positions.insert(s.mlm_positions.end(), positions.begin(), positions.end());
    s.mlm_ids.insert(s.mlm_ids.end(), labels.begin(), labels.end());
    s.mlm_offsets.push_back(s.mlm_positions.size());
    s.nsp_labels.push_back(random_next);
  }
  return s;
}

struct SyntheticRun {
  std::filesystem::path dir;
  std::string config_path;
};

// Writes train and eval shards, benchmark.json and config.json under `dir` for the tiny BERT (tiny_bert.h); `patch`
// changes the config (e.g. {{"max_samples", 640}}).
inline SyntheticRun write_synthetic_run(const std::filesystem::path& dir,
                                        const nlohmann::ordered_json& patch = nlohmann::ordered_json::object()) {
  const TinyBert model;
  const int seq_len = 32, predictions = 5;
  write_tiny_benchmark(dir);
  write_varlength((dir / "train.hdf5").string(), synthetic_sequences(512, seq_len, model.vocab, predictions, 1));
  write_varlength((dir / "eval.hdf5").string(), synthetic_sequences(64, seq_len, model.vocab, predictions, 2));
  return {dir, write_tiny_config(dir / "config.json", patch)};
}

}  // namespace bertperf::testing
