#include "perf/published.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "core/errors.h"
#include "core/json_fields.h"

namespace bertperf::perf {

namespace {

// The first model's constants (--without logged-costs): start-up read off the v2.1 8x8 A100 logs, an
// eval forward at 3x the training rate (a forward is a third of a training pass) plus 0.5 s.
constexpr double kStartupS = 3.3, kForwardSpeedup = 3.0, kEvalFixedS = 0.5;

std::optional<double> number_or_null(JsonFields& f, const std::string& key) {
  const Json& v = f.raw(key);
  if (v.is_null()) return std::nullopt;
  if (!v.is_number()) throw_input(f.where(), cat("field '", key, "' must be a number or null, got ", json_excerpt(v)));
  return v.get<double>();
}

std::string string_or_null(JsonFields& f, const std::string& key) {
  const Json& v = f.raw(key);
  if (v.is_null()) return "";
  if (!v.is_string()) throw_input(f.where(), cat("field '", key, "' must be a string or null, got ", json_excerpt(v)));
  return v.get<std::string>();
}

// The q-quantile, linear between order statistics (numpy's default): the median at q = 0.5.
double quantile(std::vector<double> v, double q) {
  BERT_CHECK(!v.empty(), "quantile of nothing");
  std::sort(v.begin(), v.end());
  const double at = q * double(v.size() - 1);
  const size_t lo = size_t(at), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (at - double(lo)) * (v[hi] - v[lo]);
}

double median(std::vector<double> v) { return quantile(std::move(v), 0.5); }

std::vector<int> round_key(const std::string& round) {
  std::vector<int> key;
  size_t at = round.find_first_of("0123456789");
  while (at != std::string::npos && at < round.size()) {
    key.push_back(std::atoi(round.c_str() + at));
    at = round.find('.', at);
    if (at != std::string::npos) ++at;
  }
  return key;
}

}  // namespace

std::vector<PublishedSystem> load_published_systems(const std::string& path, const DeviceTable& devices) {
  const Json doc = read_json_file(path);
  JsonFields top(doc, path);
  top.raw("notes");
  const Json& list = top.raw("systems");
  top.reject_unknown();
  if (!list.is_array() || list.empty()) throw_input(path, "field 'systems' must be a non-empty array");
  std::vector<PublishedSystem> out;
  std::set<std::string> ids;
  for (size_t i = 0; i < list.size(); ++i) {
    JsonFields f(list[i], cat(path, ": systems[", i, "]"));
    PublishedSystem s;
    s.id = f.required<std::string>("id");
    JsonFields g(list[i], cat(path, ": ", s.id));
    g.required<std::string>("id");
    s.round = g.required<std::string>("round");
    s.tree = g.required<std::string>("tree");
    s.status = g.required<std::string>("status");
    s.accelerator = g.required<std::string>("accelerator");
    s.nodes = g.required<int>("nodes");
    s.per_node = g.required<int>("accelerators_per_node");
    s.host_processor = g.required<std::string>("host_processor");
    s.host_processors_per_node = g.required<std::string>("host_processors_per_node");
    s.host_processor_core_count = g.required<std::string>("host_processor_core_count");
    s.host_processor_frequency = g.required<std::string>("host_processor_frequency");
    s.host_networking = g.required<std::string>("host_networking");
    s.host_networking_topology = g.required<std::string>("host_networking_topology");
    s.accelerator_interconnect = g.required<std::string>("accelerator_interconnect");
    s.framework = g.required<std::string>("framework");
    s.runs = g.required<int>("runs");
    s.converged = g.required<int>("converged");
    s.global_batch = g.required<int64_t>("global_batch");
    if (const auto ga = number_or_null(g, "gradient_accumulation")) s.gradient_accumulation = static_cast<int>(*ga);
    s.olympic_minutes = number_or_null(g, "olympic_minutes");
    s.scaling_factor = g.required<double>("scaling_factor");
    s.mean_samples = number_or_null(g, "mean_samples");
    s.eval_interval = number_or_null(g, "eval_interval");
    s.evals = g.required<double>("evals");
    s.first_eval_samples = number_or_null(g, "first_eval_samples");
    s.startup_s = number_or_null(g, "startup_s");
    s.eval_s = number_or_null(g, "eval_s");
    s.interval_samples_per_s = number_or_null(g, "interval_samples_per_s");
    s.init_s = number_or_null(g, "init_s");
    s.same_runs_as = string_or_null(g, "same_runs_as");
    g.reject_unknown();
    const std::string where = cat(path, ": ", s.id);
    if (!ids.insert(s.id).second) throw_input(where, "id listed twice");
    ruleset_of_round(s.round);
    if (s.nodes < 1 || s.per_node < 0 || s.global_batch < 1 || s.runs < 1 || s.converged < 0 || s.converged > s.runs)
      throw_input(where, "nodes, global_batch and runs must be >= 1, accelerators_per_node >= 0, converged <= runs");
    for (const auto& v : {s.olympic_minutes, s.mean_samples, s.eval_interval, s.interval_samples_per_s})
      if (v && *v <= 0) throw_input(where, "olympic_minutes, mean_samples, eval_interval and rates must be > 0");
    if (s.eval_s && *s.eval_s < 0) throw_input(where, "eval_s must be >= 0");
    if (!s.same_runs_as.empty() && !ids.count(s.same_runs_as))
      throw_input(where, cat("same_runs_as names '", s.same_runs_as, "', not an earlier row"));
    s.device = s.per_node > 0 ? devices.match(s.accelerator) : devices.match_cpu(s.host_processor);
    if (s.device && s.device->cpu) {
      s.per_node = 1;  // the node is the device
      s.cpu = parse_cpu_node(s.host_processor, s.host_processors_per_node, s.host_processor_core_count,
                             s.host_processor_frequency, s.device->cpu->reference, where, &s.cpu_assumed);
      s.device_scale = s.device->scale_of(*s.cpu);
    }
    if (s.device && !s.device->cpu) s.device_scale = s.device->power_scale(s.accelerator);
    s.network = parse_network(s.host_networking);
    if (!s.network) s.network = parse_network(s.host_networking_topology);
    const size_t slash = s.tree.find('/');
    if (slash != std::string::npos) s.submitter = s.tree.substr(slash + 1, s.tree.find('/', slash + 1) - slash - 1);
    if (s.submitter.empty()) throw_input(where, cat("tree '", s.tree, "' is not <round>/<submitter>/results/..."));
    out.push_back(std::move(s));
  }
  assign_families(out);
  return out;
}

namespace {

// Short names of a submitter that also submits under a longer one.
const std::map<std::string, std::string> kSubmitterAliases = {
    {"smc", "supermicro"}, {"qct", "quanta"}, {"gigacomputing", "gigabyte"}};

std::vector<std::string> submitter_words(const std::string& submitter) {
  std::vector<std::string> words(1);
  for (char ch : submitter) {
    if (ch == '-' || ch == '_') words.emplace_back();
    else words.back() += char(std::tolower(static_cast<unsigned char>(ch)));
  }
  std::erase(words, std::string());
  if (words.empty()) words.push_back(submitter);
  for (auto& w : words)
    if (const auto a = kSubmitterAliases.find(w); a != kSubmitterAliases.end()) w = a->second;
  return words;
}

}  // namespace

void assign_families(std::vector<PublishedSystem>& systems) {
  // Words joined by the submitter names that hold them (union-find over words).
  std::map<std::string, std::string> parent;
  auto root = [&](std::string w) {
    while (parent.at(w) != w) w = parent.at(w);
    return w;
  };
  std::map<std::string, std::vector<std::string>> words_of;
  for (const auto& s : systems) {
    auto& words = words_of[s.submitter];
    if (!words.empty()) continue;
    words = submitter_words(s.submitter);
    for (const auto& w : words) parent.emplace(w, w);
    for (const auto& w : words) parent[root(w)] = root(words.front());
  }
  // A group's name: the word the most of its submitters' names hold (the first of a tie).
  std::map<std::string, std::map<std::string, int>> holders;  // root -> word -> names holding it
  for (const auto& [name, words] : words_of)
    for (const auto& w : std::set<std::string>(words.begin(), words.end())) ++holders[root(w)][w];
  std::map<std::string, std::string> group_name;
  for (const auto& [r, counts] : holders)
    group_name[r] = std::max_element(counts.begin(), counts.end(), [](const auto& a, const auto& b) {
                      return a.second < b.second;  // max_element keeps the first of equals: the alphabetical first
                    })->first;
  for (auto& s : systems) {
    const auto& words = words_of.at(s.submitter);
    s.family = s.device ? cat(group_name.at(root(words.front())), " ", s.device->name) : "";
  }
}

SystemShape shape_of(const PublishedSystem& s, double eval_interval, bool* assumed) {
  BERT_CHECK(s.device, "no device class for ", s.id);
  SystemShape shape;
  shape.nodes = s.nodes;
  shape.per_node = s.per_node;
  shape.global_batch = s.global_batch;
  shape.intra = find_link(s.device->intra_link);
  shape.eval_interval = eval_interval;
  shape.device_scale = s.device_scale;
  const bool guess = !s.network;
  if (guess) {
    shape.network = s.device->network_guess;
    shape.network.ports = std::max(1, s.per_node);
  } else {
    shape.network = *s.network;
  }
  if (assumed) *assumed = guess && s.nodes > 1;
  return shape;
}

double ScalingModel::factor_of(const std::string& round) const {
  const auto it = round_factor.find(round);
  if (it != round_factor.end()) return it->second;
  const auto newest = round_factor.find(newest_round);
  return newest != round_factor.end() ? newest->second : 1.0;
}

namespace {

// A group's effect of the samples term; 0 for a group without one.
template <typename K>
double effect_of(const std::map<K, double>& effects, const K& key) {
  const auto it = effects.find(key);
  return it == effects.end() ? 0.0 : it->second;
}

}  // namespace

double ScalingModel::sample_ratio(const std::string& device, int64_t global_batch) const {
  return std::exp(effect_of(batch_log_ratio, global_batch) + effect_of(class_log_ratio, device));
}

Topology topology_of(const SystemShape& shape, double network_efficiency) {
  Link port = network_link(shape.network);
  port.bandwidth_Bps *= network_efficiency;
  return Topology{shape.nodes, shape.per_node, shape.network.ports, shape.intra, port};
}

Prediction predict(const DeviceFit& device, double round_factor, const SystemShape& shape, double samples,
                   const ModelConstants& c, std::optional<double> startup_s) {
  BERT_CHECK(device.rate > 0 && device.eval_rate > 0 && round_factor > 0 && shape.device_scale > 0, "device fit rate ",
             device.rate, ", eval rate ", device.eval_rate, ", round factor ", round_factor, ", device scale ",
             shape.device_scale);
  Prediction p;
  const int devices = shape.nodes * shape.per_node;
  p.inputs.device_samples_per_s = device.rate * shape.device_scale / round_factor;
  p.inputs.fixed_step_s = device.fixed_step_s * round_factor;
  p.inputs.local_batch = double(shape.global_batch) / devices;
  p.inputs.gradient_bytes = c.gradient_bytes;
  p.inputs.topology = topology_of(shape, device.network_efficiency);
  p.inputs.schedule = c.schedule;
  p.inputs.overlap_fraction = c.overlap_fraction;
  p.step = predict_step(p.inputs);
  RunInputs run;
  run.global_batch = double(shape.global_batch);
  run.samples_to_converge = samples;
  run.eval_interval_samples = shape.eval_interval;
  run.eval_samples = c.eval_samples;
  run.eval_device_samples_per_s = device.eval_rate * shape.device_scale;
  run.startup_s = startup_s ? *startup_s : device.startup_steps * p.step.step_s;
  if (!c.logged_costs) {
    run.eval_device_samples_per_s = kForwardSpeedup * p.inputs.device_samples_per_s;
    run.eval_fixed_s = kEvalFixedS;
    if (!startup_s) run.startup_s = kStartupS;
  }
  p.run = predict_run(p.step, run);
  return p;
}

namespace {


// What the fit reads from a system's logs: its start-up in steps, and its eval rate beside its training rate
// (an eval of measurable length, and training time left when start-up and evals are taken out).
bool measures_startup(const PublishedSystem& t) { return t.startup_s && t.interval_samples_per_s; }
bool times_evals(const PublishedSystem& t) {
  return t.eval_s && *t.eval_s > 0.01 &&
         *t.olympic_minutes * 60 - t.startup_s.value_or(0) - t.evals * *t.eval_s > 0;
}

struct Observation {
  double cu = 0, ca = 0, y = 0, w0 = 0;  // cu * (1 / rate) + ca * a ~ y, weight w0
};

// The relative error at which the fit's Huber weights start to fall.
constexpr double kHuber = 0.05;

// The network efficiencies the fit tries (a geometric grid from line rate down to a quarter of it).
constexpr double kNetworkEfficiencies[] = {1.0, 0.84, 0.71, 0.59, 0.5, 0.42, 0.35, 0.3, 0.25};

// The prior's a x rate where no class ran at several batches: 10 ms at 300 samples/s.
constexpr double kDefaultFixedStepSamples = 3.0;

// Huber-weighted least squares of y ~ cu * u + ca * a with a >= 0 (a = 0 unless fit_a), on relative residuals.
std::pair<double, double> robust_fit(const std::vector<Observation>& obs, bool fit_a) {
  std::vector<double> w;
  for (const auto& o : obs) w.push_back(o.w0);
  double u = 0, a = 0;
  for (int it = 0; it < 20; ++it) {
    double suu = 0, sua = 0, saa = 0, suy = 0, say = 0;
    for (size_t i = 0; i < obs.size(); ++i) {
      const auto& o = obs[i];
      suu += w[i] * o.cu * o.cu, sua += w[i] * o.cu * o.ca, saa += w[i] * o.ca * o.ca;
      suy += w[i] * o.cu * o.y, say += w[i] * o.ca * o.y;
    }
    const double det = suu * saa - sua * sua;
    if (det > 1e-12 * suu * saa) {
      u = (suy * saa - say * sua) / det;
      a = (suu * say - sua * suy) / det;
    } else {
      a = -1;
    }
    if (a < 0 || !fit_a) u = suy / suu, a = 0;
    for (size_t i = 0; i < obs.size(); ++i) {
      const auto& o = obs[i];
      const double r = std::fabs(o.cu * u + o.ca * a - o.y) * std::sqrt(o.w0);
      w[i] = o.w0 * (r <= kHuber ? 1.0 : kHuber / r);
    }
  }
  return {u, a};
}

class Fitter {
 public:
  Fitter(const std::vector<const PublishedSystem*>& train, const ModelConstants& c, const std::vector<RcpTable>& rcp)
      : train_(train), c_(c), rcp_(rcp) {
    BERT_CHECK(c.eval_interval && c.gradient_bytes > 0, "model constants without an eval interval or gradient");
    for (const auto* t : train_) shapes_.push_back(shape_of(*t, double(c.eval_interval(t->global_batch))));
  }

