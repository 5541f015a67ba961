// Published MLPerf BERT results as the scaling model's data: the data set
// benchmarks/bert/mlperf/reference/published_systems.json (one row per closed-division system with logs,
// derived from the published result trees by `python -m bertperf_compliance.published`), the model
// fitted from it, and the leave-one-out validation.
//
// The fitted model (fit_model), from a set of published systems:
// - per device class: the training rate r and the fixed cost of a step a, so that a step computes in
//   (b / r + a) at b samples a device (the efficiency r * b / (b + a * r) falls at small batches);
//   fitted by robust least squares (Huber weights on the relative error of the time to train, 20
//   reweightings) over the class's systems, their start-up and eval time taken from their own logs
//   where the logs measure them; a * r (in samples: the batch a device at which half a step is the fixed
//   cost) is pulled towards the median a * r of the accelerator classes that ran at more than one batch
//   (one pseudo-observation), and a kept >= 0;
// - per submission round: a factor on the compute time (software generations differ), the median of
//   measured / predicted time over the round's systems, fitted alternately with the classes (4 passes)
//   and 1 for the newest round;
// - start-up: a number of steps (measured start-up / step time from the logs), the class's median
//   where 3 or more of its systems measure it, else the median over all;
// - eval: the class's eval rate a device (10,000 samples over eval_stop - eval_start) where its logs
//   measure it, else r times the ratio of eval rate to training rate of a typical class (the median
//   over the classes whose logs measure it of each one's median);
// - the gradient all-reduce: fp16 (2 bytes a parameter), the fastest of ring, hierarchical and tree
//   (comm_model.h) on the node's links, not hidden behind the backward; a network port runs at a share of
//   its line rate, the network efficiency, one for every class: the whole fit is made at each efficiency of
//   a grid from 1 down to 0.25, and the one whose fit predicts its own systems best (the least Huber loss of
//   the relative errors at their logged samples) kept;
// - the samples to converge: the RCP samples (the RCP mean of the round's ruleset at the global batch,
//   plus half an eval interval) times a ratio the published results show, log(samples / RCP samples) =
//   an effect of the global batch (submitters at one batch share the reference hyperparameters for it):
//   the median of the batch's systems, + an effect of the device class (its recipes: the A30 results
//   needed 14-34% more at every batch): the median over the class's systems of what the batch effect
//   leaves. A group of fewer than 3 systems has no effect (ratio 1 where neither has one). The speed
//   terms are fitted at the samples each result logged, so this term only moves predictions at the RCP
//   samples;
// - a CPU-only system (0 accelerators a node) is one device a node of a CPU class (devices.h), at its
//   class's rate times the node's peak over the class's reference node's.
//
// validate() predicts every usable system from a model fitted without it, in one of three ways of holding
// results out (Holdout): the result alone, its whole family (the same submitter's results of the same
// device class, in every round and at every node count: a new system has no twin in the data), or every
// result of its round and later ones (the model as it could have been fitted before the round). Copies of
// a result in a later round are never used (the data set marks them), so no result is predicted from its
// own runs. Each prediction gets a 90% interval from the residuals of the other families' results of its
// node band and device class (Interval), and the validation says how many results fall inside theirs.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "perf/comm_model.h"
#include "perf/devices.h"
#include "perf/network.h"
#include "perf/step_model.h"

