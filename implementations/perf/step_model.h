// The step and time-to-train model of the scaling predictor.
//
// A step on D devices with local batch b (samples per device per optimizer step, all micro-batches):
//   compute  = b / device_rate + fixed_step_s
//   comm     = all-reduce of the gradient (comm_model.h) over the topology
//   step     = compute + exposed_comm_s(comm, backward_fraction * compute, overlap_fraction)
// A run to convergence at global batch G: the samples to converge S (the RCP mean at G plus half an
// eval interval, since convergence is only seen at an eval), S / G steps, S / interval evals of
// eval_samples forward passes each (a forward is 1/3 of a training pass) plus a fixed cost, and the
// start-up inside the timed region:
//   time_to_train = startup_s + S / G * step + S / interval * (eval_samples / (D * 3 * rate) + eval_fixed_s)
// The device rate comes from a measured step time, from FLOPs and a peak with an MFU, or from a
// published one-node result (calibrate_device_rate inverts the model for it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "perf/comm_model.h"

namespace bertperf::perf {

// Accelerators the predictor knows: dense 16-bit tensor peak (for the FLOPs path) and the link
// between the devices of one node.
struct DeviceSpec {
  const char* name;        // "a100", "h100", "h200"
  const char* match;       // substring of an MLPerf accelerator_model_name, upper case
  double peak_flops;       // dense FP16/BF16 tensor FLOP/s
  const char* intra_link;  // link_table() name
  const char* inter_link;  // the network port of the vendor's reference node (one per device)
  const char* source;
};
const std::vector<DeviceSpec>& device_table();
// The device whose `match` occurs in `model_name` (case-insensitive), or nullptr.
const DeviceSpec* find_device(const std::string& model_name);
// By table name ("a100"); an unknown name is an InputError listing the known ones.
const DeviceSpec& device_by_name(const std::string& name);

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
  AllReduceAlgo algo = AllReduceAlgo::kRing;
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
  double eval_fixed_s = 0.5;        // per eval, beyond the forward passes (gathering, host work)
  double startup_s = 3.3;           // inside the timed region before the first step
};

struct RunPrediction {
  double steps = 0;
  double evals = 0;
  double train_s = 0;
  double eval_s = 0;
  double startup_s = 0;
  double time_to_train_s = 0;
};

RunPrediction predict_run(const StepPrediction& step, double device_samples_per_s, const RunInputs& in);

// The device rate that makes predict_run(predict_step(...)) reproduce a measured time to train:
// `in` with device_samples_per_s ignored, `run` with the measured samples, and the measured time.
// An InputError when the time is too short for the start-up, evals and communication alone.
double calibrate_device_rate(const StepInputs& in, const RunInputs& run, double measured_time_s);

// RCP means: (global batch, mean samples to converge) as the RCP checker uses them after pruning,
// sorted by batch.
struct RcpPoint {
  double global_batch = 0;
  double mean_samples = 0;
};

// The mean samples at `global_batch`, interpolated linearly between the neighbouring points as the
// RCP checker does; outside the table's range the nearest end, with `clamped` set.
double rcp_mean_samples(const std::vector<RcpPoint>& table, double global_batch, bool* clamped = nullptr);

// Expected samples to converge at a global batch: the RCP mean plus half an eval interval.
double expected_samples_to_converge(double rcp_mean, double eval_interval_samples);

}  // namespace bertperf::perf
