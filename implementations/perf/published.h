// Published MLPerf results as the scaling model's validation set: the list in
// benchmarks/bert/mlperf/reference/published_results.json, the figures read back from published result
// trees (result_*.txt), the RCP table (benchmarks/bert/mlperf/reference/rcp.json), and the validation itself:
// each GPU type's device rate calibrated from its one single-node "calibration" result, then every
// other result predicted twice, from its logged samples (the speed model alone) and from the RCP
// (the whole model).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "perf/step_model.h"

namespace bertperf::perf {

struct PublishedResult {
  std::string id, round, submitter, system, device, role, tree, inter, algo, source, note;
  int nodes = 1;
  int gpus_per_node = 8;
  int nics_per_node = 8;
  int64_t global_batch = 0;
  double olympic_minutes = 0;  // before RCP scaling
  double mean_samples = 0;     // samples trained, mean over the runs
  std::string inputs_from = "recorded";  // "tree" once read from the result logs
  bool network_assumed = false;          // a multi-node system whose network no source describes
};

std::vector<PublishedResult> load_published_results(const std::string& path);

// What a result folder's logs say: runs, their one global batch size, the olympic mean of
// run_stop - run_start (a run without run_stop status success counts as infinite) and the mean
// train_samples. Unreadable or inconsistent logs are an InputError naming file and line.
struct TreeSummary {
  int runs = 0;
  int successes = 0;
  int64_t global_batch = 0;
  double olympic_minutes = 0;
  double mean_samples = 0;
};
TreeSummary read_result_tree(const std::string& dir);

std::vector<RcpPoint> load_rcp_table(const std::string& path);

// Model constants shared by every prediction of a validation.
struct ModelConstants {
  double gradient_bytes = 0;        // BERT-large's gradient as all-reduced (fp16: 2 bytes a parameter)
  double overlap_fraction = 0;      // the published recipes reduce after the backward
  double fixed_step_s = 0;
  RunInputs run;                    // eval and start-up costs (global batch and samples are set per result)
};

// The run inputs of one result: its global batch, eval interval (the benchmark's formula) and samples.
struct ResultCase {
  StepInputs step;
  RunInputs run;
};

struct ValidationRow {
  PublishedResult result;
  std::string calibrated_from;  // id of the calibration result
  double device_samples_per_s = 0;
  double eval_interval = 0;
  double rcp_samples = 0;       // expected samples to converge from the RCP
  double predicted_logged_minutes = 0;  // at the logged samples
  double predicted_rcp_minutes = 0;     // at the RCP samples
  StepPrediction step;
  double error_logged = 0;      // (predicted - measured) / measured
  double error_rcp = 0;
};

struct Validation {
  std::vector<ValidationRow> rows;  // predicted results, in file order
  std::vector<ValidationRow> calibrations;
  // Over the results whose system is described (network_assumed false), and over all of them.
  double median_abs_error_logged = 0;
  double median_abs_error_rcp = 0;
  double median_abs_error_logged_all = 0;
  double median_abs_error_rcp_all = 0;
  int described = 0;
};

// eval_interval(gbs) gives the benchmark's eval interval for a global batch.
Validation validate(const std::vector<PublishedResult>& results, const std::vector<RcpPoint>& rcp,
                    const ModelConstants& constants, int64_t (*eval_interval)(int64_t));

// The step and run inputs for one published result at a device rate.
ResultCase result_case(const PublishedResult& r, const ModelConstants& c, double eval_interval,
                       double device_samples_per_s);

}  // namespace bertperf::perf
