#include "perf/published.h"

#include <algorithm>
#include <cmath>
#include <set>

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

double median(std::vector<double> v) {
  BERT_CHECK(!v.empty(), "median of nothing");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

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
    s.network = parse_network(s.host_networking);
    if (!s.network) s.network = parse_network(s.host_networking_topology);
    out.push_back(std::move(s));
  }
  return out;
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
  p.inputs.topology = Topology{shape.nodes, shape.per_node, shape.network.ports, shape.intra, network_link(shape.network)};
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

struct Observation {
  double cu = 0, ca = 0, y = 0, w0 = 0;  // cu * (1 / rate) + ca * a ~ y, weight w0
};

// Huber-weighted least squares of y ~ cu * u + ca * a with a >= 0 (a = 0 unless fit_a), on relative residuals.
std::pair<double, double> robust_fit(const std::vector<Observation>& obs, bool fit_a) {
  constexpr double kHuber = 0.05;
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
    for (const auto* t : train_) {
      shapes_.push_back(shape_of(*t, double(c.eval_interval(t->global_batch))));
      const SystemShape& sh = shapes_.back();
      comm_.push_back(t->devices() > 1 ? all_reduce_s(c.gradient_bytes,
                                                       Topology{sh.nodes, sh.per_node, sh.network.ports, sh.intra,
                                                                network_link(sh.network)},
                                                       c.schedule)
                                       : 0.0);
    }
  }

  ScalingModel fit() {
    ScalingModel m;
    if (train_.empty()) throw_input("fit", "no published systems to fit the model to");
    // Start-up in steps, and eval rates, from the logs.
    std::vector<double> steps_all, ratio_all;
    std::map<std::string, std::vector<double>> steps_of, eval_of, ratio_of;
    for (const auto* t : train_) {
      const double T = *t->olympic_minutes * 60;
      if (t->startup_s && t->interval_samples_per_s) {
        const double n = *t->startup_s / (double(t->global_batch) / *t->interval_samples_per_s);
        steps_all.push_back(n), steps_of[t->device->name].push_back(n);
      }
      if (t->eval_s && *t->eval_s > 0.01) {
        const double er = c_.eval_samples / (t->devices() * *t->eval_s) / t->device_scale;  // at the reference
        const double train_s = T - t->startup_s.value_or(0) - t->evals * *t->eval_s;
        eval_of[t->device->name].push_back(er);
        if (train_s > 0) ratio_of[t->device->name].push_back(er / (*t->mean_samples / train_s / t->devices()));
      }
    }
    for (const auto& [name, r] : ratio_of) ratio_all.push_back(median(r));  // one vote a class
    if (steps_all.empty() || ratio_all.empty())
      throw_input("fit", "the published systems measure no start-up or no eval time; nothing to fit them to");
    m.startup_steps = median(steps_all);
    m.eval_speed_ratio = median(ratio_all);
    std::map<std::string, std::vector<size_t>> members;
    for (size_t i = 0; i < train_.size(); ++i) members[train_[i]->device->name].push_back(i);
    for (const auto& [name, idx] : members) {
      DeviceFit& d = m.devices[name];
      d.systems = static_cast<int>(idx.size());
      for (size_t i : idx)
        if (d.newest_round.empty() || round_key(train_[i]->round) > round_key(d.newest_round)) d.newest_round = train_[i]->round;
      const auto s = steps_of.find(name);
      d.startup_steps = s != steps_of.end() && s->second.size() >= 3 ? median(s->second) : m.startup_steps;
      const auto e = eval_of.find(name);
      d.eval_from_logs = e != eval_of.end();
      if (d.eval_from_logs) d.eval_rate = median(e->second);
    }
    // The prior on a: the accelerator classes that ran at more than one batch, fitted freely. A CPU class
    // (steps of seconds, not milliseconds) is no guide to them: it is fitted freely where it can be, and
    // pulled to the accelerators' prior only where it cannot.
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
        const auto [u, a] = fit_device(m, m.devices[name], idx, 0.0);
        if (u > 0 && a > 0) free_a.push_back(a);
      }
    }
    m.fixed_step_prior = free_a.empty() ? 0.01 : median(free_a);
    // Classes and round factors, alternately.
    for (const auto* t : train_) {
      m.round_factor[t->round] = 1.0;
      if (m.newest_round.empty() || round_key(t->round) > round_key(m.newest_round)) m.newest_round = t->round;
    }
    const int kPasses = c_.round_factors ? 4 : 1;
    for (int pass = 0; pass < kPasses; ++pass) {
      for (const auto& [name, idx] : members) {
        DeviceFit& d = m.devices[name];
        auto [u, a] = fit_device(m, d, idx, free_cpu.count(name) ? 0.0 : m.fixed_step_prior);
        if (!(u > 0)) {  // no positive rate fits (communication explains everything): the effective rate
          std::vector<double> eff;
          for (size_t i : idx)
            eff.push_back(*train_[i]->mean_samples / (*train_[i]->olympic_minutes * 60) / train_[i]->devices() /
                          train_[i]->device_scale);
          u = 1 / median(eff), a = 0;
        }
        d.rate = 1 / u, d.fixed_step_s = a;
        if (!d.eval_from_logs) d.eval_rate = m.eval_speed_ratio * d.rate;
      }
      if (pass + 1 == kPasses) break;
      std::map<std::string, std::vector<double>> ratios;
      for (size_t i = 0; i < train_.size(); ++i) {
        const PublishedSystem& t = *train_[i];
        const DeviceFit& d = m.devices[t.device->name];
        const double pred = predict(d, m.factor_of(t.round), shapes_[i], *t.mean_samples, c_).run.time_to_train_s;
        ratios[t.round].push_back(*t.olympic_minutes * 60 / pred);
      }
      for (auto& [round, r] : ratios) m.round_factor[round] *= median(r);
      const double newest = m.round_factor[m.newest_round];
      for (auto& [round, f] : m.round_factor) f /= newest;
    }
    if (c_.sample_ratios) fit_samples(m);
    return m;
  }

 private:
  // Fits (1 / rate, a) of one class; a_prior > 0 adds the pseudo-observation a = a_prior.
  std::pair<double, double> fit_device(const ScalingModel& m, const DeviceFit& d, const std::vector<size_t>& idx,
                                       double a_prior) {
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
    if (a_prior > 0) obs.push_back({0, 1, a_prior, 0.01 / (a_prior * a_prior)});
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

ScalingModel fit_model(const std::vector<const PublishedSystem*>& train, const ModelConstants& c,
                       const std::vector<RcpTable>& rcp) {
  return Fitter(train, c, rcp).fit();
}

void switch_off(ModelConstants& c, const std::string& term) {
  if (term == "round") c.round_factors = false;
  else if (term == "fixed-step") c.fixed_step_cost = false;
  else if (term == "logged-costs") c.logged_costs = false;
  else if (term == "samples") c.sample_ratios = false;
  else throw_input("--without", cat("the model's terms are 'round', 'fixed-step', 'logged-costs' and 'samples', got '",
                                    term, "'"));
}

std::string node_band(int nodes) { return nodes == 1 ? "1" : nodes <= 16 ? "2-16" : "32+"; }

double rcp_samples(const std::vector<RcpTable>& rcp, const std::string& round, int64_t global_batch,
                   double eval_interval, bool* clamped) {
  const RcpTable& table = rcp_table_for(rcp, ruleset_of_round(round));
  return expected_samples_to_converge(rcp_mean_samples(table.points, double(global_batch), clamped), eval_interval);
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
    out.push_back({name, static_cast<int>(it->second.size()), median(it->second),
                   *std::max_element(it->second.begin(), it->second.end())});
  }
  return out;
}

}  // namespace

