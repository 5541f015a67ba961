#include "perf/step_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/errors.h"
#include "core/json_fields.h"

namespace bertperf::perf {

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
  p.comm_s = p.devices > 1 ? all_reduce_s(in.gradient_bytes, in.topology, in.schedule) : 0.0;
  p.exposed_comm_s = exposed_comm_s(p.comm_s, in.backward_fraction * p.compute_s, in.overlap_fraction);
  p.step_s = p.compute_s + p.exposed_comm_s;
  p.samples_per_s = p.devices * in.local_batch / p.step_s;
  return p;
}

RunPrediction predict_run(const StepPrediction& step, const RunInputs& in) {
  BERT_CHECK(in.global_batch > 0 && in.eval_interval_samples > 0 && in.eval_device_samples_per_s > 0,
             "global batch ", in.global_batch, ", eval interval ", in.eval_interval_samples, ", eval rate ",
             in.eval_device_samples_per_s);
  RunPrediction r;
  r.steps = in.samples_to_converge / in.global_batch;
  r.evals = in.samples_to_converge / in.eval_interval_samples;
  r.train_s = r.steps * step.step_s;
  r.eval_s = r.evals * (in.eval_samples / (step.devices * in.eval_device_samples_per_s) + in.eval_fixed_s);
  r.startup_s = in.startup_s;
  r.time_to_train_s = r.startup_s + r.train_s + r.eval_s;
  return r;
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

std::vector<RcpTable> load_rcp_tables(const std::string& path) {
  const Json doc = read_json_file(path);
  JsonFields top(doc, path);
  top.optional<std::string>("notes", "");
  const Json& tables = top.raw("tables");
  top.reject_unknown();
  if (!tables.is_array() || tables.empty()) throw_input(path, "field 'tables' must be a non-empty array");
  std::vector<RcpTable> out;
  for (size_t t = 0; t < tables.size(); ++t) {
    JsonFields tf(tables[t], cat(path, ": tables[", t, "]"));
    RcpTable table;
    const Json& rulesets = tf.raw("rulesets");
    const Json& points = tf.raw("points");
    tf.reject_unknown();
    if (!rulesets.is_array() || rulesets.empty()) throw_input(tf.where(), "'rulesets' must be a non-empty array");
    for (const Json& r : rulesets) {
      if (!r.is_string()) throw_input(tf.where(), "'rulesets' holds strings such as \"2.1.0\"");
      table.rulesets.push_back(r.get<std::string>());
    }
    if (!points.is_array() || points.empty()) throw_input(tf.where(), "'points' must be a non-empty array");
    for (size_t i = 0; i < points.size(); ++i) {
      JsonFields f(points[i], cat(tf.where(), ": points[", i, "]"));
      RcpPoint p{f.required<double>("global_batch"), f.required<double>("mean_samples")};
      f.reject_unknown();
      if (p.global_batch <= 0 || p.mean_samples <= 0 ||
          (!table.points.empty() && p.global_batch <= table.points.back().global_batch))
        throw_input(f.where(), "points need positive values in increasing global_batch order");
      table.points.push_back(p);
    }
    out.push_back(table);
  }
  return out;
}

const RcpTable& rcp_table_for(const std::vector<RcpTable>& tables, const std::string& ruleset) {
  std::string known;
  for (const auto& t : tables)
    for (const auto& r : t.rulesets) {
      if (r == ruleset) return t;
      known += known.empty() ? r : ", " + r;
    }
  throw_input("RCP", cat("no RCP table for ruleset '", ruleset, "' (known: ", known, ")"));
}

std::string ruleset_of_round(const std::string& round) {
  if (round.size() < 2 || round[0] != 'v') throw_input("round", cat("a round is written vX.Y, got '", round, "'"));
  return round.substr(1) + ".0";
}

}  // namespace bertperf::perf
