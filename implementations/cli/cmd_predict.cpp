// `bertperf predict`: the scaling model (perf/) as a command. For a config and its system description
// it predicts step time, throughput and time to train on the system's nodes and at other scales, from
// a model fitted to the published results (benchmarks/bert/mlperf/reference/published_systems.json);
// with --validate it predicts every published result from a model fitted without it and prints the
// errors, by node count and device class.
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
    "       bertperf predict --validate [--json]                 predict every published result from the others\n"
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
    "                      as they are, no ratio by global batch and device class)\n"
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
  if (const auto terms = opt.get("without")) {
    for (size_t at = 0; at <= terms->size();) {
      const size_t comma = std::min(terms->find(',', at), terms->size());
      switch_off(c, terms->substr(at, comma - at));
      at = comma + 1;
    }
  }
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
  return Json{{key, b.name}, {"systems", b.systems}, {"median_abs_error", b.median_abs_error},
              {"max_abs_error", b.max_abs_error}};
}

Json row_json(const ValidationRow& w) {
  const auto& s = *w.system;
  return Json{{"id", s.id},
              {"round", s.round},
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
              {"error_rcp", w.error_rcp}};
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

void print_bands(const std::vector<Band>& bands, const char* what) {
  std::cout << "| " << what << " | systems | median abs error | max abs error |\n|---|---|---|---|\n";
  for (const auto& b : bands)
    std::cout << "| " << b.name << " | " << b.systems << " | " << abs_pct(b.median_abs_error) << " | "
              << abs_pct(b.max_abs_error) << " |\n";
}

int cmd_validate(const Options& opt) {
  const Data data = load_data(data_files(opt, ""));
  const ModelConstants c = model_constants(opt, bert_large_parameters());
  const Validation v = validate(data.systems, data.rcp, c);
  if (opt.flag("json")) {
    Json out{{"bands", Json::array()}, {"bands_logged", Json::array()}, {"devices", Json::array()},
             {"devices_logged", Json::array()}, {"rows", Json::array()}, {"skipped", Json::array()}};
    for (const auto& b : v.bands) out["bands"].push_back(band_json(b, "nodes"));
    for (const auto& b : v.bands_logged) out["bands_logged"].push_back(band_json(b, "nodes"));
    for (const auto& b : v.devices) out["devices"].push_back(band_json(b, "device"));
    for (const auto& b : v.devices_logged) out["devices_logged"].push_back(band_json(b, "device"));
    for (const auto& w : v.rows) out["rows"].push_back(row_json(w));
    for (const auto& [s, why] : v.skipped) out["skipped"].push_back({{"id", s->id}, {"reason", why}});
    std::cout << out.dump(1) << "\n";
    return 0;
  }
  std::cout << "Leave-one-out: each of the " << v.rows.size() << " results below predicted from a model fitted to the "
            << "others (" << v.skipped.size() << " not predicted, listed at the end).\n\n"
            << "At the RCP samples (the RCP mean of the result's ruleset at its global batch, plus half an eval interval,\n"
            << "times the samples ratio of the others at that batch and of its class"
            << (c.sample_ratios ? "" : "; switched off here") << "):\n\n";
  print_bands(v.bands, "nodes");
  std::cout << "\nAt the samples each result logged (the speed model alone):\n\n";
  print_bands(v.bands_logged, "nodes");
  std::cout << "\nBy device class, at the RCP samples:\n\n";
  print_bands(v.devices, "device");
  std::cout << "\nBy device class, at the logged samples:\n\n";
  print_bands(v.devices_logged, "device");
  std::cout << "\n| result | nodes x GPUs | device | GBS | network | measured min | samples/s/GPU, step ms (comm) |"
               " predicted at logged samples | error | RCP samples x ratio | predicted at RCP samples | error |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& w : v.rows) {
    const auto& s = *w.system;
    std::cout << "| " << s.id << " | " << s.nodes << "x" << s.per_node << " | " << s.device->name << " | "
              << s.global_batch << " | " << (s.nodes > 1 ? network_name(w.shape.network) : "-")
              << (w.network_assumed ? " (assumed)" : "")
              << " | " << fmt("%.3f", *s.olympic_minutes) << " | " << fmt("%.0f", w.fit.rate / w.round_factor) << ", "
              << fmt("%.1f", 1e3 * w.at_rcp.step.step_s) << " (" << fmt("%.1f", 1e3 * w.at_rcp.step.comm_s) << ") | "
              << fmt("%.3f", w.at_logged.minutes()) << " | " << pct(w.error_logged) << " | " << fmt("%.0f", w.rcp_samples)
              << " x " << fmt("%.3f", w.sample_ratio) << " | " << fmt("%.3f", w.at_rcp.minutes()) << " | "
              << pct(w.error_rcp) << " |\n";
  }
  std::cout << "\nNot predicted:\n\n";
  for (const auto& [s, why] : v.skipped) std::cout << "- " << s->id << ": " << why << "\n";
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

int cmd_config(const Options& opt) {
  const TrainConfig config = load_train_config(opt.required("config"), /*check_data=*/false);
  const std::string config_dir = fs::path(config.source).parent_path().string();
  std::string system_file = opt.get("system-file").value_or(find_system_file(config.system, config_dir));
  if (system_file.empty())
    throw_input(config.source, cat("no systems/", config.system, ".json found above the config; give --system-file"));
  if (const auto rel = fs::path(system_file).lexically_relative(fs::current_path());
      !rel.empty() && rel.string().rfind("..", 0) != 0)
    system_file = rel.string();
  const SystemDescription system = load_system_description(system_file);
  const bool cpu_only = system.accelerators_per_node == 0;
  const std::string model_name =
      text_field(system.raw, cpu_only ? "host_processor_model_name" : "accelerator_model_name");
  const Files files = data_files(opt, config_dir);
  const Data data = load_data(files);

  // The system: device class, shape, network.
  const DeviceClass* device = opt.get("device")  ? &data.devices.by_name(*opt.get("device"))
                              : cpu_only         ? data.devices.match_cpu(model_name)
                                                 : data.devices.match(model_name);
  const bool cpu_class = device && device->cpu;
  const int nodes = int(opt.integer("nodes", system.number_of_nodes, 1, 1 << 20));
  const int gpn = int(opt.integer("gpus-per-node", cpu_class ? 1 : std::max(1, system.accelerators_per_node), 1, 1 << 16));
  if (cpu_class && gpn != 1)
    throw_input("--gpus-per-node", cat("a CPU class's device is the whole node (", device->name, "): give 1, not ", gpn));
  // A CPU class's node: the description's when it describes a CPU-only system, else the class's
  // reference node; --cores and --clock-ghz replace what they name.
  CpuNode cpu_node;
  bool cpu_assumed = false;
  if (cpu_class) {
    std::string sockets = cpu_only ? text_field(system.raw, "host_processors_per_node") : "";
    std::string cores = cpu_only ? text_field(system.raw, "host_processor_core_count") : "";
    std::string clock = cpu_only ? text_field(system.raw, "host_processor_frequency") : "";
    if (opt.get("cores")) sockets = "1", cores = std::to_string(opt.integer("cores", 0, 1, 1 << 20));
    if (opt.get("clock-ghz")) {
      const double ghz = opt.number("clock-ghz", 0);
      if (ghz <= 0) throw_input("command line", "--clock-ghz must be > 0");
      clock = cat(ghz, " GHz");
    }
    cpu_node = parse_cpu_node(cpu_only ? model_name : "", sockets, cores, clock, device->cpu->reference, system_file,
                              &cpu_assumed);
  } else if (opt.get("cores") || opt.get("clock-ghz")) {
    throw_input("command line", "--cores and --clock-ghz describe the node of a CPU class; give --device with one");
  }
  double device_scale = cpu_class ? device->scale_of(cpu_node) : 1.0;
  std::optional<Network> network;
  std::string network_note;
  if (const auto text = opt.get("network")) {
    network = parse_network(*text);
    if (!network) throw_input("--network", cat("'", *text, "' names no port with a rate (e.g. \"8x InfiniBand HDR 200Gb/s\")"));
  } else if (!cpu_class || cpu_only) {  // an accelerator system's network is not a CPU node's
    network = parse_network(text_field(system.raw, "host_networking"));
    if (!network) network = parse_network(text_field(system.raw, "host_networking_topology"));
  }
  if (!network && device) {
    network = device->network_guess;
    network->ports = gpn;
    network_note = cpu_class && !cpu_only ? " (assumed: the class's; the description is of an accelerator system)"
                                          : " (assumed: the description names no network; one port a device)";
  }
  if (!device && !opt.get("step-time") && !opt.get("device-rate") && !opt.get("mfu"))
    throw_input(system_file, cat(cpu_only ? "host processor '" : "accelerator '", model_name,
                                 "' is in no device class of ", files.devices,
                                 "; give --device, --step-time, --device-rate or --mfu"));

  ModelConstants c = model_constants(opt, double(bert_parameter_table(config.model).total_elements()));
  c.eval_samples = double(config.eval_samples);
  const int64_t own_gbs = opt.integer("batch", config.global_batch_size(), 1, int64_t(1) << 40);
  const double per_device = double(own_gbs) / (nodes * gpn);
  if (per_device < 1) throw_input("--batch", cat(own_gbs, " samples a step leave less than one a device on ", nodes * gpn));

  // The model, fitted to every published result.
  const ScalingModel model = fit_model(fit_set(data.systems), c, data.rcp);
  // The device's fit, with what the command line gives; the round (software generation and RCP
  // ruleset) is the newest the device class was published in, unless --round.
  DeviceFit fit;
  std::string rate_source;
  std::string round = model.newest_round;
  if (device && model.devices.count(device->name)) {
    fit = model.devices.at(device->name);
    rate_source = cat("fitted to the ", fit.systems, " published results of ", device->name);
    round = fit.newest_round;
  } else {
    fit.fixed_step_s = model.fixed_step_prior;
    fit.startup_steps = model.startup_steps;
  }
  if (opt.get("round")) round = *opt.get("round");
  const std::string ruleset = ruleset_of_round(round);
  const RcpTable& rcp = rcp_table_for(data.rcp, ruleset);
  double factor = model.factor_of(round);
  const double per_device_step = double(config.local_batch_size) * config.grad_accum_steps;
  // A rate the command line gives is this device's own: no round factor, no CPU scaling.
  auto user_rate = [&](double rate, std::string source) {
    fit.rate = rate, factor = 1.0, device_scale = 1.0, rate_source = std::move(source);
    if (!fit.eval_from_logs) fit.eval_rate = model.eval_speed_ratio * rate;
  };
  const double peak = cpu_class ? cpu_peak_flops(cpu_node, device->cpu->flops_per_cycle_per_core)
                                : (device ? device->peak_flops : 0.0);
  if (opt.get("step-time")) {
    const double s = opt.number("step-time", 0);
    if (s <= 0) throw_input("command line", "--step-time must be > 0");
    user_rate(per_device_step / s, cat("measured single-device step of ", s, " s at ", per_device_step, " samples"));
    fit.fixed_step_s = 0;  // the measured step holds it
  } else if (opt.get("device-rate")) {
    const double r = opt.number("device-rate", 0);
    if (r <= 0) throw_input("command line", "--device-rate must be > 0");
    user_rate(r, "--device-rate");
  } else if (opt.get("mfu")) {
    const double mfu = opt.number("mfu", 0);
    const double p = opt.number("peak-flops", peak);
    if (mfu <= 0 || mfu > 1 || p <= 0)
      throw_input("command line", "--mfu must be in (0, 1] and the device's peak known (give --peak-flops)");
    const BertShape shape{config.model.num_hidden_layers, config.model.hidden_size, config.model.intermediate_size,
                          config.model.vocab_size};
    const double tokens = opt.number("tokens-per-sample", std::min(254.0, double(config.seq_len)));
    const double flops = bert_train_flops_per_sample(shape, tokens, std::min<double>(config.max_predictions, tokens));
    user_rate(mfu * p / flops, cat("MFU ", mfu, " of ", p / 1e12, " TFLOP/s over ", flops / 1e12, " TFLOP a sample"));
  } else if (rate_source.empty() && cpu_class && device->cpu->core_samples_per_s) {
    // A CPU class without published results: its measured core rate, for the reference node.
    fit.rate = *device->cpu->core_samples_per_s * device->cpu->reference.cores();
    fit.eval_rate = model.eval_speed_ratio * fit.rate;
    factor = 1.0;
    rate_source = cat("measured ", *device->cpu->core_samples_per_s, " samples/s a core (", device->cpu->core_rate_source, ")");
  } else if (rate_source.empty()) {
    throw_input(files.devices, cat("device class ", device->name, " has no published results",
                                   cpu_class ? " and no measured core_samples_per_s" : "",
                                   "; give --step-time, --device-rate or --mfu"));
  }
  if (opt.get("fixed-step-s")) fit.fixed_step_s = opt.number("fixed-step-s", 0);
  if (opt.get("eval-rate")) fit.eval_rate = opt.number("eval-rate", 0);
  std::optional<double> startup;
  if (opt.get("startup-s")) startup = opt.number("startup-s", 0);
  if (fit.fixed_step_s < 0 || fit.eval_rate <= 0 || (startup && *startup < 0))
    throw_input("command line", "--fixed-step-s and --startup-s must be >= 0, --eval-rate > 0");

  // The shapes: the system's, then the scale list, each at the system's per-device batch.
  std::vector<std::pair<int, int>> shapes;
  if (auto list = opt.get("scale")) {
    const std::string& s = *list;
    for (size_t at = 0; at <= s.size();) {
      const size_t comma = std::min(s.find(',', at), s.size());
      shapes.push_back(parse_shape(s.substr(at, comma - at)));
      if (cpu_class && shapes.back().second != 1)
        throw_input("--scale", cat("a CPU class's device is the whole node: give NODESx1, not '", s.substr(at, comma - at), "'"));
      at = comma + 1;
    }
  } else if (cpu_class) {
    shapes = {{1, 1}, {nodes, 1}, {8, 1}, {16, 1}, {64, 1}};
  } else {
    shapes = {{1, gpn}, {nodes, gpn}, {8, 8}, {64, 8}, {512, 8}};
  }
  std::sort(shapes.begin(), shapes.end(), [](auto a, auto b) { return a.first * a.second < b.first * b.second; });
  shapes.erase(std::unique(shapes.begin(), shapes.end()), shapes.end());

  const bool samples_given = opt.get("samples").has_value();
  const double samples_override = opt.number("samples", 0);
  if (samples_given && samples_override <= 0) throw_input("command line", "--samples must be > 0");
  // Beyond the RCP table's largest global batch there is no convergence data, so a larger system
  // keeps that batch and gives each device less (as the 512-node results do), unless --samples.
  const double largest_rcp_batch = rcp.points.back().global_batch;
  const Link intra = device ? find_link(device->intra_link) : find_link("pcie4");
  Json rows = Json::array();
  for (auto [n, g] : shapes) {
    const bool own = n == nodes && g == gpn;
    const bool capped = !samples_given && !own && per_device * n * g > largest_rcp_batch;
    const double local = capped ? std::floor(largest_rcp_batch / (n * g)) : (own ? per_device : std::floor(per_device));
    if (local < 1)
      throw_input("command line", cat(n, "x", g, " devices exceed the largest RCP global batch (",
                                      largest_rcp_batch, "); give --samples"));
    if (n > 1 && !network) throw_input(system_file, "no network known for a multi-node shape; give --network");
    SystemShape shape;
    shape.nodes = n, shape.per_node = g;
    shape.global_batch = own ? own_gbs : int64_t(local) * n * g;
    shape.intra = intra;
    shape.network = network.value_or(Network{1, 100, Fabric::ETHERNET, false});
    // Another shape keeps one port a device if the system's network has one, else its ports a node.
    if (!own && network && network->ports == gpn && g != gpn) shape.network.ports = g;
    shape.eval_interval = double(own && shape.global_batch == config.global_batch_size() ? config.eval_interval_samples
                                                                                         : mlperf_eval_interval(shape.global_batch));
    shape.device_scale = device_scale;
    bool clamped = false;
    const double ratio = device && !samples_given ? model.sample_ratio(device->name, shape.global_batch) : 1.0;
    const double samples =
        samples_given ? samples_override
                      : ratio * expected_samples_to_converge(rcp_mean_samples(rcp.points, double(shape.global_batch), &clamped),
                                                             shape.eval_interval);
    const Prediction p = predict(fit, factor, shape, samples, c, startup);
    Json row{{"shape", cat(n, "x", g)}, {"devices", n * g}, {"global_batch", shape.global_batch},
             {"local_batch", double(shape.global_batch) / (n * g)}, {"batch_capped", capped}, {"config_system", own},
             {"compute_ms", 1e3 * p.step.compute_s}, {"comm_ms", 1e3 * p.step.comm_s},
             {"exposed_comm_ms", 1e3 * p.step.exposed_comm_s}, {"step_ms", 1e3 * p.step.step_s},
             {"samples_per_s", p.step.samples_per_s}, {"samples_to_converge", samples}, {"sample_ratio", ratio},
             {"rcp_clamped", clamped && !samples_given}, {"eval_interval", shape.eval_interval},
             {"startup_s", p.run.startup_s}, {"steps", p.run.steps}, {"evals", p.run.evals},
             {"time_to_train_minutes", p.minutes()}, {"published", Json::array()}};
    if (own && device && rate_source.rfind("fitted", 0) == 0) {
      // Each published result of this shape, predicted from the config by a model fitted without it.
      for (const PublishedSystem* s : fit_set(data.systems)) {
        if (s->device != device || s->nodes != n || s->per_node != g || s->global_batch != shape.global_batch) continue;
        const ScalingModel loo = fit_model(fit_set(data.systems, {s->id}), c, data.rcp);
        if (!loo.devices.count(device->name)) continue;
        const double at = rcp_samples(data.rcp, s->round, s->global_batch, shape.eval_interval);
        const double loo_ratio = loo.sample_ratio(device->name, s->global_batch);
        SystemShape theirs = shape;
        theirs.device_scale = s->device_scale;
        const Prediction q =
            predict(loo.devices.at(device->name), loo.factor_of(s->round), theirs, at * loo_ratio, c, startup);
        row["published"].push_back({{"id", s->id}, {"olympic_minutes", *s->olympic_minutes},
                                    {"predicted_minutes", q.minutes()}, {"rcp_samples", at},
                                    {"sample_ratio", loo_ratio}, {"error", q.minutes() / *s->olympic_minutes - 1}});
      }
    }
    rows.push_back(row);
  }

  const std::string net = network ? network_name(*network) + network_note : std::string("-");
  // The speed of this system's device: the class's fit (for its reference node) times the node's scale.
  const double own_rate = fit.rate * device_scale / factor;
  Json cpu = nullptr;
  std::string cpu_text;
  if (cpu_class) {
    cpu = Json{{"sockets", cpu_node.sockets}, {"cores", cpu_node.cores()}, {"clock_ghz", cpu_node.clock_ghz},
               {"isa", device->cpu->isa}, {"peak_flops", peak}, {"assumed", cpu_assumed},
               {"device_scale", device_scale}, {"core_samples_per_s", own_rate / cpu_node.cores()}};
    cpu_text = cat("CPU node ", cpu_node.cores(), " cores at ", fmt("%.2f", cpu_node.clock_ghz), " GHz, ",
                   device->cpu->isa, " ", fmt("%.3g", peak / 1e12), " TFLOP/s",
                   cpu_assumed ? " (partly assumed: the class's reference node)" : "", "; ",
                   fmt("%.3f", own_rate / cpu_node.cores()), " samples/s a core\n");
  }
  if (opt.flag("json")) {
    std::cout << Json{{"config", config.source}, {"system_file", system_file},
                      {"device", device ? device->name : ""}, {"device_samples_per_s", own_rate}, {"cpu_node", cpu},
                      {"fixed_step_ms", 1e3 * fit.fixed_step_s * factor}, {"startup_steps", fit.startup_steps},
                      {"eval_samples_per_s", fit.eval_rate * device_scale}, {"rate_source", rate_source}, {"round", round},
                      {"ruleset", ruleset}, {"network", net}, {"network_assumed", !network_note.empty()},
                      {"algo", schedule_name(c.schedule)}, {"overlap", c.overlap_fraction},
                      {"gradient_bytes", c.gradient_bytes}, {"rows", rows}}
                     .dump(1)
              << "\n";
    return 0;
  }
  std::cout << "config " << config.source << " on " << system_file << "\n"
            << "device " << (device ? device->name : "(none)") << ": " << fmt("%.4g", own_rate)
            << " training samples/s, step cost " << fmt("%.1f", 1e3 * fit.fixed_step_s * factor) << " ms, eval "
            << fmt("%.4g", fit.eval_rate * device_scale) << " samples/s, start-up " << fmt("%.1f", fit.startup_steps)
            << " steps (" << rate_source << "; round " << round << ", RCP ruleset " << ruleset << ")\n"
            << cpu_text
            << "network " << net << "; " << schedule_name(c.schedule) << " all-reduce of "
            << fmt("%.0f", c.gradient_bytes / 1e6) << " MB, overlap " << c.overlap_fraction << "\n\n";
  std::printf("%-8s %7s %7s %6s %11s %9s %9s %11s %11s %7s %9s\n", "shape", "devices", "GBS", "local", "compute ms",
              "comm ms", "step ms", "samples/s", "samples", "evals", "TTT min");
  for (const auto& r : rows) {
    std::printf("%-8s %7d %7lld %5.0f%s %11.1f %9.2f %9.1f %11.0f %10.0f%s %7.1f %9.3f%s\n",
                r["shape"].get<std::string>().c_str(), r["devices"].get<int>(),
                (long long)r["global_batch"].get<int64_t>(), r["local_batch"].get<double>(),
                r["batch_capped"].get<bool>() ? "^" : " ", r["compute_ms"].get<double>(), r["comm_ms"].get<double>(),
                r["step_ms"].get<double>(), r["samples_per_s"].get<double>(), r["samples_to_converge"].get<double>(),
                r["rcp_clamped"].get<bool>() ? "*" : " ", r["evals"].get<double>(),
                r["time_to_train_minutes"].get<double>(), r["config_system"].get<bool>() ? "  <-" : "");
    for (const auto& p : r["published"])
      std::printf("         published: %s %.3f min; predicted without it %.3f min, error %s\n",
                  p["id"].get<std::string>().c_str(), p["olympic_minutes"].get<double>(),
                  p["predicted_minutes"].get<double>(), pct(p["error"].get<double>()).c_str());
  }
  std::cout << "\nsamples: the RCP mean at the global batch plus half an eval interval, times the ratio of the published\n"
               "results at that batch and of the class (where 3 or more have one)"
            << (samples_given ? " (overridden by --samples)" : "")
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
                     "devices", "without"},
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