namespace bertperf::perf {

struct PublishedSystem {
  // As the data set holds it (compliance/bertperf_compliance/published.py says what each field means).
  std::string id, round, tree, status, accelerator, host_processor, host_processors_per_node,
      host_processor_core_count, host_processor_frequency, host_networking, host_networking_topology,
      accelerator_interconnect, framework, same_runs_as;
  int nodes = 0;
  int per_node = 0;  // accelerators a node; 1 for a CPU-only system of a CPU class (its device is the node)
  int64_t global_batch = 0;
  int runs = 0, converged = 0;
  std::optional<double> olympic_minutes, mean_samples, eval_interval, first_eval_samples, startup_s, eval_s,
      interval_samples_per_s, init_s;
  std::optional<int> gradient_accumulation;
  double evals = 0;
  double scaling_factor = 1;
  // Derived when loaded.
  const DeviceClass* device = nullptr;  // nullptr: no class of the table matches the accelerator
  std::string submitter;                // the tree's organisation ("Azure-HazyResearch")
  std::string family;                   // submitter group and device class (system_family); "" without a class
  std::optional<Network> network;       // the network the description names (host_networking, else topology)
  std::optional<CpuNode> cpu;           // a CPU class's node, as the description names it
  bool cpu_assumed = false;             // part of it is the class's reference node (the description is silent)
  double device_scale = 1;              // the device's speed relative to its class's fit (a CPU node's peak
                                        // over the reference's, DeviceClass::scale_of; a stated power over the
                                        // class's, DeviceClass::power_scale)