  // The model at the network efficiencies of the grid, from line rate down while the Huber loss (the per-class
  // fits' own loss) of its predictions of `train` at their logged samples falls; the last that lowered it kept.
  ScalingModel fit() {
    if (train_.empty()) throw_input("fit", "no published systems to fit the model to");
    if (!can_fit(train_))
      throw_input("fit", "the published systems measure no start-up or no eval time; nothing to fit them to");
    if (!c_.network_efficiency) return fit_at(1.0);
    std::optional<ScalingModel> best;
    double best_loss = 0;
    for (double eta : kNetworkEfficiencies) {
      ScalingModel m = fit_at(eta);
      double loss = 0;
      for (size_t i = 0; i < train_.size(); ++i) loss += huber(relative_error(m, i));
      if (best && loss >= best_loss) break;  // down the grid while the loss falls
      best = std::move(m), best_loss = loss;
    }
    return *best;
  }

 private:
  static double huber(double r) {
    const double k = kHuber, x = std::fabs(r);
    return x <= k ? 0.5 * x * x : k * (x - 0.5 * k);
  }

  // predicted / measured - 1 of training system i at its logged samples.
  double relative_error(const ScalingModel& m, size_t i) const {
    const PublishedSystem& t = *train_[i];
    const Prediction p = predict(m.devices.at(t.device->name), m.factor_of(t.round), shapes_[i], *t.mean_samples, c_);
    return p.run.time_to_train_s / (*t.olympic_minutes * 60) - 1;
  }

