#include "perf/published.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "core/errors.h"
#include "core/json_fields.h"

namespace bertperf::perf {

namespace fs = std::filesystem;

std::vector<PublishedResult> load_published_results(const std::string& path) {
  const Json doc = read_json_file(path);
  JsonFields top(doc, path);
  top.raw("notes");
  const Json& list = top.raw("results");
  top.reject_unknown();
  if (!list.is_array() || list.empty()) throw_input(path, "field 'results' must be a non-empty array");
  std::vector<PublishedResult> out;
  for (size_t i = 0; i < list.size(); ++i) {
    JsonFields f(list[i], cat(path, ": results[", i, "]"));
    PublishedResult r;
    r.id = f.required<std::string>("id");
    r.round = f.required<std::string>("round");
    r.submitter = f.required<std::string>("submitter");
    r.system = f.required<std::string>("system");
    r.device = f.required<std::string>("device");
    r.nodes = f.required<int>("nodes");
    r.gpus_per_node = f.required<int>("gpus_per_node");
    r.global_batch = f.required<int64_t>("global_batch");
    r.olympic_minutes = f.required<double>("olympic_minutes");
    r.mean_samples = f.required<double>("mean_samples");
    r.role = f.required<std::string>("role");
    r.tree = f.optional<std::string>("tree", "");
    r.inter = f.required<std::string>("inter");
    r.nics_per_node = f.required<int>("nics_per_node");
    r.algo = f.required<std::string>("algo");
    r.source = f.required<std::string>("source");
    r.note = f.optional<std::string>("note", "");
    const std::string network = f.optional<std::string>("network", "described");
    f.reject_unknown();
    const std::string where = cat(path, ": ", r.id);
    if (network != "described" && network != "assumed")
      throw_input(where, cat("network must be 'described' or 'assumed', got '", network, "'"));
    r.network_assumed = network == "assumed";
    if (r.network_assumed && r.nodes == 1) throw_input(where, "a single-node system has no network to assume");
    if (r.role != "calibration" && r.role != "predict")
      throw_input(where, cat("role must be 'calibration' or 'predict', got '", r.role, "'"));
    if (r.nodes < 1 || r.gpus_per_node < 1 || r.nics_per_node < 1 || r.global_batch < 1 || r.olympic_minutes <= 0 ||
        r.mean_samples <= 0)
      throw_input(where, "nodes, gpus_per_node, nics_per_node, global_batch, olympic_minutes and mean_samples must be > 0");
    device_by_name(r.device);
    find_link(r.inter);
    parse_all_reduce_algo(r.algo, where);
    for (const auto& seen : out)
      if (seen.id == r.id) throw_input(where, "id listed twice");
    out.push_back(r);
  }
  return out;
}

namespace {

struct RunFigures {
  double minutes = std::numeric_limits<double>::infinity();
  double samples = -1;
  int64_t gbs = -1;
  bool success = false;
};

RunFigures read_run(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw_input(file.string(), "cannot open file");
  static const std::string kToken = ":::MLLOG ";
  RunFigures run;
  double start = -1, stop = -1;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const auto at = line.rfind(kToken);
    if (at == std::string::npos) continue;
    const std::string where = cat(file.string(), ":", n);
    Json j;
    try {
      j = Json::parse(line.substr(at + kToken.size()));
    } catch (const Json::parse_error&) {
      throw_input(where, "the :::MLLOG line is not valid JSON");
    }
    if (!j.is_object() || !j.contains("key") || !j["key"].is_string()) throw_input(where, "an :::MLLOG line without a key");
    const std::string key = j["key"];
    auto number = [&](const char* member) {
      if (!j.contains(member) || !j[member].is_number()) throw_input(where, cat("'", key, "' needs a numeric ", member));
      return j[member].get<double>();
    };
    if (key == "run_start") {
      start = number("time_ms");
    } else if (key == "run_stop") {
      stop = number("time_ms");
      const Json& md = j.value("metadata", Json::object());
      run.success = md.is_object() && md.value("status", "") == "success";
    } else if (key == "train_samples") {
      run.samples = number("value");
    } else if (key == "global_batch_size") {
      run.gbs = static_cast<int64_t>(number("value"));
    }
  }
  if (start < 0) throw_input(file.string(), "no run_start line");
  if (run.gbs < 0) throw_input(file.string(), "no global_batch_size line");
  if (run.samples < 0) throw_input(file.string(), "no train_samples line");
  if (stop >= 0 && run.success) run.minutes = (stop - start) / 60000.0;
  return run;
}

}  // namespace

TreeSummary read_result_tree(const std::string& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("result_", 0) == 0 && e.path().extension() == ".txt") files.push_back(e.path());
  }
  if (ec) throw_input(dir, "cannot read the result folder: " + ec.message());
  if (files.size() < 3) throw_input(dir, cat("needs at least 3 result_*.txt files for an olympic mean, found ", files.size()));
  std::sort(files.begin(), files.end());
  TreeSummary s;
  std::vector<double> minutes;
  double samples = 0;
  for (const auto& f : files) {
    const RunFigures r = read_run(f);
    if (s.global_batch == 0) s.global_batch = r.gbs;
    if (r.gbs != s.global_batch)
      throw_input(f.string(), cat("global_batch_size ", r.gbs, " differs from the other runs' ", s.global_batch));
    minutes.push_back(r.minutes);
    samples += r.samples;
    s.successes += r.success;
  }
  s.runs = static_cast<int>(files.size());
  std::sort(minutes.begin(), minutes.end());
  double kept = 0;
  for (size_t i = 1; i + 1 < minutes.size(); ++i) kept += minutes[i];
  s.olympic_minutes = kept / double(minutes.size() - 2);
  s.mean_samples = samples / s.runs;
  return s;
}

