// The hyperparameter config of one (benchmark, system) pair: benchmarks/bert/<benchmark>/<system>.json.
// Everything a timed run needs besides the seed: model, data, batch, LAMB, schedule, eval cadence,
// target, limits, ranks and threads. Loaded strictly (core/json_fields.h): every bad field gets one
// line naming the file and the field.
//
// The benchmark-wide rules (target accuracy, eval set size, eval cadence formula, number of runs)
// live once per benchmark in benchmark.json beside the configs; a config names its benchmark and
// may override the eval interval and the sample limit. File layout (all keys required unless
// marked optional):
//   { "notes": str (optional), "benchmark": str, "system": str,
//     "bert_config": {bert_config.json fields} | "path/to/bert_config.json",
//     "init_checkpoint": str (optional, "" = random init; an FP8 run also resumes the file's FP8 scaling state),
//     "data": { "train_files": [path or glob, ...], "eval_file": path, "seq_len": int,
//               "max_predictions": int, "packed": bool (training batches hold packed rows: unpacked shards are packed
//               by the reader, packed shards keep their rows and need true; harness/reader_plan.h) },
//     "batch": { "local_batch_size": int, "grad_accum_steps": int, "ranks": int },
//     "backend": { "name": "cpu" | "cpu-f64" | "cpu-bf16" | "cpu-async" | "cuda" | ..., "capture": bool (optional,
//                  default true: replay the step as one captured graph where the backend can), "record_slots": int
//                  (optional, default 16: steps the host may launch between its reads of their records,
//                  harness/train_step.h), and the backend's own
//                  options, e.g. CPU "threads" (backends/cpu/cpu_options.h), cpu-bf16 "gemm": "auto" | "onednn" |
//                  "emulated" and "isa": "avx512_bf16" | "amx" (backends/cpu/cpu_bf16_options.h), cpu-async
//                  "delay_us" (backends/cpu/cpu_async_options.h) or CUDA "device", "attention"
//                  (backends/cuda/cuda_options.h); registry/registry.h } (optional: cpu, all threads),
//     "distributed": { "clip": "per_micro_batch" (the reference's, default) | "after_reduction",
//                      "balanced_batches": bool (optional, default false: each rank reads its own shards; true:
//                      every step's global batch is dealt out by real tokens, data/reader.h),
//                      "reduction": { "algorithm": "allreduce" (default) | "bucketed" | "hierarchical",
//                                     "bucket_mb": number (optional, bucketed: MiB per bucket, default 25),
//                                     "shard_optimizer": bool (optional, ZeRO-1 LAMB; with "allreduce" only) }
//                                   (optional; comm/reducer.h) } (optional),
//     "lamb": { "learning_rate", "beta1", "beta2", "epsilon", "weight_decay", "max_grad_norm",
//               "train_steps", "warmup_steps", "start_warmup_step", "poly_power" },
//     "eval": { "batch_size": int, "interval_samples": int (optional) },
//     "max_samples": int (optional) }
// Paths are relative to the config's directory; "${VAR}" in a path is taken from the environment.
// benchmark.json: { "name", "submission_benchmark", "division" (optional, only "open"),
//   "description"/"notes" (optional), "target_accuracy", "eval_samples", "runs",
//   "eval_interval": {"scale", "per_global_batch_sample", "offset", "round_down_to"},
//   "max_samples" (optional) }
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/reducer.h"
#include "model/bert_config.h"
#include "optim/hyperparams.h"
#include "registry/registry.h"

namespace bertperf {


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
  BackendSpec backend;                // where the model runs
  bool clip_after_reduction = false;  // clip the reduced gradient, not each micro-batch's (harness/train_step.h)
  bool balanced_batches = false;      // deal each global batch out by real tokens (ReaderOptions::balance)
  ReductionOptions reduction;         // how gradients are summed over ranks (comm/reducer.h)
  LambHyperparams lamb;
  // Eval and stopping. After loading, eval_interval_samples and max_samples are always resolved
  // (> 0): from the config, else the benchmark's cadence formula / the end of the LR schedule.
  int64_t eval_interval_samples = 0;
  int64_t eval_samples = 10000;
  int eval_batch_size = 16;
  double target_accuracy = 0.720;
  int64_t max_samples = 0;  // abort when reached (sequences, in every layout)
  // Abort after this many optimizer steps (0: no step limit). Without max_samples in the config or
  // the benchmark, a run is the LR schedule's train_steps optimizer steps in every layout, and
  // max_samples is the most sequences those steps can hold (a packed row holds several).
  int64_t max_steps = 0;
  // From benchmark.json.
  std::string submission_benchmark = "bert";  // the MLPerf keyword logged and used as result folder
  int runs = 10;                              // runs per result set
  std::string division;  // "open" when the benchmark is not the closed one (mini); "" = the system's

  int64_t global_batch_size() const { return int64_t(local_batch_size) * grad_accum_steps * ranks; }
};

// A job of `ranks` ranks for `config`: InputError naming the config when its batch.ranks says another number.
void check_job_ranks(const TrainConfig& config, int ranks);

// Reads and validates a config and its benchmark.json. With `check_data` the train file patterns
// are expanded and every data file must exist; without it (validating configs for machines that
// hold the data) the patterns are kept as written.
TrainConfig load_train_config(const std::string& path, bool check_data = true);

// What training `config` needs in host memory on one rank, from the shapes alone (nothing is built): the
// parameters with their gradients, LAMB moments and the fp32 host copy made at start, and the activations of the
// largest batch (train or eval). A lower bound (backend workspaces are left out). For a backend whose memory is not
// host memory (a GPU's) only the host copy counts: the rest lives on the device.
struct MemoryEstimate {
  double parameters = 0;        // elements
  double parameter_bytes = 0;   // weights, gradients, moments, host copy
  double activation_bytes = 0;  // forward activations and backward working memory
  double total() const { return parameter_bytes + activation_bytes; }
};
MemoryEstimate estimate_memory(const TrainConfig& config);
// The machine's physical memory in bytes.
double physical_memory_bytes();
// An InputError naming the config and the figures when the estimate is over `available_bytes`.
void check_memory(const TrainConfig& config, double available_bytes);

// The MLPerf BERT rule: FLOOR(scale * (per_global_batch_sample * GBS + offset), round_down_to);
// the closed-division numbers are 0.05, 230.23, 3,000,000 and 25,000.
struct EvalCadence {
  double scale = 0.05;
  double per_global_batch_sample = 230.23;
  double offset = 3000000;
  int64_t round_down_to = 25000;
  int64_t interval(int64_t global_batch_size) const;
};

// The sample count at which evaluation k (k = 1, 2, ...) happens: k * interval, rounded up to
// whole global batches as the rules allow (GBS 448, interval 150,000 -> 150,080, 300,160, ...).
int64_t eval_point_samples(int64_t k, int64_t interval, int64_t global_batch_size);

}  // namespace bertperf