  // The 1 / rate of a class's results as they ran (everything in the step): a scale for its prior.
  double effective_u(const std::vector<size_t>& idx) const {
    std::vector<double> eff;
    for (size_t i : idx)
      eff.push_back(*train_[i]->mean_samples / (*train_[i]->olympic_minutes * 60) / train_[i]->devices() /
                    train_[i]->device_scale);
    return 1 / median(eff);
  }

  ScalingModel fit_at(double network_efficiency) {
    ScalingModel m;
    m.network_efficiency = network_efficiency;
    comm_.clear();
    for (size_t i = 0; i < train_.size(); ++i)
      comm_.push_back(train_[i]->devices() > 1
                          ? all_reduce_s(c_.gradient_bytes, topology_of(shapes_[i], network_efficiency), c_.schedule)
                          : 0.0);
    // Start-up in steps, and eval rates, from the logs.
    std::vector<double> steps_all, ratio_all;
    std::map<std::string, std::vector<double>> steps_of, eval_of, ratio_of;
    for (const auto* t : train_) {
      const double T = *t->olympic_minutes * 60;
      if (measures_startup(*t)) {
        const double n = *t->startup_s / (double(t->global_batch) / *t->interval_samples_per_s);
        steps_all.push_back(n), steps_of[t->device->name].push_back(n);
      }
      if (times_evals(*t)) {
        const double er = c_.eval_samples / (t->devices() * *t->eval_s) / t->device_scale;  // at the reference
        const double train_s = T - t->startup_s.value_or(0) - t->evals * *t->eval_s;
        eval_of[t->device->name].push_back(er);
        ratio_of[t->device->name].push_back(er / (*t->mean_samples / train_s / t->devices()));
      }
    }
    for (const auto& [name, r] : ratio_of) ratio_all.push_back(median(r));  // one vote a class
    m.startup_steps = median(steps_all);
    m.eval_speed_ratio = median(ratio_all);
    std::map<std::string, std::vector<size_t>> members;
    for (size_t i = 0; i < train_.size(); ++i) members[train_[i]->device->name].push_back(i);
    for (const auto& [name, idx] : members) {
      DeviceFit& d = m.devices[name];
      d.systems = static_cast<int>(idx.size());
      d.network_efficiency = network_efficiency;
      for (size_t i : idx)
        if (d.newest_round.empty() || round_key(train_[i]->round) > round_key(d.newest_round)) d.newest_round = train_[i]->round;
      const auto s = steps_of.find(name);
      d.startup_steps = s != steps_of.end() && s->second.size() >= 3 ? median(s->second) : m.startup_steps;
      const auto e = eval_of.find(name);
      d.eval_from_logs = e != eval_of.end();
      if (d.eval_from_logs) d.eval_rate = median(e->second);
    }
    // The prior on a, in samples (a x rate): the accelerator classes that ran at more than one batch, fitted
    // freely. A CPU class (steps of seconds, not milliseconds) is no guide to them: it is fitted freely where
    // it can be, and pulled to the accelerators' prior only where it cannot.
    std::vector<double> free_a;
    std::set<std::string> free_cpu;
    for (const auto& [name, idx] : members) {
      std::set<long> batches;
      for (size_t i : idx) batches.insert(std::lround(10.0 * train_[i]->global_batch / train_[i]->devices()));
      if (idx.size() >= 3 && batches.size() >= 2) {
        if (train_[idx[0]]->device->cpu) {
          free_cpu.insert(name);
          continue;
        }
        const auto [u, a] = fit_device(m, m.devices[name], idx, std::nullopt);
        if (u > 0 && a > 0) free_a.push_back(a / u);
      }
    }
    m.fixed_step_prior = free_a.empty() ? kDefaultFixedStepSamples : median(free_a);
    // Classes and round factors, alternately.
    for (const auto* t : train_) {
      m.round_factor[t->round] = 1.0;
      if (m.newest_round.empty() || round_key(t->round) > round_key(m.newest_round)) m.newest_round = t->round;
    }
    const int kPasses = c_.round_factors ? 4 : 1;
    for (int pass = 0; pass < kPasses; ++pass) {
      for (const auto& [name, idx] : members) {
        DeviceFit& d = m.devices[name];
        const std::optional<Observation> prior =
            free_cpu.count(name) ? std::nullopt : std::optional(fixed_step_prior(m.fixed_step_prior, effective_u(idx)));
        auto [u, a] = fit_device(m, d, idx, prior);
        if (!(u > 0)) u = effective_u(idx), a = 0;  // no positive rate fits (communication explains everything)
        d.rate = 1 / u, d.fixed_step_s = a;
        if (!d.eval_from_logs) d.eval_rate = m.eval_speed_ratio * d.rate;
      }
      if (pass + 1 == kPasses) break;
      std::map<std::string, std::vector<double>> ratios;
      for (size_t i = 0; i < train_.size(); ++i) ratios[train_[i]->round].push_back(1 / (1 + relative_error(m, i)));
      for (auto& [round, r] : ratios) m.round_factor[round] *= median(r);
      const double newest = m.round_factor[m.newest_round];
      for (auto& [round, f] : m.round_factor) f /= newest;
    }
    if (c_.sample_ratios) fit_samples(m);
    return m;
  }

