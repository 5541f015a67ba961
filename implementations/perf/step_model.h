// The step and time-to-train model of the scaling predictor.
//
// A step on D devices with local batch b (samples per device per optimizer step, all micro-batches):
//   compute  = b / device_rate + fixed_step_s          (the device's efficiency falls at small b)
//   comm     = all-reduce of the gradient (comm_model.h) over the topology
//   step     = compute + exposed_comm_s(comm, backward_fraction * compute, overlap_fraction)
// A run to convergence at global batch G trains S samples in S / G steps, evaluates every interval
// (eval_samples at the devices' eval rate), and pays a start-up inside the timed region:
//   time_to_train = startup_s + S / G * step + S / interval * (eval_samples / (D * eval_rate) + eval_fixed_s)
// published.h fits every term (device rate, fixed step cost, start-up, eval rate) from published results.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "perf/comm_model.h"

namespace bertperf::perf {

// BERT's training FLOPs per sample (forward and backward): 6 * P_enc * T for the encoder's
// matrices, 12 * L * H * T^2 for attention, 6 * (H^2 + H * V) * M for the masked-LM head over M
// masked tokens. T is the real (unpadded) tokens per sample.
struct BertShape {
  int layers = 24;
  int hidden = 1024;
  int intermediate = 4096;
  int vocab = 30522;
};
double bert_train_flops_per_sample(const BertShape& shape, double tokens, double masked);

struct StepInputs {
  double device_samples_per_s = 0;  // training rate of one device (forward, backward, optimizer)
  double fixed_step_s = 0;          // per-step cost independent of the batch (launches, host work)
  double local_batch = 0;           // samples per device per optimizer step
  double gradient_bytes = 0;        // bytes all-reduced per step
  Topology topology;
  AllReduceSchedule schedule = AllReduceSchedule::RING;
  double overlap_fraction = 0;      // 0..1 of the backward that communication may hide behind
  double backward_fraction = 2.0 / 3.0;  // backward share of compute
};

struct StepPrediction {
  int devices = 1;
  double compute_s = 0;
  double comm_s = 0;          // the whole all-reduce
  double exposed_comm_s = 0;  // what the step waits for
  double step_s = 0;
  double samples_per_s = 0;   // global throughput while training
};

StepPrediction predict_step(const StepInputs& in);

struct RunInputs {
  double global_batch = 0;
  double samples_to_converge = 0;   // what the run trains before the eval that reaches the target
  double eval_interval_samples = 0;
  double eval_samples = 10000;
  double eval_device_samples_per_s = 0;  // eval rate of one device
  double eval_fixed_s = 0;          // per eval, beyond the eval samples
  double startup_s = 0;             // inside the timed region before the first step
};

struct RunPrediction {
  double steps = 0;
  double evals = 0;
  double train_s = 0;
  double eval_s = 0;
  double startup_s = 0;
  double time_to_train_s = 0;
};

RunPrediction predict_run(const StepPrediction& step, const RunInputs& in);

// RCP means: (global batch, mean samples to converge) as the RCP checker uses them after pruning,
// sorted by batch.
struct RcpPoint {
  double global_batch = 0;
  double mean_samples = 0;
};

// The mean samples at `global_batch`, interpolated linearly between the neighbouring points as the
// RCP checker does; outside the table's range the nearest end, with `clamped` set.
double rcp_mean_samples(const std::vector<RcpPoint>& table, double global_batch, bool* clamped = nullptr);

// The RCP tables of benchmarks/bert/mlperf/reference/rcp.json: one table per set of rulesets that share
// their data (1.1.0 and 2.0.0 have an older batch-448 reference; 2.1.0 to 5.0.0 share theirs).
struct RcpTable {
  std::vector<std::string> rulesets;
  std::vector<RcpPoint> points;
};
std::vector<RcpTable> load_rcp_tables(const std::string& path);
// The table of a ruleset ("2.1.0"); an unknown ruleset is an InputError listing the known ones.
const RcpTable& rcp_table_for(const std::vector<RcpTable>& tables, const std::string& ruleset);
// A round's ruleset: "v2.1" -> "2.1.0".
std::string ruleset_of_round(const std::string& round);

// Expected samples to converge at a global batch: the RCP mean plus half an eval interval.
double expected_samples_to_converge(double rcp_mean, double eval_interval_samples);

}  // namespace bertperf::perf
