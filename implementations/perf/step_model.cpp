#include "perf/step_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/errors.h"

namespace bertperf::perf {

const std::vector<DeviceSpec>& device_table() {
  // Checked in order: the PCIe A100 before the SXM one. Network ports: DGX A100 (HDR) and DGX H100 (NDR).
  static const std::vector<DeviceSpec> table = {
      {"a100-pcie", "A100-PCIE", 312e12, "pcie4", "ib-hdr", "NVIDIA A100 data sheet: 312 TFLOP/s dense FP16/BF16 tensor"},
      {"a100", "A100", 312e12, "nvlink3", "ib-hdr", "NVIDIA A100 data sheet: 312 TFLOP/s dense FP16/BF16 tensor"},
      {"h100", "H100", 989e12, "nvlink4", "ib-ndr", "NVIDIA H100 SXM data sheet: 989 TFLOP/s dense BF16 tensor"},
      {"h200", "H200", 989e12, "nvlink4", "ib-ndr", "NVIDIA H200 data sheet: 989 TFLOP/s dense BF16 tensor (H100's compute)"},
  };
  return table;
}

const DeviceSpec* find_device(const std::string& model_name) {
  std::string upper = model_name;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  for (const auto& d : device_table())
    if (upper.find(d.match) != std::string::npos) return &d;
  return nullptr;
}

const DeviceSpec& device_by_name(const std::string& name) {
  std::string known;
  for (const auto& d : device_table()) {
    if (name == d.name) return d;
    known += known.empty() ? d.name : std::string(", ") + d.name;
  }
  throw_input("device", cat("unknown device '", name, "' (known: ", known, ")"));
}

double bert_train_flops_per_sample(const BertShape& s, double tokens, double masked) {
  const double h = s.hidden, l = s.layers;
  const double encoder_weights = l * (4 * h * h + 2 * h * s.intermediate);
  return 6 * encoder_weights * tokens + 12 * l * h * tokens * tokens + 6 * (h * h + h * s.vocab) * masked;
}

StepPrediction predict_step(const StepInputs& in) {
  BERT_CHECK(in.device_samples_per_s > 0, "device rate ", in.device_samples_per_s);
  BERT_CHECK(in.local_batch > 0, "local batch ", in.local_batch);
  StepPrediction p;
  p.devices = in.topology.nodes * in.topology.ranks_per_node;
  p.compute_s = in.local_batch / in.device_samples_per_s + in.fixed_step_s;
  p.comm_s = p.devices > 1 ? all_reduce_s(in.gradient_bytes, in.topology, in.algo) : 0.0;
  p.exposed_comm_s = exposed_comm_s(p.comm_s, in.backward_fraction * p.compute_s, in.overlap_fraction);
  p.step_s = p.compute_s + p.exposed_comm_s;
  p.samples_per_s = p.devices * in.local_batch / p.step_s;
  return p;
}

RunPrediction predict_run(const StepPrediction& step, double device_samples_per_s, const RunInputs& in) {
  BERT_CHECK(in.global_batch > 0 && in.eval_interval_samples > 0, "global batch ", in.global_batch,
             ", eval interval ", in.eval_interval_samples);
  RunPrediction r;
  r.steps = in.samples_to_converge / in.global_batch;
  r.evals = in.samples_to_converge / in.eval_interval_samples;
  r.train_s = r.steps * step.step_s;
  const double eval_once = in.eval_samples / (step.devices * 3.0 * device_samples_per_s) + in.eval_fixed_s;
  r.eval_s = r.evals * eval_once;
  r.startup_s = in.startup_s;
  r.time_to_train_s = r.startup_s + r.train_s + r.eval_s;
  return r;
}

double calibrate_device_rate(const StepInputs& in, const RunInputs& run, double measured_time_s) {
  auto time_at = [&](double rate) {
    StepInputs s = in;
    s.device_samples_per_s = rate;
    return predict_run(predict_step(s), rate, run).time_to_train_s;
  };
  // The time falls as the rate grows; bisect on a log scale.
  double lo = 1e-6, hi = 1e9;
  if (time_at(hi) >= measured_time_s)
    throw_input("calibration", cat("a measured time of ", measured_time_s,
                                   " s is shorter than the start-up, evals and communication alone"));
  for (int i = 0; i < 200; ++i) {
    const double mid = std::sqrt(lo * hi);
    (time_at(mid) > measured_time_s ? lo : hi) = mid;
  }
  return std::sqrt(lo * hi);
}

double rcp_mean_samples(const std::vector<RcpPoint>& table, double global_batch, bool* clamped) {
  BERT_CHECK(!table.empty(), "empty RCP table");
  if (clamped) *clamped = false;
  if (global_batch <= table.front().global_batch || global_batch >= table.back().global_batch) {
    const RcpPoint& end = global_batch <= table.front().global_batch ? table.front() : table.back();
    if (clamped) *clamped = global_batch != end.global_batch;
    return end.mean_samples;
  }
  for (size_t i = 1; i < table.size(); ++i) {
    const RcpPoint &a = table[i - 1], &b = table[i];
    if (global_batch <= b.global_batch)
      return (b.mean_samples - a.mean_samples) / (b.global_batch - a.global_batch) * (global_batch - a.global_batch) +
             a.mean_samples;
  }
  return table.back().mean_samples;
}

double expected_samples_to_converge(double rcp_mean, double eval_interval_samples) {
  return rcp_mean + 0.5 * eval_interval_samples;
}

}  // namespace bertperf::perf