  // The pseudo-observation a = kappa x (1 / rate): a 10% departure of a from kappa x u0 (u0: the class's
  // effective 1 / rate) costs what a 1% error in one result's time does.
  static Observation fixed_step_prior(double kappa, double u0) {
    const double a0 = kappa * u0;
    return {-kappa, 1, 0, 0.01 / (a0 * a0)};
  }

  // Fits (1 / rate, a) of one class, with the prior's pseudo-observation where there is one.
  std::pair<double, double> fit_device(const ScalingModel& m, const DeviceFit& d, const std::vector<size_t>& idx,
                                       const std::optional<Observation>& prior) {
    std::vector<Observation> obs;
    for (size_t i : idx) {
      const PublishedSystem& t = *train_[i];
      const double T = *t.olympic_minutes * 60, steps = *t.mean_samples / double(t.global_batch);
      // f / scale: the round's factor on the compute, and the device's speed over its class's reference.
      const double b = double(t.global_batch) / t.devices(), rf = m.factor_of(t.round), f = rf / t.device_scale;
      Observation o;
      o.y = T - steps * comm_[i];
      o.cu = steps * b * f;
      o.ca = steps * rf;
      if (!c_.logged_costs) {
        o.y -= kStartupS + t.evals * kEvalFixedS;
        o.cu += t.evals * c_.eval_samples / t.devices() / kForwardSpeedup * f;
        o.w0 = 1 / (T * T);
        obs.push_back(o);
        continue;
      }
      if (t.startup_s) {
        o.y -= *t.startup_s;
      } else {
        o.cu += d.startup_steps * b * f, o.ca += d.startup_steps * rf, o.y -= d.startup_steps * comm_[i];
      }
      const double eval_work = t.evals * c_.eval_samples / t.devices();
      if (t.eval_s) o.y -= t.evals * *t.eval_s;
      else if (d.eval_from_logs) o.y -= eval_work / (d.eval_rate * t.device_scale);
      else o.cu += eval_work / m.eval_speed_ratio / t.device_scale;
      o.w0 = 1 / (T * T);
      obs.push_back(o);
    }
    if (prior) obs.push_back(*prior);
    return robust_fit(obs, c_.fixed_step_cost);
  }