std::vector<RcpPoint> load_rcp_table(const std::string& path) {
  const Json doc = read_json_file(path);
  JsonFields top(doc, path);
  top.optional<std::string>("notes", "");
  const Json& points = top.raw("points");
  top.reject_unknown();
  if (!points.is_array() || points.empty()) throw_input(path, "field 'points' must be a non-empty array");
  std::vector<RcpPoint> out;
  for (size_t i = 0; i < points.size(); ++i) {
    JsonFields f(points[i], cat(path, ": points[", i, "]"));
    RcpPoint p{f.required<double>("global_batch"), f.required<double>("mean_samples")};
    f.reject_unknown();
    if (p.global_batch <= 0 || p.mean_samples <= 0 || (!out.empty() && p.global_batch <= out.back().global_batch))
      throw_input(f.where(), "points need positive values in increasing global_batch order");
    out.push_back(p);
  }
  return out;
}

ResultCase result_case(const PublishedResult& r, const ModelConstants& c, double eval_interval,
                       double device_samples_per_s) {
  const DeviceSpec& device = device_by_name(r.device);
  ResultCase out;
  out.step.device_samples_per_s = device_samples_per_s;
  out.step.fixed_step_s = c.fixed_step_s;
  out.step.local_batch = double(r.global_batch) / (r.nodes * r.gpus_per_node);
  out.step.gradient_bytes = c.gradient_bytes;
  out.step.topology = Topology{r.nodes, r.gpus_per_node, r.nics_per_node, find_link(device.intra_link), find_link(r.inter)};
  out.step.algo = parse_all_reduce_algo(r.algo, r.id);
  out.step.overlap_fraction = c.overlap_fraction;
  out.run = c.run;
  out.run.global_batch = double(r.global_batch);
  out.run.eval_interval_samples = eval_interval;
  out.run.samples_to_converge = r.mean_samples;
  return out;
}

namespace {

double median_abs(std::vector<double> v) {
  if (v.empty()) return 0;
  for (double& x : v) x = std::fabs(x);
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

Validation validate(const std::vector<PublishedResult>& results, const std::vector<RcpPoint>& rcp,
                    const ModelConstants& constants, int64_t (*eval_interval)(int64_t)) {
  Validation v;
  std::map<std::string, ValidationRow> rate_of;  // device -> its calibration
  for (const auto& r : results) {
    if (r.role != "calibration") continue;
    if (rate_of.count(r.device))
      throw_input(r.id, cat("a second calibration result for device '", r.device, "' (the first is ",
                            rate_of[r.device].result.id, ")"));
    if (r.nodes != 1) throw_input(r.id, "a calibration result must be a single-node result");
    ValidationRow row;
    row.result = r;
    row.eval_interval = double(eval_interval(r.global_batch));
    const ResultCase c = result_case(r, constants, row.eval_interval, 1.0);
    row.device_samples_per_s = calibrate_device_rate(c.step, c.run, r.olympic_minutes * 60);
    row.calibrated_from = r.id;
    rate_of[r.device] = row;
    v.calibrations.push_back(row);
  }
  std::vector<double> logged, from_rcp, logged_all, from_rcp_all;
  for (const auto& r : results) {
    if (r.role != "predict") continue;
    const auto cal = rate_of.find(r.device);
    if (cal == rate_of.end()) throw_input(r.id, cat("no calibration result for device '", r.device, "'"));
    ValidationRow row;
    row.result = r;
    row.calibrated_from = cal->second.result.id;
    row.device_samples_per_s = cal->second.device_samples_per_s;
    row.eval_interval = double(eval_interval(r.global_batch));
    ResultCase c = result_case(r, constants, row.eval_interval, row.device_samples_per_s);
    row.step = predict_step(c.step);
    row.predicted_logged_minutes = predict_run(row.step, row.device_samples_per_s, c.run).time_to_train_s / 60;
    row.rcp_samples = expected_samples_to_converge(rcp_mean_samples(rcp, double(r.global_batch)), row.eval_interval);
    c.run.samples_to_converge = row.rcp_samples;
    row.predicted_rcp_minutes = predict_run(row.step, row.device_samples_per_s, c.run).time_to_train_s / 60;
    row.error_logged = row.predicted_logged_minutes / r.olympic_minutes - 1;
    row.error_rcp = row.predicted_rcp_minutes / r.olympic_minutes - 1;
    if (!r.network_assumed) {
      logged.push_back(row.error_logged);
      from_rcp.push_back(row.error_rcp);
    }
    logged_all.push_back(row.error_logged);
    from_rcp_all.push_back(row.error_rcp);
    v.rows.push_back(row);
  }
  v.described = static_cast<int>(logged.size());
  v.median_abs_error_logged = median_abs(logged);
  v.median_abs_error_rcp = median_abs(from_rcp);
  v.median_abs_error_logged_all = median_abs(logged_all);
  v.median_abs_error_rcp_all = median_abs(from_rcp_all);
  return v;
}

}  // namespace bertperf::perf
