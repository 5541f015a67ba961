// `bertperf predict`: the scaling model (perf/) as a command. For a config and its system description
// it predicts step time, throughput and time to train, each with a 90% interval, on the system's nodes and
// at other scales, from a model fitted to the published results
// (benchmarks/bert/mlperf/reference/published_systems.json), a row whose shape those results hold by a model
// fitted without them; with --validate it predicts every published result from a model fitted without it,
// held out three ways (published.h), and prints the errors by node count and device class and how many
// results fall inside their intervals.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <regex>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/errors.h"
#include "core/json_fields.h"
#include "harness/system_description.h"
#include "harness/train_config.h"
#include "model/bert_params.h"
#include "perf/comm_model.h"
#include "perf/devices.h"
#include "perf/network.h"
#include "perf/published.h"
#include "perf/step_model.h"

namespace bertperf::cli {

namespace fs = std::filesystem;
using namespace bertperf::perf;

namespace {

const char* const kUsage =
    "usage: bertperf predict --config CONFIG.json [options]      predict a config on its system and at other scales\n"
    "       bertperf predict --validate [--json] [--holdout H,...] predict every published result from the others\n"
    "       bertperf predict --links                             the link and device tables\n"
    "The system (default: the config's systems/<system>.json):\n"
    "  --nodes N  --gpus-per-node N  --batch GLOBAL_BATCH  --device CLASS (see --links)\n"
    "  A CPU class (a description with 0 accelerators, or --device xeon-amx, epyc-zen4) is one device a node,\n"
    "  its speed the class's rate times the node's peak over the class's reference node's:\n"
    "  --cores N  --clock-ghz F   the node's cores (all sockets) and clock (default: the description's\n"
    "                      sockets x cores and clock when it is a CPU-only one, else the class's reference node\n"
    "                      and network)\n"
    "  --network TEXT      a node's network as system descriptions write it, e.g. \"8x InfiniBand NDR 400Gb/s\"\n"
    "                      (default: the description's host_networking; one port a device of the class's guess\n"
    "                      when it names none)\n"
    "The device rate (training samples/s of one device; of one node for a CPU class), first given wins:\n"
    "  --step-time S       a measured single-device step time (seconds) at the config's local batch x accumulation\n"
    "  --device-rate R     samples/s of one device (a CPU node: a measured rate of one core x its cores)\n"
    "  --mfu F             F x the device's peak over the FLOPs of a sample (--peak-flops, --tokens-per-sample 254)\n"
    "  (default)           the device class's rate fitted to the published results; for a CPU class without\n"
    "                      any, its measured core rate (devices.json core_samples_per_s) x the node's cores\n"
    "Model: --algo ring|hierarchical|tree|best (best)  --overlap F (0: reduce after the backward)  --grad-bytes B\n"
    "  (2 a parameter)  --fixed-step-s S  --startup-s S  --eval-rate R (eval samples/s a device; default: fitted)\n"
    "  --round vX.Y (software round and RCP ruleset; default the newest)  --samples N (default: the RCP mean at\n"
    "  the global batch plus half an eval interval, times the ratio the published results at that batch and\n"
    "  of the class needed)  --scale LIST (NODESxGPUS,..., default 1xG,<system>,8x8,64x8,512x8; a CPU class\n"
    "  1x1,<system>,8x1,16x1,64x1)\n"
    "  --without TERM,...  without a term of the model: round (one speed a class whatever the round),\n"
    "                      fixed-step (no fixed cost a step), logged-costs (3.3 s start-up and evals at 3x the\n"
    "                      training rate plus 0.5 s instead of what the logs measure), samples (the RCP samples\n"
    "                      as they are, no ratio by global batch and device class), network-efficiency (the\n"
    "                      network at its line rate)\n"
    "Validation: --holdout leave-family-out (the result's family: its submitter's results of its device class),\n"
    "  leave-one-out, forward-in-time (earlier rounds only); default all three. Every time to train has a 90%\n"
    "  interval from the leave-family-out residuals of its node band and class; a row whose shape the published\n"
    "  results hold (class, nodes, devices a node, global batch) is predicted by a model fitted without them\n"
    "Files: --published F  --rcp F  --devices F (default: benchmarks/bert/mlperf/reference/ beside the config)\n"
    "  --json              one JSON object instead of tables\n";

int64_t mlperf_eval_interval(int64_t gbs) { return EvalCadence{}.interval(gbs); }

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string pct(double e) { return fmt("%+.1f%%", 100 * e); }
std::string abs_pct(double e) { return fmt("%.1f%%", 100 * std::fabs(e)); }

double bert_large_parameters() { return double(bert_parameter_table(BertConfig{}).total_elements()); }

ModelConstants model_constants(const Options& opt, double parameters) {
  ModelConstants c;
  c.gradient_bytes = parameters * opt.number("grad-bytes", 2);
  c.overlap_fraction = opt.number("overlap", 0);
  c.schedule = parse_all_reduce_schedule(opt.get("algo").value_or("best"), "--algo");
  c.eval_interval = mlperf_eval_interval;
  for (const std::string& term : opt.list("without")) switch_off(c, term);
  if (c.overlap_fraction < 0 || c.overlap_fraction > 1) throw_input("command line", "--overlap must be in [0, 1]");
  if (c.gradient_bytes <= 0) throw_input("command line", "--grad-bytes must be > 0");
  return c;
}

struct Files {
  std::string published, rcp, devices;
};

Files data_files(const Options& opt, const std::string& config_dir) {
  const fs::path base = config_dir.empty() ? fs::path("benchmarks/bert/mlperf") : fs::path(config_dir);
  return {opt.get("published").value_or((base / "reference/published_systems.json").string()),
          opt.get("rcp").value_or((base / "reference/rcp.json").string()),
          opt.get("devices").value_or((base / "reference/devices.json").string())};
}

Json band_json(const Band& b, const char* key) {
  return Json{{key, b.name},
              {"results", b.results},
              {"median_abs_error", b.median_abs_error},
              {"p90_abs_error", b.p90_abs_error},
              {"max_abs_error", b.max_abs_error}};
}

Json interval_json(const Interval& i, double minutes) {
  return Json{{"low_minutes", minutes * i.low}, {"high_minutes", minutes * i.high}, {"low", i.low},
              {"high", i.high}, {"results", i.results}, {"of_class", i.of_class}, {"from", i.from}};
}

// "2.41-2.63": an interval in minutes.
std::string interval_text(const Interval& i, double minutes) {
  return fmt("%.3f", minutes * i.low) + "-" + fmt("%.3f", minutes * i.high);
}

Json row_json(const ValidationRow& w) {
  const auto& s = *w.system;
  return Json{{"id", s.id},
              {"round", s.round},
              {"family", s.family},
              {"device", s.device->name},
              {"nodes", s.nodes},
              {"gpus_per_node", s.per_node},
              {"band", node_band(s.nodes)},
              {"global_batch", s.global_batch},
              {"network", s.nodes > 1 ? Json(network_name(w.shape.network)) : Json(nullptr)},
              {"network_assumed", w.network_assumed},
              {"cpu_node", s.cpu ? Json{{"cores", s.cpu->cores()}, {"clock_ghz", s.cpu->clock_ghz},
                                        {"assumed", s.cpu_assumed}, {"device_scale", s.device_scale}}
                                 : Json(nullptr)},
              {"mean_samples", *s.mean_samples},
              {"olympic_minutes", *s.olympic_minutes},
              {"device_samples_per_s", w.fit.rate},
              {"fixed_step_ms", 1e3 * w.fit.fixed_step_s},
              {"round_factor", w.round_factor},
              {"eval_interval", w.shape.eval_interval},
              {"step_ms", 1e3 * w.at_rcp.step.step_s},
              {"comm_ms", 1e3 * w.at_rcp.step.comm_s},
              {"startup_s", w.at_rcp.run.startup_s},
              {"predicted_logged_minutes", w.at_logged.minutes()},
              {"error_logged", w.error_logged},
              {"rcp_samples", w.rcp_samples},
              {"sample_ratio", w.sample_ratio},
              {"expected_samples", w.expected_samples},
              {"predicted_rcp_minutes", w.at_rcp.minutes()},
              {"error_rcp", w.error_rcp},
              {"interval", interval_json(w.interval, w.at_rcp.minutes())},
              {"inside", w.inside}};
}

Json validation_json(const Validation& v) {
  Json out{{"name", holdout_name(v.holdout)}, {"bands", Json::array()}, {"bands_logged", Json::array()},
           {"devices", Json::array()}, {"devices_logged", Json::array()}, {"calibration", Json::array()},
           {"rows", Json::array()}, {"skipped", Json::array()}};
  for (const auto& b : v.bands) out["bands"].push_back(band_json(b, "nodes"));
  for (const auto& b : v.bands_logged) out["bands_logged"].push_back(band_json(b, "nodes"));
  for (const auto& b : v.devices) out["devices"].push_back(band_json(b, "device"));
  for (const auto& b : v.devices_logged) out["devices_logged"].push_back(band_json(b, "device"));
  for (const auto& cal : v.calibration)
    out["calibration"].push_back(
        {{"nodes", cal.band}, {"results", cal.results}, {"inside", cal.inside}, {"share", cal.share()}});
  for (const auto& w : v.rows) out["rows"].push_back(row_json(w));
  for (const auto& [s, why] : v.skipped) out["skipped"].push_back({{"id", s->id}, {"reason", why}});
  return out;
}

struct Data {
  DeviceTable devices;
  std::vector<PublishedSystem> systems;
  std::vector<RcpTable> rcp;
};

Data load_data(const Files& files) {
  Data d{DeviceTable::load(files.devices), {}, load_rcp_tables(files.rcp)};
  d.systems = load_published_systems(files.published, d.devices);
  return d;
}

// Every holdout's validation, the quoted one first.
// Every holdout, the quoted one first.
std::vector<Holdout> quoted_first() {
  std::vector<Holdout> out = holdouts();
  std::stable_partition(out.begin(), out.end(), [](Holdout h) { return h == kQuotedHoldout; });
  return out;
}

// The validations `--holdout` names (default every holdout), the quoted one first.
std::vector<Validation> validations(const Data& data, const ModelConstants& c, const Options& opt) {
  std::vector<Holdout> chosen = quoted_first();
  if (opt.get("holdout")) {
    std::vector<Holdout> named;
    for (const std::string& name : opt.list("holdout")) named.push_back(parse_holdout(name, "--holdout"));
    std::erase_if(chosen, [&](Holdout h) { return std::find(named.begin(), named.end(), h) == named.end(); });
  }
  std::vector<Validation> out;
  for (Holdout h : chosen) out.push_back(validate(data.systems, data.rcp, c, h));
  return out;
}

void print_summary(const std::vector<Validation>& vs) {
  std::cout << "| holdout | nodes | results | median abs error | 90th percentile | max | inside the 90% interval | "
               "median at logged samples |\n|---|---|---|---|---|---|---|---|\n";
  for (const auto& v : vs)
    for (size_t i = 0; i < v.bands.size(); ++i) {
      const Band& b = v.bands[i];
      const Calibration& cal = v.calibration[i];
      std::cout << "| " << holdout_name(v.holdout) << " | " << b.name << " | " << b.results << " | "
                << abs_pct(b.median_abs_error) << " | " << abs_pct(b.p90_abs_error) << " | " << abs_pct(b.max_abs_error)
                << " | " << cal.inside << " of " << cal.results << " (" << fmt("%.2f", cal.share()) << ") | "
                << abs_pct(v.bands_logged[i].median_abs_error) << " |\n";
    }
}

int cmd_validate(const Options& opt) {
  const Data data = load_data(data_files(opt, ""));
  const ModelConstants c = model_constants(opt, bert_large_parameters());
  const std::vector<Validation> vs = validations(data, c, opt);
  if (opt.flag("json")) {
    Json out{{"quoted", holdout_name(kQuotedHoldout)}, {"modes", Json::array()}};
    for (const auto& v : vs) out["modes"].push_back(validation_json(v));
    std::cout << out.dump(1) << "\n";
    return 0;
  }
  const Validation& quoted = vs.front();
  std::cout << "Each published result predicted by a model fitted without it, at its RCP samples (the RCP mean of its\n"
               "ruleset at its global batch, plus half an eval interval, times the samples ratio of the results fitted"
            << (c.sample_ratios ? "" : "; switched off here") << "), held out three ways:\n";
  for (const auto& v : vs)
    std::cout << "- " << holdout_name(v.holdout) << ": " << holdout_meaning(v.holdout) << ": " << v.rows.size()
              << " predicted, " << v.skipped.size() << " not\n";
  std::cout << "The figures quoted are " << holdout_name(kQuotedHoldout)
            << "'s. A prediction's 90% interval: from the residuals of the other families' results of its\nnode band "
               "and class (of its band where the class has fewer than "
            << kMinIntervalResults << ").\n\n";
  print_summary(vs);
  std::cout << "\nBy device class, " << holdout_name(quoted.holdout)
            << " (median, 90th percentile, max; at the logged samples: median):\n\n"
               "| device | results | median | p90 | max | logged |\n|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < quoted.devices.size(); ++i) {
    const Band& b = quoted.devices[i];
    std::cout << "| " << b.name << " | " << b.results << " | " << abs_pct(b.median_abs_error) << " | "
              << abs_pct(b.p90_abs_error) << " | " << abs_pct(b.max_abs_error) << " | "
              << abs_pct(quoted.devices_logged[i].median_abs_error) << " |\n";
  }
  // One line a result any holdout predicts: the quoted holdout's prediction with its interval, the others' errors.
  std::map<const PublishedSystem*, std::map<Holdout, const ValidationRow*>> by_system;
  for (const auto& v : vs)
    for (const auto& w : v.rows) by_system[w.system][v.holdout] = &w;
  std::cout << "\n| result | nodes x GPUs | device | GBS | network | measured min | " << holdout_name(quoted.holdout)
            << ": samples/s/GPU, step ms (comm) | RCP samples x ratio | predicted | 90% interval | error |";
  for (const auto& v : vs)
    if (&v != &quoted) std::cout << " " << holdout_name(v.holdout) << " |";
  std::cout << " at logged samples |\n|";
  for (size_t i = 0; i < 12 + vs.size() - 1; ++i) std::cout << "---|";
  std::cout << "\n";
  for (const auto& s : data.systems) {
    const auto found = by_system.find(&s);
    if (found == by_system.end()) continue;
    const auto& modes = found->second;
    const auto q = modes.find(quoted.holdout);
    const ValidationRow& any = *modes.begin()->second;
    std::cout << "| " << s.id << " | " << s.nodes << "x" << s.per_node << " | " << s.device->name << " | "
              << s.global_batch << " | " << (s.nodes > 1 ? network_name(any.shape.network) : "-")
              << (any.network_assumed ? " (assumed)" : "") << " | " << fmt("%.3f", *s.olympic_minutes) << " | ";
    if (q == modes.end()) {
      std::cout << "- | - | - | - | - |";
    } else {
      const ValidationRow& w = *q->second;
      std::cout << fmt("%.0f", w.fit.rate / w.round_factor) << ", " << fmt("%.1f", 1e3 * w.at_rcp.step.step_s) << " ("
                << fmt("%.1f", 1e3 * w.at_rcp.step.comm_s) << ") | " << fmt("%.0f", w.rcp_samples) << " x "
                << fmt("%.3f", w.sample_ratio) << " | " << fmt("%.3f", w.at_rcp.minutes()) << " | "
                << interval_text(w.interval, w.at_rcp.minutes()) << (w.inside ? "" : " (outside)") << " | "
                << pct(w.error_rcp) << " |";
    }
    for (const auto& v : vs) {
      if (&v == &quoted) continue;
      const auto it = modes.find(v.holdout);
      std::cout << " " << (it == modes.end() ? "-" : pct(it->second->error_rcp)) << " |";
    }
    std::cout << " " << (q == modes.end() ? "-" : pct(q->second->error_logged)) << " |\n";
  }
  for (const auto& v : vs) {
    std::cout << "\nNot predicted " << holdout_name(v.holdout) << ":\n\n";
    for (const auto& [s, why] : v.skipped) std::cout << "- " << s->id << ": " << why << "\n";
  }
  return 0;
}

// "8x8" -> {8, 8}.
std::pair<int, int> parse_shape(const std::string& s) {
  static const std::regex re(R"((\d{1,6})x(\d{1,6}))");
  std::smatch m;
  if (!std::regex_match(s, m, re) || std::stoi(m[1]) < 1 || std::stoi(m[2]) < 1)
    throw_input("command line", cat("--scale entries are NODESxGPUS (e.g. 8x8), got '", s, "'"));
  return {std::stoi(m[1]), std::stoi(m[2])};
}

// A description field as text (some descriptions write counts as numbers).
std::string text_field(const Json& raw, const char* key) {
  if (!raw.contains(key) || raw.at(key).is_null()) return "";
  return raw.at(key).is_string() ? raw.at(key).get<std::string>() : raw.at(key).dump();
}

// The config, its system description and the published data beside it.
struct ConfigSystem {
  TrainConfig config;
  std::string config_dir, system_file;
  SystemDescription system;
  bool cpu_only = false;   // the description has no accelerators: its host processor is the device
  std::string model_name;  // accelerator_model_name, or host_processor_model_name where cpu_only
};

ConfigSystem read_config_system(const Options& opt) {
  ConfigSystem cs;
  cs.config = load_train_config(opt.required("config"), /*check_data=*/false);
  cs.config_dir = fs::path(cs.config.source).parent_path().string();
  cs.system_file = opt.get("system-file").value_or(find_system_file(cs.config.system, cs.config_dir));
  if (cs.system_file.empty())
    throw_input(cs.config.source, cat("no systems/", cs.config.system, ".json found above the config; give --system-file"));
  if (const auto rel = fs::path(cs.system_file).lexically_relative(fs::current_path());
      !rel.empty() && rel.string().rfind("..", 0) != 0)
    cs.system_file = rel.string();
  cs.system = load_system_description(cs.system_file);
  cs.cpu_only = cs.system.accelerators_per_node == 0;
  cs.model_name = text_field(cs.system.raw, cs.cpu_only ? "host_processor_model_name" : "accelerator_model_name");
  return cs;
}

// The system predicted: its device class, shape, node and network, from the description and the command line.
struct Target {
  const DeviceClass* device = nullptr;  // nullptr: no class (the command line gives the rate)
  bool cpu_class = false;
  int nodes = 1, gpn = 1;
  CpuNode cpu_node;
  bool cpu_assumed = false;
  double device_scale = 1;  // the device's speed over its class's fit (a CPU node's peak, a stated power)
  std::optional<Network> network;
  std::string network_note;
};

Target describe_target(const Options& opt, const ConfigSystem& cs, const Data& data, const Files& files) {
  Target t;
  t.device = opt.get("device") ? &data.devices.by_name(*opt.get("device"))
             : cs.cpu_only     ? data.devices.match_cpu(cs.model_name)
                               : data.devices.match(cs.model_name);
  t.cpu_class = t.device && t.device->cpu;
  t.nodes = int(opt.integer("nodes", cs.system.number_of_nodes, 1, 1 << 20));
  t.gpn = int(opt.integer("gpus-per-node", t.cpu_class ? 1 : std::max(1, cs.system.accelerators_per_node), 1, 1 << 16));
  if (t.cpu_class && t.gpn != 1)
    throw_input("--gpus-per-node", cat("a CPU class's device is the whole node (", t.device->name, "): give 1, not ", t.gpn));
  // A CPU class's node: the description's when it describes a CPU-only system, else the class's
  // reference node; --cores and --clock-ghz replace what they name.
  if (t.cpu_class) {
    const auto field = [&](const char* key) { return cs.cpu_only ? text_field(cs.system.raw, key) : std::string(); };
    std::string sockets = field("host_processors_per_node"), cores = field("host_processor_core_count"),
                clock = field("host_processor_frequency");
    if (opt.get("cores")) sockets = "1", cores = std::to_string(opt.integer("cores", 0, 1, 1 << 20));
    if (opt.get("clock-ghz")) {
      const double ghz = opt.number("clock-ghz", 0);
      if (ghz <= 0) throw_input("command line", "--clock-ghz must be > 0");
      clock = cat(ghz, " GHz");
    }
    t.cpu_node = parse_cpu_node(cs.cpu_only ? cs.model_name : "", sockets, cores, clock, t.device->cpu->reference,
                                cs.system_file, &t.cpu_assumed);
    t.device_scale = t.device->scale_of(t.cpu_node);
  } else if (opt.get("cores") || opt.get("clock-ghz")) {
    throw_input("command line", "--cores and --clock-ghz describe the node of a CPU class; give --device with one");
  } else if (t.device && !cs.cpu_only) {
    t.device_scale = t.device->power_scale(cs.model_name);
  }
  if (const auto text = opt.get("network")) {
    t.network = parse_network(*text);
    if (!t.network) throw_input("--network", cat("'", *text, "' names no port with a rate (e.g. \"8x InfiniBand HDR 200Gb/s\")"));
  } else if (!t.cpu_class || cs.cpu_only) {  // an accelerator system's network is not a CPU node's
    t.network = parse_network(text_field(cs.system.raw, "host_networking"));
    if (!t.network) t.network = parse_network(text_field(cs.system.raw, "host_networking_topology"));
  }
  if (!t.network && t.device) {
    t.network = t.device->network_guess;
    t.network->ports = t.gpn;
    t.network_note = t.cpu_class && !cs.cpu_only ? " (assumed: the class's; the description is of an accelerator system)"
                                                 : " (assumed: the description names no network; one port a device)";
  }
  if (!t.device && !opt.get("step-time") && !opt.get("device-rate") && !opt.get("mfu"))
    throw_input(cs.system_file, cat(cs.cpu_only ? "host processor '" : "accelerator '", cs.model_name,
                                    "' is in no device class of ", files.devices,
                                    "; give --device, --step-time, --device-rate or --mfu"));
  return t;
}

// A device fit with what --fixed-step-s and --eval-rate give.
DeviceFit with_overrides(DeviceFit fit, const Options& opt) {
  if (opt.get("fixed-step-s")) fit.fixed_step_s = opt.number("fixed-step-s", 0);
  if (opt.get("eval-rate")) fit.eval_rate = opt.number("eval-rate", 0);
  if (fit.fixed_step_s < 0 || fit.eval_rate <= 0)
    throw_input("command line", "--fixed-step-s must be >= 0, --eval-rate > 0");
  return fit;
}

// The device's speed: its class's fit, or a rate the command line gives (the first of --step-time,
// --device-rate, --mfu), or a CPU class's measured core rate; with the round (software generation and RCP
// ruleset): the newest the class was published in, unless --round.
struct DeviceSpeed {
  DeviceFit fit;
  double factor = 1;        // the round's factor on the compute time
  double device_scale = 1;  // as Target's; 1 for a rate the command line gives (this device's own)
  bool fitted = false;      // the rate is the class's fit to the published results
  std::string rate_source, round, ruleset;
  double peak = 0;          // the device's peak FLOP/s (a CPU node's from its cores and clock)
  std::optional<double> startup_s;
};

DeviceSpeed device_speed(const Options& opt, const ConfigSystem& cs, const Target& t, const ScalingModel& model,
                         const Files& files) {
  DeviceSpeed sp;
  sp.device_scale = t.device_scale;
  sp.round = model.newest_round;
  const DeviceClass* device = t.device;
  if (device && model.devices.count(device->name)) {
    sp.fit = model.devices.at(device->name);
    sp.fitted = true;
    sp.rate_source = cat("fitted to the ", sp.fit.systems, " published results of ", device->name);
    sp.round = sp.fit.newest_round;
  } else {
    sp.fit.startup_steps = model.startup_steps;
    sp.fit.network_efficiency = model.network_efficiency;
  }
  if (opt.get("round")) sp.round = *opt.get("round");
  sp.ruleset = ruleset_of_round(sp.round);
  sp.factor = model.factor_of(sp.round);
  sp.peak = t.cpu_class ? cpu_peak_flops(t.cpu_node, device->cpu->flops_per_cycle_per_core)
                        : (device ? device->peak_flops : 0.0);
  // A rate the command line gives is this device's own: no round factor, no CPU or power scaling.
  auto user_rate = [&](double rate, std::string source) {
    sp.fit.rate = rate, sp.factor = 1.0, sp.device_scale = 1.0, sp.fitted = false, sp.rate_source = std::move(source);
    if (!sp.fit.eval_from_logs) sp.fit.eval_rate = model.eval_speed_ratio * rate;
  };
  const auto& config = cs.config;
  const double per_device_step = double(config.local_batch_size) * config.grad_accum_steps;
  if (opt.get("step-time")) {
    const double s = opt.number("step-time", 0);
    if (s <= 0) throw_input("command line", "--step-time must be > 0");
    user_rate(per_device_step / s, cat("measured single-device step of ", s, " s at ", per_device_step, " samples"));
  } else if (opt.get("device-rate")) {
    const double r = opt.number("device-rate", 0);
    if (r <= 0) throw_input("command line", "--device-rate must be > 0");
    user_rate(r, "--device-rate");
  } else if (opt.get("mfu")) {
    const double mfu = opt.number("mfu", 0);
    const double p = opt.number("peak-flops", sp.peak);
    if (mfu <= 0 || mfu > 1 || p <= 0)
      throw_input("command line", "--mfu must be in (0, 1] and the device's peak known (give --peak-flops)");
    const BertShape shape{config.model.num_hidden_layers, config.model.hidden_size, config.model.intermediate_size,
                          config.model.vocab_size};
    const double tokens = opt.number("tokens-per-sample", std::min(254.0, double(config.seq_len)));
    const double flops = bert_train_flops_per_sample(shape, tokens, std::min<double>(config.max_predictions, tokens));
    user_rate(mfu * p / flops, cat("MFU ", mfu, " of ", p / 1e12, " TFLOP/s over ", flops / 1e12, " TFLOP a sample"));
  } else if (!sp.fitted && t.cpu_class && device->cpu->core_samples_per_s) {
    // A CPU class without published results: its measured core rate, for the reference node.
    sp.fit.rate = *device->cpu->core_samples_per_s * device->cpu->reference.cores();
    sp.fit.eval_rate = model.eval_speed_ratio * sp.fit.rate;
    sp.factor = 1.0;
    sp.rate_source = cat("measured ", *device->cpu->core_samples_per_s, " samples/s a core (",
                         device->cpu->core_rate_source, ")");
  } else if (!sp.fitted) {
    throw_input(files.devices, cat("device class ", device->name, " has no published results",
                                   t.cpu_class ? " and no measured core_samples_per_s" : "",
                                   "; give --step-time, --device-rate or --mfu"));
  }
  // Without a class fit, the fixed step cost is the prior's batch (a x rate) at this rate; a measured step
  // holds its own.
  if (!sp.fitted) sp.fit.fixed_step_s = opt.get("step-time") ? 0.0 : model.fixed_step_prior / sp.fit.rate;
  sp.fit = with_overrides(sp.fit, opt);
  if (opt.get("startup-s")) {
    sp.startup_s = opt.number("startup-s", 0);
    if (*sp.startup_s < 0) throw_input("command line", "--startup-s must be >= 0");
  }
  return sp;
}

// The shapes predicted: --scale's, or the system's and a default list, smallest first.
std::vector<std::pair<int, int>> scale_shapes(const Options& opt, const Target& t) {
  std::vector<std::pair<int, int>> shapes;
  if (opt.get("scale")) {
    for (const std::string& shape : opt.list("scale")) {
      shapes.push_back(parse_shape(shape));
      if (t.cpu_class && shapes.back().second != 1)
        throw_input("--scale", cat("a CPU class's device is the whole node: give NODESx1, not '", shape, "'"));
    }
  } else if (t.cpu_class) {
    shapes = {{1, 1}, {t.nodes, 1}, {8, 1}, {16, 1}, {64, 1}};
  } else {
    shapes = {{1, t.gpn}, {t.nodes, t.gpn}, {8, 8}, {64, 8}, {512, 8}};
  }
  std::sort(shapes.begin(), shapes.end(), [](auto a, auto b) { return a.first * a.second < b.first * b.second; });
  shapes.erase(std::unique(shapes.begin(), shapes.end()), shapes.end());
  return shapes;
}

// What every row is predicted with.
struct RowContext {
  const Options& opt;
  const ConfigSystem& cs;
  const Target& t;
  const DeviceSpeed& sp;
  const Data& data;
  const ModelConstants& c;
  const ScalingModel& model;
  const Validation& quoted;  // the quoted holdout's validation: the intervals' residuals
  int64_t own_gbs = 0;
  double per_device = 0;
  std::optional<double> samples;  // --samples
};

// A published result of a row's shape, as each holdout predicts it (the quoted one first).
Json published_json(const PublishedSystem& s, const RowContext& x) {
  Json modes = Json::array();
  for (Holdout h : quoted_first()) {
    std::string why;
    const auto row = hold_out(x.data.systems, s, x.data.rcp, x.c, h, &why);
    modes.push_back(row ? Json{{"mode", holdout_name(h)}, {"predicted_minutes", row->at_rcp.minutes()},
                               {"error", row->error_rcp}}
                        : Json{{"mode", holdout_name(h)}, {"predicted_minutes", nullptr}, {"reason", why}});
  }
  return Json{{"id", s.id}, {"olympic_minutes", *s.olympic_minutes}, {"modes", modes}};
}

// One shape: its step, time to train and 90% interval. Where the published table holds results of the shape
// (the class, nodes, devices a node and global batch) and the rate is the class's fit, the time is a model's
// fitted without them, and the full model's (in-sample) time is given beside it; where they are all the class
// has, the row is in-sample and says so.
Json predict_row(const RowContext& x, int n, int g) {
  const Target& t = x.t;
  const DeviceSpeed& sp = x.sp;
  const bool own = n == t.nodes && g == t.gpn;
  // Beyond the RCP table's largest global batch there is no convergence data, so a larger system
  // keeps that batch and gives each device less (as the 512-node results do), unless --samples.
  const RcpTable& rcp = rcp_table_for(x.data.rcp, sp.ruleset);
  const double largest_rcp_batch = rcp.points.back().global_batch;
  const bool capped = !x.samples && !own && x.per_device * n * g > largest_rcp_batch;
  const double local = capped ? std::floor(largest_rcp_batch / (n * g)) : (own ? x.per_device : std::floor(x.per_device));
  if (local < 1)
    throw_input("command line", cat(n, "x", g, " devices exceed the largest RCP global batch (", largest_rcp_batch,
                                    "); give --samples"));
  if (n > 1 && !t.network) throw_input(x.cs.system_file, "no network known for a multi-node shape; give --network");
  SystemShape shape;
  shape.nodes = n, shape.per_node = g;
  shape.global_batch = own ? x.own_gbs : int64_t(local) * n * g;
  shape.intra = t.device ? find_link(t.device->intra_link) : find_link("pcie4");
  shape.network = t.network.value_or(Network{1, 100, Fabric::ETHERNET, false});
  // Another shape keeps one port a device if the system's network has one, else its ports a node.
  if (!own && t.network && t.network->ports == t.gpn && g != t.gpn) shape.network.ports = g;
  shape.eval_interval = double(own && shape.global_batch == x.cs.config.global_batch_size()
                                   ? x.cs.config.eval_interval_samples
                                   : mlperf_eval_interval(shape.global_batch));
  shape.device_scale = sp.device_scale;
  // The published results of this shape, and the model without them.
  std::vector<const PublishedSystem*> theirs;
  std::vector<std::string> ids;
  for (const PublishedSystem* s : fit_set(x.data.systems))
    if (sp.fitted && s->device == t.device && s->nodes == n && s->per_node == g && s->global_batch == shape.global_batch)
      theirs.push_back(s), ids.push_back(s->id);
  // The model the row is predicted with: the one fitted without those results, where the class has others.
  const ScalingModel* model = &x.model;
  DeviceFit fit = sp.fit;
  double factor = sp.factor;
  std::optional<ScalingModel> without;
  if (!theirs.empty()) {
    without = fit_model(fit_set(x.data.systems, ids), x.c, x.data.rcp);
    if (without->devices.count(t.device->name)) {
      model = &*without;
      fit = with_overrides(without->devices.at(t.device->name), x.opt);
      factor = without->factor_of(sp.round);
    }
  }
  struct Time {
    Prediction p;
    double samples = 0, ratio = 1;
  };
  auto time_of = [&](const ScalingModel& m, const DeviceFit& f, double rf, bool* clamped) {
    Time out;
    out.ratio = t.device && !x.samples ? m.sample_ratio(t.device->name, shape.global_batch) : 1.0;
    out.samples = x.samples ? *x.samples
                            : out.ratio * expected_samples_to_converge(
                                              rcp_mean_samples(rcp.points, double(shape.global_batch), clamped),
                                              shape.eval_interval);
    out.p = predict(f, rf, shape, out.samples, x.c, sp.startup_s);
    return out;
  };
  bool clamped = false;
  const Time time = time_of(*model, fit, factor, &clamped);
  const Prediction& p = time.p;
  const bool held_out = model != &x.model;
  const Json in_sample = held_out ? Json(time_of(x.model, sp.fit, sp.factor, nullptr).p.minutes()) : Json(nullptr);
  const Interval interval = prediction_interval(x.quoted, node_band(n), t.device ? t.device->name : "(no class)");
  Json row{{"shape", cat(n, "x", g)}, {"devices", n * g}, {"global_batch", shape.global_batch},
           {"local_batch", double(shape.global_batch) / (n * g)}, {"batch_capped", capped}, {"config_system", own},
           {"compute_ms", 1e3 * p.step.compute_s}, {"comm_ms", 1e3 * p.step.comm_s},
           {"exposed_comm_ms", 1e3 * p.step.exposed_comm_s}, {"step_ms", 1e3 * p.step.step_s},
           {"samples_per_s", p.step.samples_per_s}, {"samples_to_converge", time.samples}, {"sample_ratio", time.ratio},
           {"rcp_clamped", clamped && !x.samples}, {"eval_interval", shape.eval_interval},
           {"startup_s", p.run.startup_s}, {"steps", p.run.steps}, {"evals", p.run.evals},
           {"time_to_train_minutes", p.minutes()}, {"interval", interval_json(interval, p.minutes())},
           {"held_out", held_out ? Json(ids) : Json::array()}, {"in_sample_minutes", in_sample},
           {"in_sample_only", !theirs.empty() && !held_out}, {"published", Json::array()}};
  for (const PublishedSystem* s : theirs) row["published"].push_back(published_json(*s, x));
  return row;
}

void print_rows(const Json& rows) {
  std::printf("%-8s %7s %7s %6s %11s %9s %9s %11s %11s %7s %9s  %s\n", "shape", "devices", "GBS", "local",
              "compute ms", "comm ms", "step ms", "samples/s", "samples", "evals", "TTT min", "90% interval");
  std::vector<std::pair<std::string, std::vector<std::string>>> interval_sources;  // in the rows' order
  for (const auto& r : rows) {
    const double ttt = r["time_to_train_minutes"].get<double>();
    const Json& iv = r["interval"];
    std::printf("%-8s %7d %7lld %5.0f%s %11.1f %9.2f %9.1f %11.0f %10.0f%s %7.1f %9.3f  %.3f-%.3f%s\n",
                r["shape"].get<std::string>().c_str(), r["devices"].get<int>(),
                (long long)r["global_batch"].get<int64_t>(), r["local_batch"].get<double>(),
                r["batch_capped"].get<bool>() ? "^" : " ", r["compute_ms"].get<double>(), r["comm_ms"].get<double>(),
                r["step_ms"].get<double>(), r["samples_per_s"].get<double>(), r["samples_to_converge"].get<double>(),
                r["rcp_clamped"].get<bool>() ? "*" : " ", r["evals"].get<double>(), ttt,
                iv["low_minutes"].get<double>(), iv["high_minutes"].get<double>(),
                r["config_system"].get<bool>() ? "  <-" : "");
    const std::string from = iv["from"].get<std::string>();
    auto source = std::find_if(interval_sources.begin(), interval_sources.end(), [&](auto& e) { return e.first == from; });
    if (source == interval_sources.end()) source = interval_sources.insert(source, {from, {}});
    source->second.push_back(r["shape"].get<std::string>());
    if (r["in_sample_only"].get<bool>())
      std::printf("         in-sample: the published results of this shape are all its class has\n");
    if (!r["in_sample_minutes"].is_null())
      std::printf("         fitted without the published result%s of this shape; with %s (in-sample) %.3f min\n",
                  r["held_out"].size() == 1 ? "" : "s", r["held_out"].size() == 1 ? "it" : "them",
                  r["in_sample_minutes"].get<double>());
    for (const auto& p : r["published"]) {
      std::string modes;
      for (const auto& m : p["modes"])
        modes += cat("; ", m["mode"].get<std::string>(), " ",
                     m["predicted_minutes"].is_null()
                         ? std::string("not predicted")
                         : fmt("%.3f", m["predicted_minutes"].get<double>()) + " (" + pct(m["error"].get<double>()) + ")");
      std::printf("         published: %s %.3f min%s\n", p["id"].get<std::string>().c_str(),
                  p["olympic_minutes"].get<double>(), modes.c_str());
    }
  }
  std::cout << "\n90% intervals from the " << holdout_name(kQuotedHoldout) << " residuals of";
  for (const auto& [from, shapes] : interval_sources) {
    std::cout << "\n  ";
    for (size_t i = 0; i < shapes.size(); ++i) std::cout << (i ? ", " : "") << shapes[i];
    std::cout << ": " << from;
  }
  std::cout << "\n";
}

int cmd_config(const Options& opt) {
  const ConfigSystem cs = read_config_system(opt);
  const Files files = data_files(opt, cs.config_dir);
  const Data data = load_data(files);
  const Target t = describe_target(opt, cs, data, files);
  ModelConstants c = model_constants(opt, double(bert_parameter_table(cs.config.model).total_elements()));
  c.eval_samples = double(cs.config.eval_samples);
  const int64_t own_gbs = opt.integer("batch", cs.config.global_batch_size(), 1, int64_t(1) << 40);
  const double per_device = double(own_gbs) / (t.nodes * t.gpn);
  if (per_device < 1) throw_input("--batch", cat(own_gbs, " samples a step leave less than one a device on ", t.nodes * t.gpn));
  const ScalingModel model = fit_model(fit_set(data.systems), c, data.rcp);  // every published result
  const DeviceSpeed sp = device_speed(opt, cs, t, model, files);
  std::optional<double> samples;
  if (opt.get("samples") && !((samples = opt.number("samples", 0)) > 0))
    throw_input("command line", "--samples must be > 0");
  const Validation quoted = validate(data.systems, data.rcp, c, kQuotedHoldout);  // the intervals'
  const RowContext x{opt, cs, t, sp, data, c, model, quoted, own_gbs, per_device, samples};
  Json rows = Json::array();
  for (auto [n, g] : scale_shapes(opt, t)) rows.push_back(predict_row(x, n, g));

  const std::string net = t.network ? network_name(*t.network) + t.network_note : std::string("-");
  // The speed of this system's device: the class's fit (for its reference node) times the device's scale.
  const double own_rate = sp.fit.rate * sp.device_scale / sp.factor;
  Json cpu = nullptr;
  std::string cpu_text;
  if (t.cpu_class) {
    cpu = Json{{"sockets", t.cpu_node.sockets}, {"cores", t.cpu_node.cores()}, {"clock_ghz", t.cpu_node.clock_ghz},
               {"isa", t.device->cpu->isa}, {"peak_flops", sp.peak}, {"assumed", t.cpu_assumed},
               {"device_scale", sp.device_scale}, {"core_samples_per_s", own_rate / t.cpu_node.cores()}};
    cpu_text = cat("CPU node ", t.cpu_node.cores(), " cores at ", fmt("%.2f", t.cpu_node.clock_ghz), " GHz, ",
                   t.device->cpu->isa, " ", fmt("%.3g", sp.peak / 1e12), " TFLOP/s",
                   t.cpu_assumed ? " (partly assumed: the class's reference node)" : "", "; ",
                   fmt("%.3f", own_rate / t.cpu_node.cores()), " samples/s a core\n");
  }
  if (opt.flag("json")) {
    std::cout << Json{{"config", cs.config.source}, {"system_file", cs.system_file},
                      {"device", t.device ? t.device->name : ""}, {"device_samples_per_s", own_rate}, {"cpu_node", cpu},
                      {"device_scale", sp.device_scale}, {"fixed_step_ms", 1e3 * sp.fit.fixed_step_s * sp.factor},
                      {"startup_steps", sp.fit.startup_steps}, {"eval_samples_per_s", sp.fit.eval_rate * sp.device_scale},
                      {"rate_source", sp.rate_source}, {"round", sp.round}, {"ruleset", sp.ruleset}, {"network", net},
                      {"network_assumed", !t.network_note.empty()}, {"network_efficiency", sp.fit.network_efficiency},
                      {"algo", schedule_name(c.schedule)}, {"overlap", c.overlap_fraction},
                      {"gradient_bytes", c.gradient_bytes}, {"interval_holdout", holdout_name(kQuotedHoldout)},
                      {"rows", rows}}
                     .dump(1)
              << "\n";
    return 0;
  }
  std::cout << "config " << cs.config.source << " on " << cs.system_file << "\n"
            << "device " << (t.device ? t.device->name : "(none)") << ": " << fmt("%.4g", own_rate)
            << " training samples/s, step cost " << fmt("%.1f", 1e3 * sp.fit.fixed_step_s * sp.factor) << " ms, eval "
            << fmt("%.4g", sp.fit.eval_rate * sp.device_scale) << " samples/s, start-up "
            << fmt("%.1f", sp.fit.startup_steps) << " steps (" << sp.rate_source << "; round " << sp.round
            << ", RCP ruleset " << sp.ruleset << ")\n"
            << cpu_text << "network " << net << " at " << fmt("%.0f", 100 * sp.fit.network_efficiency)
            << "% of its line rate; " << schedule_name(c.schedule) << " all-reduce of "
            << fmt("%.0f", c.gradient_bytes / 1e6) << " MB, overlap " << c.overlap_fraction << "\n\n";
  print_rows(rows);
  std::cout << "\nsamples: the RCP mean at the global batch plus half an eval interval, times the ratio of the published\n"
               "results at that batch and of the class (where 3 or more have one)"
            << (samples ? " (overridden by --samples)" : "")
            << "; * = beyond the RCP table, its end used;\n^ = the per-device batch cut to stay within the RCP table's "
               "largest global batch\n";
  return 0;
}

int cmd_links(const Options& opt) {
  const DeviceTable devices = DeviceTable::load(data_files(opt, "").devices);
  std::cout << "links between the devices of a node (latency one message one way; bandwidth one direction):\n";
  for (const auto& l : link_table())
    std::printf("  %-12s %6.1f us %8.2f GB/s  %s\n", l.name, l.link.latency_s * 1e6, l.link.bandwidth_Bps / 1e9, l.source);
  std::cout << "device classes (" << devices.source() << "):\n";
  for (const auto& d : devices.classes()) {
    std::printf("  %-15s %7.0f TFLOP/s  intra %-11s network guess %-26s %s\n", d.name.c_str(), d.peak_flops / 1e12,
                d.intra_link.c_str(), network_name(d.network_guess).c_str(), d.source.c_str());
    if (d.cpu)
      std::printf("  %-15s CPU class: reference node %dx%d cores at %.2f GHz, %s %.0f FLOP/cycle a core; measured core "
                  "rate %s\n", "", d.cpu->reference.sockets, d.cpu->reference.cores_per_socket, d.cpu->reference.clock_ghz,
                  d.cpu->isa.c_str(), d.cpu->flops_per_cycle_per_core,
                  d.cpu->core_samples_per_s ? cat(*d.cpu->core_samples_per_s, " samples/s (", d.cpu->core_rate_source, ")").c_str()
                                            : cat("none (", d.cpu->core_rate_source, ")").c_str());
  }
  return 0;
}

}  // namespace

int cmd_predict(const Args& args, DistContext&) {
  const Options opt(args,
                    {"config", "system-file", "step-time", "device-rate", "mfu", "peak-flops", "tokens-per-sample",
                     "nodes", "gpus-per-node", "cores", "clock-ghz", "batch", "device", "network", "algo", "overlap", "grad-bytes",
                     "fixed-step-s", "startup-s", "eval-rate", "samples", "scale", "round", "published", "rcp",
                     "devices", "without", "holdout"},
                    {"validate", "links", "json", "help"});
  if (opt.flag("help")) {
    std::cout << kUsage;
    return 0;
  }
  if (!opt.positional().empty()) throw_input("command line", "unexpected argument '" + opt.positional()[0] + "'");
  if (opt.flag("links")) return cmd_links(opt);
  if (opt.flag("validate")) return cmd_validate(opt);
  if (!opt.get("config")) throw_input("command line", "give --config CONFIG.json, --validate or --links");
  return cmd_config(opt);
}

}  // namespace bertperf::cli
