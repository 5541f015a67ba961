// The hyperparameter config of one (benchmark, system) pair: benchmarks/bert/<benchmark>/<system>.json.
// Everything a timed run needs besides the seed: model, data, batch, LAMB, schedule, eval cadence,
// target, limits, ranks and threads. Loaded strictly (core/json_fields.h): every bad field gets one
// line naming the file and the field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/bert_config.h"

namespace bertperf {

struct LambHyperparams {
  double learning_rate = 0;       // opt_base_learning_rate
  double beta1 = 0.9;             // opt_lamb_beta_1
  double beta2 = 0.999;           // opt_lamb_beta_2
  double epsilon = 1e-6;          // opt_lamb_epsilon
  double weight_decay = 0.01;     // opt_lamb_weight_decay_rate
  double max_grad_norm = 1.0;     // global-norm clip
  int64_t train_steps = 0;        // opt_learning_rate_training_steps (T, in optimizer steps)
  int64_t warmup_steps = 0;       // opt_learning_rate_warmup_steps / num_warmup_steps
  int64_t start_warmup_step = 0;  // start_warmup_step
  double poly_power = 1.0;        // opt_learning_rate_decay_poly_power? (reference: 1.0)
};

struct TrainConfig {
  std::string source;         // the file it came from, for messages
  std::string benchmark;      // "bert" or "mini"
  std::string system;         // systems/<system>.json
  BertConfig model;
  // Data: HDF5 shards in one of the MLPerf layouts; paths relative to the config's directory or
  // absolute.
  std::vector<std::string> train_files;
  std::string eval_file;
  int seq_len = 512;
  int max_predictions = 76;
  bool packed = false;
  std::string init_checkpoint;  // HDF5 keyed by TF name; empty = random init from the seed
  // Batch: global = local_batch_size * grad_accum_steps * ranks.
  int local_batch_size = 0;
  int grad_accum_steps = 1;
  int ranks = 1;
  int threads = 0;  // CPU threads per rank; 0 = all
  LambHyperparams lamb;
  // Eval and stopping.
  int64_t eval_interval_samples = 0;  // 0 = the MLPerf formula from the global batch size
  int64_t eval_samples = 10000;
  int eval_batch_size = 16;
  double target_accuracy = 0.720;
  int64_t max_samples = 0;  // abort when reached (0 = derived from train_steps)

  int64_t global_batch_size() const { return int64_t(local_batch_size) * grad_accum_steps * ranks; }
};

TrainConfig load_train_config(const std::string& path);

}  // namespace bertperf