  // The samples term: the batch effect is the median log(samples / RCP samples) of the batch's systems,
  // the class effect the median over the class's systems of what the batch effect leaves; a group of
  // fewer than kMinSampleGroup systems gets no effect.
  void fit_samples(ScalingModel& m) const {
    std::map<int64_t, std::vector<double>> by_batch;
    std::vector<double> y;
    for (const auto* t : train_) {
      const double rcp = rcp_samples(rcp_, t->round, t->global_batch, double(c_.eval_interval(t->global_batch)));
      y.push_back(std::log(*t->mean_samples / rcp));
      by_batch[t->global_batch].push_back(y.back());
    }
    for (const auto& [gbs, v] : by_batch)
      if (static_cast<int>(v.size()) >= kMinSampleGroup) m.batch_log_ratio[gbs] = median(v);
    std::map<std::string, std::vector<double>> by_class;
    for (size_t i = 0; i < train_.size(); ++i)
      by_class[train_[i]->device->name].push_back(y[i] - effect_of(m.batch_log_ratio, train_[i]->global_batch));
    for (const auto& [name, v] : by_class)
      if (static_cast<int>(v.size()) >= kMinSampleGroup) m.class_log_ratio[name] = median(v);
  }

  const std::vector<const PublishedSystem*>& train_;
  const ModelConstants& c_;
  const std::vector<RcpTable>& rcp_;
  std::vector<SystemShape> shapes_;
  std::vector<double> comm_;
};

}  // namespace

std::vector<const PublishedSystem*> fit_set(const std::vector<PublishedSystem>& systems,
                                            const std::vector<std::string>& except) {
  std::vector<const PublishedSystem*> out;
  for (const auto& s : systems) {
    if (!s.same_runs_as.empty() || !s.olympic_minutes || !s.mean_samples || !s.device || s.devices() < 1) continue;
    if (std::find(except.begin(), except.end(), s.id) != except.end()) continue;
    out.push_back(&s);
  }
  return out;
}

bool can_fit(const std::vector<const PublishedSystem*>& train) {
  return std::any_of(train.begin(), train.end(), [](const auto* t) { return measures_startup(*t); }) &&
         std::any_of(train.begin(), train.end(), [](const auto* t) { return times_evals(*t); });
}

ScalingModel fit_model(const std::vector<const PublishedSystem*>& train, const ModelConstants& c,
                       const std::vector<RcpTable>& rcp) {
  return Fitter(train, c, rcp).fit();
}

void switch_off(ModelConstants& c, const std::string& term) {
  if (term == "round") c.round_factors = false;
  else if (term == "fixed-step") c.fixed_step_cost = false;
  else if (term == "logged-costs") c.logged_costs = false;
  else if (term == "samples") c.sample_ratios = false;
  else if (term == "network-efficiency") c.network_efficiency = false;
  else throw_input("--without", cat("the model's terms are 'round', 'fixed-step', 'logged-costs', 'samples' and "
                                    "'network-efficiency', got '", term, "'"));
}

std::string node_band(int nodes) { return nodes == 1 ? "1" : nodes <= 16 ? "2-16" : "32+"; }

double rcp_samples(const std::vector<RcpTable>& rcp, const std::string& round, int64_t global_batch,
                   double eval_interval, bool* clamped) {
  const RcpTable& table = rcp_table_for(rcp, ruleset_of_round(round));
  return expected_samples_to_converge(rcp_mean_samples(table.points, double(global_batch), clamped), eval_interval);
}

const std::vector<Holdout>& holdouts() {
  static const std::vector<Holdout> all = {Holdout::ONE, Holdout::FAMILY, Holdout::EARLIER};
  return all;
}

const char* holdout_name(Holdout holdout) {
  switch (holdout) {
    case Holdout::ONE: return "leave-one-out";
    case Holdout::FAMILY: return "leave-family-out";
    case Holdout::EARLIER: break;
  }
  return "forward-in-time";
}

Holdout parse_holdout(const std::string& name, const std::string& where) {
  for (Holdout h : holdouts())
    if (name == holdout_name(h)) return h;
  throw_input(where, cat("the holdouts are 'leave-one-out', 'leave-family-out' and 'forward-in-time', got '", name, "'"));
}

const char* holdout_meaning(Holdout holdout) {
  switch (holdout) {
    case Holdout::ONE: return "the result alone held out";
    case Holdout::FAMILY:
      return "its family held out (the same submitter's results of its device class, every round and node count)";
    case Holdout::EARLIER: break;
  }
  return "fitted to earlier rounds only (their logs time evals from v3.1 on, so rounds from v4.0)";
}

namespace {

std::vector<Band> bands_of(const std::vector<std::pair<std::string, double>>& errors,
                           const std::vector<std::string>& order) {
  std::map<std::string, std::vector<double>> by;
  for (const auto& [name, e] : errors) by[name].push_back(std::fabs(e));
  std::vector<std::string> names = order;
  for (const auto& [name, v] : by)
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  std::vector<Band> out;
  for (const auto& name : names) {
    const auto it = by.find(name);
    if (it == by.end()) continue;
    out.push_back({name, static_cast<int>(it->second.size()), median(it->second), quantile(it->second, 0.9),
                   *std::max_element(it->second.begin(), it->second.end())});
  }
  return out;
}

// The systems a result's model is fitted to, and a key naming that set (results that share it share one fit).
std::pair<std::vector<const PublishedSystem*>, std::string> train_set(const std::vector<const PublishedSystem*>& usable,
                                                                      const PublishedSystem& s, Holdout holdout) {
  std::vector<const PublishedSystem*> train;
  for (const auto* t : usable) {
    const bool out = holdout == Holdout::ONE      ? t == &s
                     : holdout == Holdout::FAMILY ? t->family == s.family
                                                  : round_key(t->round) >= round_key(s.round);
    if (!out) train.push_back(t);
  }
  return {train, holdout == Holdout::ONE ? s.id : holdout == Holdout::FAMILY ? s.family : s.round};
}

// Why `s` cannot be predicted from `train`; "" when it can.
std::string why_not(const PublishedSystem& s, const std::vector<const PublishedSystem*>& train, Holdout holdout) {
  if (!std::any_of(train.begin(), train.end(), [&](const auto* t) { return t->device == s.device; }))
    return holdout == Holdout::ONE    ? cat("the only result of device class ", s.device->name)
           : holdout == Holdout::FAMILY ? cat("no result of device class ", s.device->name, " outside its family (",
                                              s.family, ")")
                                        : cat("no result of device class ", s.device->name, " before ", s.round);
  if (!can_fit(train))
    return cat("the rounds before ", s.round, " log no eval time (eval_start/eval_stop): no model to fit");
  return "";
}

}  // namespace

namespace {

// Why `s` is no result to predict at all; "" when it is one.
std::string not_a_result(const PublishedSystem& s) {
  if (!s.same_runs_as.empty()) return cat("the same runs as ", s.same_runs_as);
  if (!s.olympic_minutes) return "no score: more than one run failed";
  if (!s.mean_samples) return "the logs give no sample count (no eval epoch_num, no train_samples)";
  if (!s.device && s.per_node == 0) return cat("no CPU class for host processor '", s.host_processor, "'");
  if (!s.device) return cat("no device class for '", s.accelerator, "'");
  if (s.devices() < 1) return "no accelerators";
  return "";
}

// `s` predicted by the model `m` fitted without it.
ValidationRow row_of(const PublishedSystem& s, const ScalingModel& m, const std::vector<RcpTable>& rcp,
                     const ModelConstants& c) {
  ValidationRow row;
  row.system = &s;
  const double interval = double(c.eval_interval(s.global_batch));
  row.shape = shape_of(s, interval, &row.network_assumed);
  row.fit = m.devices.at(s.device->name);
  row.round_factor = m.factor_of(s.round);
  row.at_logged = predict(row.fit, row.round_factor, row.shape, *s.mean_samples, c);
  row.rcp_samples = rcp_samples(rcp, s.round, s.global_batch, interval);
  row.sample_ratio = m.sample_ratio(s.device->name, s.global_batch);
  row.expected_samples = row.rcp_samples * row.sample_ratio;
  row.at_rcp = predict(row.fit, row.round_factor, row.shape, row.expected_samples, c);
  row.error_logged = row.at_logged.minutes() / *s.olympic_minutes - 1;
  row.error_rcp = row.at_rcp.minutes() / *s.olympic_minutes - 1;
  return row;
}

// `s` held out as `holdout` says, with the fits already made (by train_set's key); nullopt and *why where it
// cannot be predicted.
std::optional<ValidationRow> hold_out(const std::vector<PublishedSystem>& systems, const PublishedSystem& s,
                                      const std::vector<RcpTable>& rcp, const ModelConstants& c, Holdout holdout,
                                      std::map<std::string, ScalingModel>& fits, std::string* why) {
  *why = not_a_result(s);
  if (!why->empty()) return std::nullopt;
  const auto [train, key] = train_set(fit_set(systems), s, holdout);
  *why = why_not(s, train, holdout);
  if (!why->empty()) return std::nullopt;
  auto fit = fits.find(key);
  if (fit == fits.end()) fit = fits.emplace(key, fit_model(train, c, rcp)).first;
  return row_of(s, fit->second, rcp, c);
}

}  // namespace

std::optional<ValidationRow> hold_out(const std::vector<PublishedSystem>& systems, const PublishedSystem& s,
                                      const std::vector<RcpTable>& rcp, const ModelConstants& c, Holdout holdout,
                                      std::string* why) {
  std::map<std::string, ScalingModel> fits;
  std::string reason;
  return hold_out(systems, s, rcp, c, holdout, fits, why ? why : &reason);
}

Validation validate(const std::vector<PublishedSystem>& systems, const std::vector<RcpTable>& rcp,
                    const ModelConstants& c, Holdout holdout) {
  Validation v;
  v.holdout = holdout;
  std::map<std::string, ScalingModel> fits;  // results that share a training set share its fit
  std::vector<std::pair<std::string, double>> by_band, by_band_logged, by_device, by_device_logged;
  for (const auto& s : systems) {
    std::string why;
    const auto row = hold_out(systems, s, rcp, c, holdout, fits, &why);
    if (!row) {
      v.skipped.emplace_back(&s, why);
      continue;
    }
    by_band.emplace_back(node_band(s.nodes), row->error_rcp);
    by_band_logged.emplace_back(node_band(s.nodes), row->error_logged);
    by_device.emplace_back(s.device->name, row->error_rcp);
    by_device_logged.emplace_back(s.device->name, row->error_logged);
    v.rows.push_back(*row);
  }
  const std::vector<std::string> order = {"1", "2-16", "32+"};
  v.bands = bands_of(by_band, order);
  v.bands_logged = bands_of(by_band_logged, order);
  v.devices = bands_of(by_device, {});
  std::sort(v.devices.begin(), v.devices.end(), [](const Band& a, const Band& b) {
    return a.results != b.results ? a.results > b.results : a.name < b.name;
  });
  std::vector<std::string> device_order;
  for (const auto& b : v.devices) device_order.push_back(b.name);
  v.devices_logged = bands_of(by_device_logged, device_order);
  // Each row's interval from the other families' rows, and how many fall inside theirs.
  for (auto& row : v.rows) {
    const PublishedSystem& s = *row.system;
    row.interval = prediction_interval(v, node_band(s.nodes), s.device->name, s.family);
    const double measured = *s.olympic_minutes, predicted = row.at_rcp.minutes();
    row.inside = measured >= predicted * row.interval.low && measured <= predicted * row.interval.high;
  }
  for (const auto& b : v.bands) {
    Calibration cal{b.name};
    for (const auto& row : v.rows)
      if (node_band(row.system->nodes) == b.name) ++cal.results, cal.inside += row.inside;
    v.calibration.push_back(cal);
  }
  return v;
}

Interval prediction_interval(const Validation& v, const std::string& band, const std::string& device,
                             const std::string& except_family) {
  std::vector<double> of_class, of_band, all;
  for (const auto& row : v.rows) {
    if (!except_family.empty() && row.system->family == except_family) continue;
    const double r = -std::log1p(row.error_rcp);  // log(measured / predicted)
    all.push_back(r);
    if (node_band(row.system->nodes) != band) continue;
    of_band.push_back(r);
    if (row.system->device->name == device) of_class.push_back(r);
  }
  const int n_class = static_cast<int>(of_class.size());
  const std::string at = cat(band, band == "1" ? " node" : " nodes");
  Interval out;
  const std::vector<double>* pool = &all;
  if (n_class >= kMinIntervalResults) {
    pool = &of_class, out.of_class = true;
    out.from = cat(device, "'s ", n_class, " results at ", at);
  } else if (!of_band.empty()) {
    pool = &of_band;
    out.from = cat("every class's ", of_band.size(), " results at ", at, " (", device, " has ", n_class,
                   ", fewer than ", kMinIntervalResults, ")");
  } else {
    out.from = cat("every result, ", all.size(), " (none at ", at, ")");
  }
  out.results = static_cast<int>(pool->size());
  if (out.results == 0) return out;
  const double m = median(*pool);
  std::vector<double> spread;
  for (double r : *pool) spread.push_back(std::fabs(r - m));
  std::sort(spread.begin(), spread.end());
  const size_t k = std::min(spread.size(), size_t(std::ceil(0.9 * double(spread.size() + 1))));
  out.low = std::exp(m - spread[k - 1]), out.high = std::exp(m + spread[k - 1]);
  return out;
}

}  // namespace bertperf::perf
