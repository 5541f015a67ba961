// `bertperf predict`: the scaling model (perf/) as a command. For a config and its system
// description it predicts step time, throughput and time to train on the system's nodes and at
// other scales; with --validate it predicts the published results of
// benchmarks/bert/mlperf/reference/published_results.json and prints the error per system.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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
#include "perf/published.h"
#include "perf/step_model.h"

namespace bertperf::cli {

namespace fs = std::filesystem;
using namespace bertperf::perf;

namespace {

const char* const kUsage =
    "usage: bertperf predict --config CONFIG.json [options]      predict a config on its system and at other scales\n"
    "       bertperf predict --validate [options]                predict the published results and show the errors\n"
    "       bertperf predict --links                             the link and device tables\n"
    "The device rate (training samples/s of one device), first given wins:\n"
    "  --step-time S       a measured single-device step time (seconds) at the config's local batch x accumulation\n"
    "  --device-rate R     samples/s of one device\n"
    "  --mfu F             F x the device's peak over the FLOPs of a sample (--peak-flops, --tokens-per-sample 254)\n"
    "  (default)           calibrated from the device's one published single-node result (published_results.json)\n"
    "System overrides (default: from systems/<system>.json):\n"
    "  --nodes N  --gpus-per-node N  --device a100|a100-pcie|h100|h200  --intra LINK  --inter LINK  --nics N\n"
    "Model: --algo ring|hierarchical|best (best)  --overlap F (0: reduce after the backward)  --grad-bytes B (2 a\n"
    "  parameter)  --fixed-step-s S (0)  --startup-s S (3.3)  --eval-fixed-s S (0.5)  --samples N (the RCP mean at\n"
    "  the global batch plus half an eval interval)  --scale LIST (NODESxGPUS,..., default 1xG,<system>,8x8,64x8,512x8)\n"
    "Files: --system-file F  --published F  --rcp F (default: beside the config, or benchmarks/bert/mlperf/)\n"
    "  --results-dir D     published result trees (default $BERTPERF_SHARED_DIR/mlperf-results or\n"
    "                      ../shared/mlperf-results); entries with a tree there are read from their logs\n"
    "  --json              one JSON object instead of tables\n";

int64_t mlperf_eval_interval(int64_t gbs) { return EvalCadence{}.interval(gbs); }

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string pct(double e) { return fmt("%+.1f%%", 100 * e); }

ModelConstants model_constants(const Options& opt, double parameters) {
  ModelConstants c;
  c.gradient_bytes = parameters * opt.number("grad-bytes", 2);
  c.overlap_fraction = opt.number("overlap", 0);
  c.fixed_step_s = opt.number("fixed-step-s", 0);
  c.run.startup_s = opt.number("startup-s", c.run.startup_s);
  c.run.eval_fixed_s = opt.number("eval-fixed-s", c.run.eval_fixed_s);
  if (c.overlap_fraction < 0 || c.overlap_fraction > 1) throw_input("command line", "--overlap must be in [0, 1]");
  if (c.gradient_bytes <= 0 || c.fixed_step_s < 0 || c.run.startup_s < 0 || c.run.eval_fixed_s < 0)
    throw_input("command line", "--grad-bytes must be > 0; --fixed-step-s, --startup-s, --eval-fixed-s >= 0");
  return c;
}

double bert_large_parameters() { return double(bert_parameter_table(BertConfig{}).total_elements()); }

std::string default_results_dir() {
  if (const char* shared = std::getenv("BERTPERF_SHARED_DIR")) return (fs::path(shared) / "mlperf-results").string();
  return "../shared/mlperf-results";
}

// Reads the trees that are present over the recorded figures; a tree that disagrees with them by
// more than rounding is reported (the recorded figures are the fallback, the logs the truth).
void read_trees(std::vector<PublishedResult>& results, const std::string& dir) {
  for (auto& r : results) {
    if (r.tree.empty()) continue;
    const fs::path tree = fs::path(dir) / r.tree;
    if (!fs::is_directory(tree)) continue;
    const TreeSummary s = read_result_tree(tree.string());
    if (s.global_batch != r.global_batch || std::fabs(s.olympic_minutes / r.olympic_minutes - 1) > 1e-3 ||
        std::fabs(s.mean_samples / r.mean_samples - 1) > 1e-3)
      std::cerr << "bertperf predict: note: " << r.id << ": the logs in " << tree.string() << " give GBS "
                << s.global_batch << ", " << s.olympic_minutes << " min, " << s.mean_samples
                << " samples, not the recorded figures; using the logs\n";
    r.global_batch = s.global_batch;
    r.olympic_minutes = s.olympic_minutes;
    r.mean_samples = s.mean_samples;
    r.inputs_from = "tree";
  }
}

Json row_json(const ValidationRow& w) {
  const auto& r = w.result;
  return Json{{"id", r.id},
              {"device", r.device},
              {"nodes", r.nodes},
              {"gpus_per_node", r.gpus_per_node},
              {"global_batch", r.global_batch},
              {"mean_samples", r.mean_samples},
              {"olympic_minutes", r.olympic_minutes},
              {"inputs_from", r.inputs_from},
              {"network_assumed", r.network_assumed},
              {"source", r.source},
              {"algo", r.algo},
              {"calibrated_from", w.calibrated_from},
              {"device_samples_per_s", w.device_samples_per_s},
              {"eval_interval", w.eval_interval},
              {"step_ms", 1e3 * w.step.step_s},
              {"comm_ms", 1e3 * w.step.comm_s},
              {"predicted_logged_minutes", w.predicted_logged_minutes},
              {"error_logged", w.error_logged},
              {"rcp_samples", w.rcp_samples},
              {"predicted_rcp_minutes", w.predicted_rcp_minutes},
              {"error_rcp", w.error_rcp}};
}

struct Files {
  std::string published, rcp;
};

Files data_files(const Options& opt, const std::string& config_dir) {
  const fs::path base = config_dir.empty() ? fs::path("benchmarks/bert/mlperf") : fs::path(config_dir);
  return {opt.get("published").value_or((base / "reference/published_results.json").string()),
          opt.get("rcp").value_or((base / "reference/rcp.json").string())};
}

Validation run_validation(const Options& opt, const Files& files, std::vector<PublishedResult>& published) {
  published = load_published_results(files.published);
  read_trees(published, opt.get("results-dir").value_or(default_results_dir()));
  return validate(published, load_rcp_table(files.rcp), model_constants(opt, bert_large_parameters()),
                  mlperf_eval_interval);
}

int cmd_validate(const Options& opt) {
  std::vector<PublishedResult> published;
  const Validation v = run_validation(opt, data_files(opt, ""), published);
  if (opt.flag("json")) {
    Json out{{"median_abs_error_logged", v.median_abs_error_logged},
             {"median_abs_error_rcp", v.median_abs_error_rcp},
             {"median_abs_error_logged_all", v.median_abs_error_logged_all},
             {"median_abs_error_rcp_all", v.median_abs_error_rcp_all},
             {"calibrations", Json::array()},
             {"rows", Json::array()}};
    for (const auto& c : v.calibrations)
      out["calibrations"].push_back({{"id", c.result.id}, {"device", c.result.device},
                                     {"device_samples_per_s", c.device_samples_per_s},
                                     {"olympic_minutes", c.result.olympic_minutes},
                                     {"mean_samples", c.result.mean_samples}, {"inputs_from", c.result.inputs_from}});
    for (const auto& w : v.rows) out["rows"].push_back(row_json(w));
    std::cout << out.dump(1) << "\n";
    return 0;
  }
  std::cout << "Device rates (training samples/s per GPU), each calibrated from one single-node result:\n\n"
               "| device | calibrated from | minutes | mean samples | samples/s/GPU |\n|---|---|---|---|---|\n";
  for (const auto& c : v.calibrations)
    std::cout << "| " << c.result.device << " | " << c.result.id << " | " << fmt("%.3f", c.result.olympic_minutes)
              << " | " << fmt("%.0f", c.result.mean_samples) << " | " << fmt("%.1f", c.device_samples_per_s) << " |\n";
  std::cout << "\n| result | GPUs | GBS | inputs | measured min | step ms (comm) | predicted at logged samples | error |"
               " RCP samples | predicted at RCP samples | error |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& w : v.rows) {
    const auto& r = w.result;
    std::cout << "| " << r.id << " | " << r.nodes << "x" << r.gpus_per_node << " | " << r.global_batch << " | "
              << r.inputs_from << (r.network_assumed ? ", network assumed" : "") << " | " << fmt("%.3f", r.olympic_minutes) << " | " << fmt("%.1f", 1e3 * w.step.step_s)
              << " (" << fmt("%.1f", 1e3 * w.step.comm_s) << " " << r.algo << ") | "
              << fmt("%.3f", w.predicted_logged_minutes) << " | " << pct(w.error_logged) << " | "
              << fmt("%.0f", w.rcp_samples) << " | " << fmt("%.3f", w.predicted_rcp_minutes) << " | "
              << pct(w.error_rcp) << " |\n";
  }
  std::cout << "\nMedian absolute error over the " << v.described << " results whose system is described: "
            << pct(v.median_abs_error_logged).substr(1) << " at the logged samples (the speed model), "
            << pct(v.median_abs_error_rcp).substr(1) << " at the RCP samples (the whole model). Over all "
            << v.rows.size() << " (network assumed where not described): " << pct(v.median_abs_error_logged_all).substr(1)
            << " and " << pct(v.median_abs_error_rcp_all).substr(1) << ".\n";
  return 0;
}

// "8x8" -> {8, 8}.
std::pair<int, int> parse_shape(const std::string& s) {
  static const std::regex re(R"((\d+)x(\d+))");
  std::smatch m;
  if (!std::regex_match(s, m, re) || std::stoi(m[1]) < 1 || std::stoi(m[2]) < 1)
    throw_input("command line", cat("--scale entries are NODESxGPUS (e.g. 8x8), got '", s, "'"));
  return {std::stoi(m[1]), std::stoi(m[2])};
}

// The network port a system description names: "8x ConnectX-6 IB HDR 200Gb/sec" -> ib-hdr, 8.
std::pair<std::string, int> ports_from(const std::string& networking) {
  std::string link;
  if (networking.find("NDR") != std::string::npos) link = "ib-ndr";
  else if (networking.find("HDR") != std::string::npos) link = "ib-hdr";
  else if (std::regex_search(networking, std::regex(R"(100 ?G)"))) link = "eth-100g";
  else if (std::regex_search(networking, std::regex(R"(25 ?G)"))) link = "eth-25g";
  else if (std::regex_search(networking, std::regex(R"(10 ?G)"))) link = "eth-10g";
  std::smatch m;
  const std::string compute = networking.substr(std::min(networking.size(), networking.find("Compute")));
  const int count = std::regex_search(compute, m, std::regex(R"((\d+) ?x)")) ? std::stoi(m[1]) : 1;
  return {link, count};
}

int cmd_config(const Options& opt) {
  const TrainConfig config = load_train_config(opt.required("config"), /*check_data=*/false);
  const std::string config_dir = fs::path(config.source).parent_path().string();
  std::string system_file = opt.get("system-file").value_or(find_system_file(config.system, config_dir));
  if (const auto rel = fs::path(system_file).lexically_relative(fs::current_path());
      !rel.empty() && rel.string().rfind("..", 0) != 0)
    system_file = rel.string();
  if (system_file.empty())
    throw_input(config.source, cat("no systems/", config.system, ".json found above the config; give --system-file"));
  const SystemDescription system = load_system_description(system_file);
  const std::string model_name = system.raw.value("accelerator_model_name", "");
  const std::string interconnect = system.raw.value("accelerator_interconnect", "");
  const std::string networking = system.raw.value("host_networking", "");

  // Device and links.
  const DeviceSpec* device = opt.get("device") ? &device_by_name(*opt.get("device")) : find_device(model_name);
  int nodes = int(opt.integer("nodes", system.number_of_nodes));
  int gpn = int(opt.integer("gpus-per-node", std::max(1, system.accelerators_per_node)));
  std::string intra = opt.get("intra").value_or("");
  if (intra.empty() && device) {
    intra = device->intra_link;
    if (interconnect.find("NVLINK 4") != std::string::npos || interconnect.find("NVLink 4") != std::string::npos) intra = "nvlink4";
    else if (interconnect.find("NVLINK 3") != std::string::npos || interconnect.find("NVLink 3") != std::string::npos) intra = "nvlink3";
  }
  auto [port, nics] = ports_from(networking);
  std::string inter_note;
  if (port.empty() && device) {  // a single-node system: scale out on the vendor's reference node
    port = device->inter_link, nics = 0;  // 0: one port per GPU of each shape
    inter_note = " (assumed, one port a GPU: the system names no network)";
  }
  const std::string inter = opt.get("inter").value_or(port);
  if (opt.get("inter")) inter_note.clear();
  nics = int(opt.integer("nics", nics));
  if (nodes < 1 || gpn < 1 || nics < 0 || (opt.get("nics") && nics < 1))
    throw_input("command line", "--nodes, --gpus-per-node and --nics must be >= 1");

  const double parameters = double(bert_parameter_table(config.model).total_elements());
  const ModelConstants constants = model_constants(opt, parameters);
  const double per_device_step = double(config.local_batch_size) * config.grad_accum_steps;
  const Files files = data_files(opt, config_dir);

  // Device rate.
  double rate = 0;
  std::string rate_source;
  std::vector<PublishedResult> published;
  if (opt.get("step-time")) {
    const double s = opt.number("step-time", 0);
    if (s <= 0) throw_input("command line", "--step-time must be > 0");
    rate = per_device_step / s;
    rate_source = cat("measured single-device step of ", s, " s at ", per_device_step, " samples");
  } else if (opt.get("device-rate")) {
    rate = opt.number("device-rate", 0);
    if (rate <= 0) throw_input("command line", "--device-rate must be > 0");
    rate_source = "--device-rate";
  } else if (opt.get("mfu")) {
    const double mfu = opt.number("mfu", 0);
    const double peak = opt.number("peak-flops", device ? device->peak_flops : 0);
    if (mfu <= 0 || mfu > 1 || peak <= 0)
      throw_input("command line", "--mfu must be in (0, 1] and the device's peak known (give --peak-flops)");
    const BertShape shape{config.model.num_hidden_layers, config.model.hidden_size, config.model.intermediate_size,
                          config.model.vocab_size};
    const double tokens = opt.number("tokens-per-sample", std::min(254.0, double(config.seq_len)));
    const double flops = bert_train_flops_per_sample(shape, tokens, std::min<double>(config.max_predictions, tokens));
    rate = mfu * peak / flops;
    rate_source = cat("MFU ", mfu, " of ", peak / 1e12, " TFLOP/s over ", flops / 1e12, " TFLOP a sample");
  } else {
    if (!device)
      throw_input(system_file, cat("accelerator '", model_name,
                                   "' is not in the device table; give --step-time, --device-rate or --device"));
    const Validation v = run_validation(opt, files, published);
    for (const auto& c : v.calibrations)
      if (c.result.device == device->name) {
        rate = c.device_samples_per_s;
        rate_source = cat("calibrated from ", c.result.id, " (", fmt("%.3f", c.result.olympic_minutes), " min)");
      }
    if (rate <= 0) throw_input(files.published, cat("no calibration result for device '", device->name, "'"));
  }
  if (published.empty() && fs::exists(files.published)) {
    published = load_published_results(files.published);
    read_trees(published, opt.get("results-dir").value_or(default_results_dir()));
  }
  const bool samples_given = opt.get("samples").has_value();
  const auto rcp = samples_given ? std::vector<RcpPoint>{{1, 1}} : load_rcp_table(files.rcp);
  const AllReduceAlgo algo = parse_all_reduce_algo(opt.get("algo").value_or("best"), "--algo");

  // The shapes to predict: the system's, then the scale list, each at the config's per-device batch.
  std::vector<std::pair<int, int>> shapes;
  if (auto list = opt.get("scale")) {
    std::string s = *list;
    for (size_t at = 0; at <= s.size();) {
      const size_t comma = std::min(s.find(',', at), s.size());
      shapes.push_back(parse_shape(s.substr(at, comma - at)));
      at = comma + 1;
    }
  } else {
    shapes = {{1, gpn}, {nodes, gpn}, {8, 8}, {64, 8}, {512, 8}};
  }
  std::sort(shapes.begin(), shapes.end(), [](auto a, auto b) { return a.first * a.second < b.first * b.second; });
  shapes.erase(std::unique(shapes.begin(), shapes.end()), shapes.end());

  Json rows = Json::array();
  const double samples_override = opt.number("samples", 0);
  if (samples_given && samples_override <= 0) throw_input("command line", "--samples must be > 0");
  // Beyond the RCP table's largest global batch there is no convergence data, so a larger system
  // keeps that batch and gives each device less (as the 512-node results do), unless --samples.
  const double largest_rcp_batch = rcp.back().global_batch;
  for (auto [n, g] : shapes) {
    const bool capped = !samples_given && per_device_step * n * g > largest_rcp_batch;
    const double local = capped ? std::floor(largest_rcp_batch / (n * g)) : per_device_step;
    if (local < 1)
      throw_input("command line", cat(n, "x", g, " devices exceed the largest RCP global batch (",
                                      largest_rcp_batch, "); give --samples"));
    StepInputs in;
    in.device_samples_per_s = rate;
    in.fixed_step_s = constants.fixed_step_s;
    in.local_batch = local;
    in.gradient_bytes = constants.gradient_bytes;
    const bool needs_intra = g > 1, needs_inter = n > 1;
    if (needs_intra && intra.empty()) throw_input(system_file, "no link between a node's devices known; give --intra");
    if (needs_inter && inter.empty()) throw_input(system_file, "no network port known from host_networking; give --inter");
    in.topology = Topology{n, g, nics > 0 ? nics : g, needs_intra ? find_link(intra) : Link{}, needs_inter ? find_link(inter) : Link{}};
    in.algo = algo;
    in.overlap_fraction = constants.overlap_fraction;
    const StepPrediction step = predict_step(in);
    RunInputs run = constants.run;
    const int64_t gbs = int64_t(local) * n * g;
    run.global_batch = double(gbs);
    const bool own = (n == nodes && g == gpn);
    run.eval_interval_samples = double(own && gbs == config.global_batch_size() ? config.eval_interval_samples
                                                                                 : mlperf_eval_interval(gbs));
    bool clamped = false;
    const double rcp_mean = rcp_mean_samples(rcp, double(gbs), &clamped);
    run.samples_to_converge =
        samples_given ? samples_override : expected_samples_to_converge(rcp_mean, run.eval_interval_samples);
    const RunPrediction p = predict_run(step, rate, run);
    Json row{{"shape", cat(n, "x", g)}, {"devices", n * g}, {"global_batch", gbs}, {"local_batch", local},
             {"batch_capped", capped}, {"config_system", own},
             {"compute_ms", 1e3 * step.compute_s}, {"comm_ms", 1e3 * step.comm_s},
             {"exposed_comm_ms", 1e3 * step.exposed_comm_s}, {"step_ms", 1e3 * step.step_s},
             {"samples_per_s", step.samples_per_s}, {"samples_to_converge", run.samples_to_converge},
             {"rcp_clamped", clamped && !samples_given}, {"eval_interval", run.eval_interval_samples},
             {"steps", p.steps}, {"evals", p.evals}, {"time_to_train_minutes", p.time_to_train_s / 60}};
    if (own)
      for (const auto& r : published)
        if (r.note.find("config " + config.system) != std::string::npos && r.nodes == n && r.gpus_per_node == g) {
          row["published"] = {{"id", r.id}, {"olympic_minutes", r.olympic_minutes}, {"inputs_from", r.inputs_from},
                              {"error", p.time_to_train_s / 60 / r.olympic_minutes - 1}};
        }
    rows.push_back(row);
  }

  if (opt.flag("json")) {
    std::cout << Json{{"config", config.source}, {"system_file", system_file},
                      {"device", device ? device->name : ""}, {"device_samples_per_s", rate},
                      {"rate_source", rate_source}, {"intra", intra}, {"inter", inter}, {"nics_per_node", nics},
                      {"algo", algo_name(algo)}, {"overlap", constants.overlap_fraction},
                      {"gradient_bytes", constants.gradient_bytes}, {"rows", rows}}
                     .dump(1)
              << "\n";
    return 0;
  }
  std::cout << "config " << config.source << " on " << system_file << "\n"
            << "device " << (device ? device->name : "(none)") << ": " << fmt("%.1f", rate)
            << " training samples/s (" << rate_source << ")\n"
            << "links: intra " << (intra.empty() ? "-" : intra) << ", inter " << (inter.empty() ? "-" : inter) << " x"
            << (nics > 0 ? std::to_string(nics) : std::string("GPUs")) << " a node" << inter_note << "; " << algo_name(algo) << " all-reduce of " << fmt("%.0f", constants.gradient_bytes / 1e6)
            << " MB, overlap " << constants.overlap_fraction << "\n\n";
  std::printf("%-8s %7s %7s %6s %11s %9s %9s %9s %11s %11s %7s %9s\n", "shape", "GPUs", "GBS", "local", "compute ms",
              "comm ms", "exposed", "step ms", "samples/s", "samples", "evals", "TTT min");
  for (const auto& r : rows) {
    std::printf("%-8s %7d %7lld %5.0f%s %11.1f %9.2f %9.2f %9.1f %11.0f %10.0f%s %7.1f %9.3f%s\n",
                r["shape"].get<std::string>().c_str(), r["devices"].get<int>(),
                (long long)r["global_batch"].get<int64_t>(), r["local_batch"].get<double>(),
                r["batch_capped"].get<bool>() ? "^" : " ", r["compute_ms"].get<double>(), r["comm_ms"].get<double>(),
                r["exposed_comm_ms"].get<double>(), r["step_ms"].get<double>(), r["samples_per_s"].get<double>(),
                r["samples_to_converge"].get<double>(), r["rcp_clamped"].get<bool>() ? "*" : " ",
                r["evals"].get<double>(), r["time_to_train_minutes"].get<double>(),
                r["config_system"].get<bool>() ? "  <-" : "");
    if (r.contains("published"))
      std::printf("         published: %s %.3f min (olympic mean, %s); predicted %.3f min, error %s\n",
                  r["published"]["id"].get<std::string>().c_str(), r["published"]["olympic_minutes"].get<double>(),
                  r["published"]["inputs_from"].get<std::string>() == "tree" ? "from its logs" : "recorded",
                  r["time_to_train_minutes"].get<double>(), pct(r["published"]["error"].get<double>()).c_str());
  }
  std::cout << "\nsamples: the RCP mean at the global batch plus half an eval interval"
            << (samples_given ? " (overridden by --samples)" : "") << "; * = beyond the RCP table, its end used;\n^ = the per-device batch cut to stay within the RCP table's largest global batch\n";
  return 0;
}

int cmd_links() {
  std::cout << "links (latency one message one way; bandwidth one direction one port):\n";
  for (const auto& l : link_table())
    std::printf("  %-9s %6.1f us %8.2f GB/s  %s\n", l.name, l.link.latency_s * 1e6, l.link.bandwidth_Bps / 1e9, l.source);
  std::cout << "devices:\n";
  for (const auto& d : device_table())
    std::printf("  %-9s %6.0f TFLOP/s  intra %-8s inter %-7s %s\n", d.name, d.peak_flops / 1e12, d.intra_link,
                d.inter_link, d.source);
  return 0;
}

}  // namespace

int cmd_predict(const Args& args, DistContext&) {
  const Options opt(args,
                    {"config", "system-file", "step-time", "device-rate", "mfu", "peak-flops", "tokens-per-sample",
                     "nodes", "gpus-per-node", "device", "intra", "inter", "nics", "algo", "overlap", "grad-bytes",
                     "fixed-step-s", "startup-s", "eval-fixed-s", "samples", "scale", "published", "rcp",
                     "results-dir"},
                    {"validate", "links", "json", "help"});
  if (opt.flag("help")) {
    std::cout << kUsage;
    return 0;
  }
  if (!opt.positional().empty()) throw_input("command line", "unexpected argument '" + opt.positional()[0] + "'");
  if (opt.flag("links")) return cmd_links();
  if (opt.flag("validate")) return cmd_validate(opt);
  if (!opt.get("config")) throw_input("command line", "give --config CONFIG.json, --validate or --links");
  return cmd_config(opt);
}

}  // namespace bertperf::cli