  int devices() const { return nodes * per_node; }
};

// Reads and checks the data set; a bad file is an InputError naming it and the row.
std::vector<PublishedSystem> load_published_systems(const std::string& path, const DeviceTable& devices);

// A result's family: its submitter's group and its device class ("nvidia a100-sxm-80gb"). A submitter's
// group joins the names one organisation submits under: names are cut into lower-case words at '-' and
// '_' ("Azure-HazyResearch": azure, hazyresearch), a few short names are read as the long one
// (kSubmitterAliases in published.cpp: smc is supermicro), and two submitters that share a word are one
// group (Azure, Azure-HazyResearch and HazyResearch; NVIDIA and NVIDIA_CoreWeave). The group is named by
// the word most of its submitters' names hold (of a tie, the alphabetically first). Sets `family` of every system with a device class.
void assign_families(std::vector<PublishedSystem>& systems);

struct ModelConstants {
  double gradient_bytes = 0;  // bytes all-reduced a step
  double eval_samples = 10000;
  int64_t (*eval_interval)(int64_t) = nullptr;  // the benchmark's eval interval at a global batch
  AllReduceSchedule schedule = AllReduceSchedule::BEST;
  double overlap_fraction = 0;
  // The model's terms, each switchable to show what it brings (bertperf predict --validate --without):
  bool round_factors = true;    // false: one speed a class, whatever the round
  bool fixed_step_cost = true;  // false: a = 0, a step computes in b / rate
  bool logged_costs = true;     // false: the constants of the first model instead of the logs' start-up and
                                // eval: 3.3 s of start-up, an eval at 3x the training rate plus 0.5 s
  bool sample_ratios = true;    // false: the RCP samples as they are (no ratio by global batch and class)
  bool network_efficiency = true;  // false: the network at its line rate
};

// "round", "fixed-step", "logged-costs", "samples", "network-efficiency": the term switched off in `c`; anything
// else an InputError.
void switch_off(ModelConstants& c, const std::string& term);

// What one prediction is about.
struct SystemShape {
  int nodes = 1;
  int per_node = 1;
  int64_t global_batch = 0;
  Link intra;
  Network network;  // one node's ports
  double eval_interval = 0;
  double device_scale = 1;  // the device's speed relative to its class's fit (a CPU node's peak over the reference's)
};

// The shape of a published system; a multi-node system whose description names no network gets its
// class's guess, one port a device (*assumed set).
SystemShape shape_of(const PublishedSystem& s, double eval_interval, bool* assumed = nullptr);

struct DeviceFit {
  double rate = 0;            // training samples/s of one device at a large batch
  double fixed_step_s = 0;    // a: the step's cost beyond b / rate
  double startup_steps = 0;   // start-up in the timed region, in steps
  double eval_rate = 0;       // eval samples/s of one device
  bool eval_from_logs = false;
  double network_efficiency = 1;  // the share of a network port's line rate an all-reduce gets (the model's)
  int systems = 0;            // the class's systems the fit used
  std::string newest_round;   // the newest round among them
};

struct ScalingModel {
  std::map<std::string, DeviceFit> devices;
  std::map<std::string, double> round_factor;  // on the compute time of a step; 1 for the newest round
  std::string newest_round;
  double startup_steps = 0;      // over every system that measures it
  double eval_speed_ratio = 0;   // eval rate / training rate, over every system that measures it
  double fixed_step_prior = 0;   // the a * r (samples) every class is pulled towards
  double network_efficiency = 1;  // the share of a port's line rate the all-reduce gets
  // The samples term: log(samples / RCP samples) by global batch and by device class; a group the fit
  // gave no effect (fewer than kMinSampleGroup systems) is absent.
  std::map<int64_t, double> batch_log_ratio;
  std::map<std::string, double> class_log_ratio;
  // The round's factor; a round the model has not seen gets the newest round's.
  double factor_of(const std::string& round) const;
  // The samples to converge of a class at a global batch over the RCP samples (1 where neither has an effect).
  double sample_ratio(const std::string& device, int64_t global_batch) const;
};

// The fewest systems a global batch or device class needs for a samples effect.
constexpr int kMinSampleGroup = 3;

// Fits the model to `train` (systems with a time, samples and a device class); `rcp` gives the RCP
// samples the samples term is relative to. An empty set, or one without a single start-up or eval
// measurement, is an InputError.
ScalingModel fit_model(const std::vector<const PublishedSystem*>& train, const ModelConstants& c,
                       const std::vector<RcpTable>& rcp);

struct Prediction {
  StepInputs inputs;
  StepPrediction step;
  RunPrediction run;
  double minutes() const { return run.time_to_train_s / 60; }
};

// The nodes x devices of `shape` on its links, its network ports at `network_efficiency` of their line rate.
Topology topology_of(const SystemShape& shape, double network_efficiency);

// The time to train of `shape` at `samples` with a device's fit and a round factor; startup_s, when
// given, replaces the fit's start-up.
Prediction predict(const DeviceFit& device, double round_factor, const SystemShape& shape, double samples,
                   const ModelConstants& c, std::optional<double> startup_s = std::nullopt);

// Band of a node count: "1", "2-16", "32+" (every count above 16).
std::string node_band(int nodes);

// How validate() holds results out of the fit that predicts each one.
enum class Holdout : uint8_t {
  ONE,      // "leave-one-out": the result
  FAMILY,   // "leave-family-out": every result of its family (system_family)
  EARLIER,  // "forward-in-time": every result of its round and later rounds; only rounds whose earlier
            // rounds log eval times (eval_start/eval_stop, from v3.1) can be predicted so
};
// Every holdout, in the order above.
const std::vector<Holdout>& holdouts();
// The one the README and speed/RESULTS.md quote, and prediction intervals come from: the strictest that
// predicts every class with more than one family.
constexpr Holdout kQuotedHoldout = Holdout::FAMILY;
const char* holdout_name(Holdout holdout);
const char* holdout_meaning(Holdout holdout);  // in words
// A holdout by its name; anything else an InputError naming `where`.
Holdout parse_holdout(const std::string& name, const std::string& where);

// A 90% interval of a prediction: the measured time is expected within [low, high] x the predicted one.
// From the residuals r = log(measured / predicted) of a validation's rows (at the RCP samples): with m their
// median and w the ceil(0.9 (n + 1))-th smallest |r - m| of n (the largest where n < 9),
// [exp(m - w), exp(m + w)]: the split-conformal construction, which would cover a new result exchangeable with
// the n at least 90% of the time (n / (n + 1) where n < 9) if the n residuals came from one model; they are
// the validation's held-out ones, each from its own fit, so how often it covers is measured (Calibration).
struct Interval {
  double low = 0, high = 0;  // factors on the predicted time
  int results = 0;           // the residuals it is taken from
  bool of_class = false;     // from the device class's results at the band; false: from the band's (or all)
  std::string from;          // what it is taken from, in words
};

// The fewest results of a class at a band an interval is taken from (ceil(0.9 (n + 1)) <= n); a class with
// fewer gets its band's.
constexpr int kMinIntervalResults = 9;

struct ValidationRow {
  const PublishedSystem* system = nullptr;
  bool network_assumed = false;
  SystemShape shape;
  DeviceFit fit;
  double round_factor = 1;
  double rcp_samples = 0;     // the RCP mean at the global batch (its round's ruleset) + half an interval
  double sample_ratio = 1;    // the samples term's ratio (ScalingModel::sample_ratio) of the model without it
  double expected_samples = 0;  // rcp_samples * sample_ratio: what at_rcp is predicted at
  Prediction at_logged, at_rcp;
  double error_logged = 0;    // predicted / measured - 1
  double error_rcp = 0;
  Interval interval;          // of at_rcp, from the other families' rows (prediction_interval)
  bool inside = false;        // the measured time is inside it
};

struct Band {
  std::string name;  // a node band or a device class
  int results = 0;
  double median_abs_error = 0;
  double p90_abs_error = 0;  // the 90th percentile, linear between order statistics
  double max_abs_error = 0;
};

// The share of a band's results inside their 90% intervals.
struct Calibration {
  std::string band;
  int results = 0;
  int inside = 0;
  double share() const { return results ? double(inside) / results : 0.0; }
};

struct Validation {
  Holdout holdout = Holdout::ONE;
  std::vector<ValidationRow> rows;                              // data set order
  std::vector<std::pair<const PublishedSystem*, std::string>> skipped;  // with the reason
  std::vector<Band> bands, bands_logged;                        // by node band, at RCP / at logged samples
  std::vector<Band> devices;                                    // by device class, at RCP samples
  std::vector<Band> devices_logged;                             // by device class, at logged samples
  std::vector<Calibration> calibration;                         // by node band
};

// Predicts every usable system (a time, samples, a device class, not a copy) from a model fitted without
// what `holdout` holds out with it; says why it predicts none of the rest. "At RCP samples" is at the RCP
// samples times the samples term's ratio (expected_samples).
Validation validate(const std::vector<PublishedSystem>& systems, const std::vector<RcpTable>& rcp,
                    const ModelConstants& c, Holdout holdout = Holdout::ONE);

// One result as validate() predicts it (without its interval); nullopt, with the reason in *why, where it does
// not.
std::optional<ValidationRow> hold_out(const std::vector<PublishedSystem>& systems, const PublishedSystem& s,
                                      const std::vector<RcpTable>& rcp, const ModelConstants& c, Holdout holdout,
                                      std::string* why = nullptr);

// The 90% interval of a prediction of `device` at node band `band` from `v`'s rows, those of the family
// `except_family` left out: from the class's rows at the band where there are kMinIntervalResults, else
// from every class's at the band, else (none there) from every row.
Interval prediction_interval(const Validation& v, const std::string& band, const std::string& device,
                             const std::string& except_family = "");

// The RCP samples of a global batch in a round: the mean of its ruleset's table plus half an interval.
double rcp_samples(const std::vector<RcpTable>& rcp, const std::string& round, int64_t global_batch,
                   double eval_interval, bool* clamped = nullptr);

// Systems a model may be fitted to: a time, samples and a device class, not a copy, not `except`.
std::vector<const PublishedSystem*> fit_set(const std::vector<PublishedSystem>& systems,
                                            const std::vector<std::string>& except = {});

// Whether a model can be fitted to `train`: at least one system whose logs measure its start-up and one
// whose logs time its evals (fit_model's InputError otherwise).
bool can_fit(const std::vector<const PublishedSystem*>& train);

}  // namespace bertperf::perf