Validation validate(const std::vector<PublishedSystem>& systems, const std::vector<RcpTable>& rcp,
                    const ModelConstants& c) {
  Validation v;
  const auto usable = fit_set(systems);
  std::map<std::string, int> per_device;
  for (const auto* s : usable) ++per_device[s->device->name];
  std::vector<std::pair<std::string, double>> by_band, by_band_logged, by_device, by_device_logged;
  for (const auto& s : systems) {
    std::string why;
    if (!s.same_runs_as.empty()) why = cat("the same runs as ", s.same_runs_as);
    else if (!s.olympic_minutes) why = "no score: more than one run failed";
    else if (!s.mean_samples) why = "the logs give no sample count (no eval epoch_num, no train_samples)";
    else if (!s.device && s.per_node == 0) why = cat("no CPU class for host processor '", s.host_processor, "'");
    else if (!s.device) why = cat("no device class for '", s.accelerator, "'");
    else if (s.devices() < 1) why = "no accelerators";
    else if (per_device[s.device->name] < 2) why = cat("the only result of device class ", s.device->name);
    if (!why.empty()) {
      v.skipped.emplace_back(&s, why);
      continue;
    }
    std::vector<const PublishedSystem*> train;
    for (const auto* t : usable)
      if (t != &s) train.push_back(t);
    const ScalingModel m = fit_model(train, c, rcp);
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
    by_band.emplace_back(node_band(s.nodes), row.error_rcp);
    by_band_logged.emplace_back(node_band(s.nodes), row.error_logged);
    by_device.emplace_back(s.device->name, row.error_rcp);
    by_device_logged.emplace_back(s.device->name, row.error_logged);
    v.rows.push_back(row);
  }
  const std::vector<std::string> order = {"1", "2-16", "32+"};
  v.bands = bands_of(by_band, order);
  v.bands_logged = bands_of(by_band_logged, order);
  v.devices = bands_of(by_device, {});
  std::sort(v.devices.begin(), v.devices.end(), [](const Band& a, const Band& b) {
    return a.systems != b.systems ? a.systems > b.systems : a.name < b.name;
  });
  std::vector<std::string> device_order;
  for (const auto& b : v.devices) device_order.push_back(b.name);
  v.devices_logged = bands_of(by_device_logged, device_order);
  return v;
}

}  // namespace bertperf::perf
