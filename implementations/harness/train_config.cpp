// Strict loading of hyperparameter configs and their benchmark.json (train_config.h).
#include "harness/train_config.h"

#include <glob.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iomanip>

#include "core/json_fields.h"
#include "harness/reader_plan.h"

namespace bertperf {

namespace fs = std::filesystem;

int64_t EvalCadence::interval(int64_t global_batch_size) const {
  const double raw = scale * (per_global_batch_sample * double(global_batch_size) + offset);
  const auto floored = static_cast<int64_t>(std::floor(raw / double(round_down_to))) * round_down_to;
  // A formula that floors to 0 would mean "never evaluate"; the smallest step is one multiple.
  return std::max(floored, round_down_to);
}

int64_t eval_point_samples(int64_t k, int64_t interval, int64_t global_batch_size) {
  const int64_t raw = k * interval;
  return (raw + global_batch_size - 1) / global_batch_size * global_batch_size;
}

namespace {

constexpr int64_t kMaxBatchSlots = int64_t{1} << 30;

// "${NAME}" from the environment; an unset variable is an error rather than an empty path piece.
std::string expand_environment(const std::string& text, const std::string& where, const std::string& field) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 2, "${") == 0) {
      const size_t close = text.find('}', i);
      if (close == std::string::npos) throw_input(where, cat("field '", field, "': unterminated ${ in \"", text, "\""));
      const std::string name = text.substr(i + 2, close - i - 2);
      const char* value = std::getenv(name.c_str());
      if (!value) throw_input(where, cat("field '", field, "': environment variable ", name, " is not set"));
      out += value;
      i = close + 1;
    } else {
      out += text[i++];
    }
  }
  return out;
}

std::string resolve_path(const std::string& text, const fs::path& base, const std::string& where,
                         const std::string& field) {
  const fs::path p = expand_environment(text, where, field);
  return (p.is_absolute() ? p : base / p).lexically_normal().string();
}

std::vector<std::string> expand_glob(const std::string& pattern, const std::string& where) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> files;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  if (files.empty()) throw_input(where, cat("field 'data.train_files': no file matches \"", pattern, "\""));
  std::sort(files.begin(), files.end());
  return files;
}

void require(bool ok, const std::string& where, const std::string& message) {
  if (!ok) throw_input(where, message);
}

struct Benchmark {
  std::string name;
  std::string submission_benchmark;
  double target_accuracy = 0;
  int64_t eval_samples = 0;
  EvalCadence cadence;
  int64_t max_samples = 0;  // 0: none at the benchmark level
  int runs = 0;
  std::string division;  // "" or "open"
};

Benchmark load_benchmark(const std::string& path) {
  const Json json = read_json_file(path);
  JsonFields f(json, path);
  Benchmark b;
  f.optional<std::string>("description", "");
  f.optional<std::string>("notes", "");
  b.name = f.required<std::string>("name");
  b.submission_benchmark = f.required<std::string>("submission_benchmark");
  b.target_accuracy = f.required<double>("target_accuracy");
  b.eval_samples = f.required<int64_t>("eval_samples");
  b.max_samples = f.optional<int64_t>("max_samples", 0);
  b.runs = f.required<int>("runs");
  b.division = f.optional<std::string>("division", "");
  require(b.division.empty() || b.division == "open", path,
          "field 'division' may only be \"open\" (a benchmark that is not the closed one); omit it otherwise");
  {
    const std::string where = path + ": eval_interval";
    JsonFields c(f.raw("eval_interval"), where);
    b.cadence.scale = c.required<double>("scale");
    b.cadence.per_global_batch_sample = c.required<double>("per_global_batch_sample");
    b.cadence.offset = c.required<double>("offset");
    b.cadence.round_down_to = c.required<int64_t>("round_down_to");
    c.reject_unknown();
    require(b.cadence.scale > 0, where, "field 'scale' must be positive");
    require(b.cadence.per_global_batch_sample >= 0 && b.cadence.offset >= 0, where,
            "fields 'per_global_batch_sample' and 'offset' must not be negative");
    require(b.cadence.round_down_to > 0, where, "field 'round_down_to' must be positive");
  }
  f.reject_unknown();
  require(!b.name.empty(), path, "field 'name' must not be empty");
  require(!b.submission_benchmark.empty(), path, "field 'submission_benchmark' must not be empty");
  require(b.target_accuracy > 0 && b.target_accuracy < 1, path,
          cat("field 'target_accuracy' must be in (0, 1), got ", b.target_accuracy));
  require(b.eval_samples > 0, path, "field 'eval_samples' must be positive");
  require(b.max_samples >= 0, path, "field 'max_samples' must not be negative");
  require(b.runs > 0, path, "field 'runs' must be positive");
  return b;
}

bool valid_system_name(const std::string& name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  }) && name.front() != '.';
}

// The steps of load_train_config, each reading one block of the config (train_config.h) into `c`.
void read_model(JsonFields& f, const fs::path& base, const std::string& path, TrainConfig& c) {
  const Json& model = f.raw("bert_config");
  if (model.is_string()) {
    const std::string model_path = resolve_path(model.get<std::string>(), base, path, "bert_config");
    c.model = load_bert_config(model_path);
  } else if (model.is_object()) {
    c.model = bert_config_from_json(model, path + ": bert_config");
  } else {
    throw_input(path, "field 'bert_config' must be an object or a path, got " + json_excerpt(model));
  }
  const std::string checkpoint = f.optional<std::string>("init_checkpoint", "");
  if (!checkpoint.empty()) c.init_checkpoint = resolve_path(checkpoint, base, path, "init_checkpoint");
}

void read_data(const Json& block, const fs::path& base, const std::string& path, bool check_data, TrainConfig& c) {
  const std::string where = path + ": data";
  JsonFields d(block, where);
  const Json& files = d.raw("train_files");
  if (!files.is_array() || files.empty())
    throw_input(where, "field 'train_files' must be a non-empty list of paths or glob patterns");
  for (const auto& item : files) {
    if (!item.is_string()) throw_input(where, "field 'train_files' must hold strings, got " + json_excerpt(item));
    const std::string pattern = resolve_path(item.get<std::string>(), base, where, "train_files");
    if (!check_data) {
      c.train_files.push_back(pattern);
      continue;
    }
    for (auto& file : expand_glob(pattern, path)) c.train_files.push_back(std::move(file));
  }
  c.eval_file = resolve_path(d.required<std::string>("eval_file"), base, where, "eval_file");
  c.seq_len = d.required<int>("seq_len");
  c.max_predictions = d.required<int>("max_predictions");
  c.packed = d.required<bool>("packed");
  d.reject_unknown();
  require(c.seq_len > 0 && c.seq_len <= c.model.max_position_embeddings, where,
          cat("field 'seq_len' must be in [1, max_position_embeddings = ", c.model.max_position_embeddings,
              "], got ", c.seq_len));
  require(c.max_predictions > 0 && c.max_predictions <= c.seq_len, where,
          cat("field 'max_predictions' must be in [1, seq_len], got ", c.max_predictions));
  if (check_data) {
    require(fs::is_regular_file(c.eval_file), where, "field 'eval_file': no such file " + c.eval_file);
    if (!c.init_checkpoint.empty())
      require(fs::is_regular_file(c.init_checkpoint), path, "field 'init_checkpoint': no such file " + c.init_checkpoint);
  }
}

// A batch of `rows` rows must count its token, sequence and prediction slots in int (data/batch.h).
void require_batch_slots(const TrainConfig& c, int rows, const std::string& where, const char* field) {
  require(int64_t(rows) * std::max(c.seq_len, kPackedRow.max_predictions) <= kMaxBatchSlots, where,
          cat("field '", field, "' ", rows, " gives more than ", kMaxBatchSlots, " token slots per batch at seq_len ",
              c.seq_len));
}

void read_batch(const Json& block, const std::string& path, TrainConfig& c) {
  const std::string where = path + ": batch";
  JsonFields b(block, where);
  c.local_batch_size = b.required<int>("local_batch_size");
  c.grad_accum_steps = b.required<int>("grad_accum_steps");
  c.ranks = b.required<int>("ranks");
  b.reject_unknown();
  require(c.local_batch_size > 0, where, "field 'local_batch_size' must be positive");
  require_batch_slots(c, c.local_batch_size, where, "local_batch_size");
  require(c.grad_accum_steps > 0, where, "field 'grad_accum_steps' must be positive");
  require(c.ranks > 0, where, "field 'ranks' must be positive");
  int64_t global = 0;
  require(!__builtin_mul_overflow(int64_t(c.local_batch_size) * c.grad_accum_steps, int64_t(c.ranks), &global) &&
              global <= kMaxBatchSlots,
          where, cat("the global batch local_batch_size x grad_accum_steps x ranks = ", c.local_batch_size, " x ",
                     c.grad_accum_steps, " x ", c.ranks, " is over the limit of ", kMaxBatchSlots, " sequences"));
}

void read_distributed(const Json& block, const std::string& path, TrainConfig& c) {
  const std::string where = path + ": distributed";
  JsonFields d(block, where);
  const std::string clip = d.optional<std::string>("clip", "per_micro_batch");
  c.balanced_batches = d.optional<bool>("balanced_batches", false);
  if (d.has("reduction")) {
    const std::string rwhere = where + ": reduction";
    JsonFields r(d.raw("reduction"), rwhere);
    const std::string algorithm = r.optional<std::string>("algorithm", "allreduce");
    c.reduction.bucket_mb = r.optional<double>("bucket_mb", 25.0);
    c.reduction.shard_optimizer = r.optional<bool>("shard_optimizer", false);
    r.reject_unknown();
    require(algorithm == "allreduce" || algorithm == "bucketed" || algorithm == "hierarchical", rwhere,
            "field 'algorithm' must be \"allreduce\", \"bucketed\" or \"hierarchical\", got \"" + algorithm + "\"");
    c.reduction.algorithm = algorithm == "bucketed"       ? ReduceAlgorithm::BUCKETED
                            : algorithm == "hierarchical" ? ReduceAlgorithm::HIERARCHICAL
                                                          : ReduceAlgorithm::ALLREDUCE;
    require(c.reduction.bucket_mb > 0 && c.reduction.bucket_mb <= 4096, rwhere,
            cat("field 'bucket_mb' must be in (0, 4096], got ", c.reduction.bucket_mb));
    require(!c.reduction.shard_optimizer || c.reduction.algorithm == ReduceAlgorithm::ALLREDUCE, rwhere,
            "field 'shard_optimizer' reduce-scatters the whole buffer: use it with \"algorithm\": \"allreduce\"");
  }
  d.reject_unknown();
  require(clip == "per_micro_batch" || clip == "after_reduction", where,
          "field 'clip' must be \"per_micro_batch\" or \"after_reduction\", got \"" + clip + "\"");
  c.clip_after_reduction = clip == "after_reduction";
}

void read_lamb(const Json& block, const std::string& path, TrainConfig& c) {
  const std::string where = path + ": lamb";
  JsonFields l(block, where);
  LambHyperparams& h = c.lamb;
  h.learning_rate = l.required<double>("learning_rate");
  h.beta1 = l.required<double>("beta1");
  h.beta2 = l.required<double>("beta2");
  h.epsilon = l.required<double>("epsilon");
  h.weight_decay = l.required<double>("weight_decay");
  h.max_grad_norm = l.required<double>("max_grad_norm");
  h.train_steps = l.required<int64_t>("train_steps");
  h.warmup_steps = l.required<int64_t>("warmup_steps");
  h.start_warmup_step = l.required<int64_t>("start_warmup_step");
  h.poly_power = l.required<double>("poly_power");
  l.reject_unknown();
  require(h.learning_rate > 0, where, cat("field 'learning_rate' must be positive, got ", h.learning_rate));
  require(h.beta1 >= 0 && h.beta1 < 1, where, cat("field 'beta1' must be in [0, 1), got ", h.beta1));
  require(h.beta2 >= 0 && h.beta2 < 1, where, cat("field 'beta2' must be in [0, 1), got ", h.beta2));
  require(h.epsilon > 0, where, cat("field 'epsilon' must be positive, got ", h.epsilon));
  require(h.weight_decay >= 0, where, "field 'weight_decay' must not be negative");
  require(h.max_grad_norm > 0, where, "field 'max_grad_norm' must be positive");
  require(h.train_steps > 0, where, "field 'train_steps' must be positive");
  require(h.warmup_steps >= 0 && h.warmup_steps <= h.train_steps, where,
          "field 'warmup_steps' must be in [0, train_steps]");
  require(h.start_warmup_step <= 0 || h.start_warmup_step <= h.warmup_steps, where,
          "field 'start_warmup_step' must not be after the end of warmup");
  require(h.poly_power > 0, where, "field 'poly_power' must be positive");
}

// The eval block; returns its interval override (0: none).
int64_t read_eval(const Json& block, const std::string& path, TrainConfig& c) {
  const std::string where = path + ": eval";
  JsonFields e(block, where);
  c.eval_batch_size = e.required<int>("batch_size");
  const int64_t interval = e.optional<int64_t>("interval_samples", 0);
  e.reject_unknown();
  require(c.eval_batch_size > 0, where, "field 'batch_size' must be positive");
  require_batch_slots(c, c.eval_batch_size, where, "batch_size");
  if (e.has("interval_samples")) require(interval > 0, where, "field 'interval_samples' must be positive");
  return interval;
}

// The benchmark's rules from benchmark.json beside the config, and what follows from them: the eval cadence and
// where the run stops (max_samples, max_steps).
void apply_benchmark(const fs::path& base, const std::string& path, int64_t interval_override, int64_t max_override,
                     TrainConfig& c) {
  const std::string benchmark_path = (base / "benchmark.json").string();
  if (!fs::is_regular_file(benchmark_path))
    throw_input(path, "no benchmark.json beside the config (expected " + benchmark_path + ")");
  const Benchmark bench = load_benchmark(benchmark_path);
  require(bench.name == c.benchmark, path,
          cat("field 'benchmark' is \"", c.benchmark, "\" but ", benchmark_path, " defines \"", bench.name, "\""));
  c.submission_benchmark = bench.submission_benchmark;
  c.target_accuracy = bench.target_accuracy;
  c.eval_samples = bench.eval_samples;
  c.runs = bench.runs;
  c.division = bench.division;
  const int64_t gbs = c.global_batch_size();
  c.eval_interval_samples = interval_override > 0 ? interval_override : bench.cadence.interval(gbs);
  // The most sequences the schedule's steps can hold: a step's training batches at their capacity (a packed row
  // holds several), the data plan's (harness/reader_plan.h).
  const int64_t step_sequences = int64_t(train_capacity(c).sequences) * c.grad_accum_steps * c.ranks;
  int64_t schedule_samples = 0;
  if (__builtin_mul_overflow(c.lamb.train_steps, step_sequences, &schedule_samples))
    throw_input(path + ": lamb", cat("field 'train_steps' ", c.lamb.train_steps, " times the global batch ", gbs,
                                     " overflows the sample count"));
  c.max_samples = max_override > 0                 ? max_override
                  : bench.max_samples > 0          ? bench.max_samples
                                                   : schedule_samples;
  if (max_override == 0 && bench.max_samples == 0) c.max_steps = c.lamb.train_steps;
  require(c.max_samples >= gbs, path, cat("max_samples ", c.max_samples, " is less than one global batch (", gbs, ")"));
}

}  // namespace

TrainConfig load_train_config(const std::string& path, bool check_data) {
  const Json json = read_json_file(path);
  const fs::path base = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  JsonFields f(json, path);
  TrainConfig c;
  c.source = path;
  f.optional<std::string>("notes", "");
  c.benchmark = f.required<std::string>("benchmark");
  c.system = f.required<std::string>("system");
  require(valid_system_name(c.system), path,
          cat("field 'system' must be a plain name (letters, digits, _ - .), got \"", c.system, "\""));
  read_model(f, base, path, c);
  read_data(f.raw("data"), base, path, check_data, c);
  read_batch(f.raw("batch"), path, c);
  if (f.has("backend")) c.backend = parse_backend_spec(f.raw("backend"), path + ": backend");
  if (f.has("distributed")) read_distributed(f.raw("distributed"), path, c);
  read_lamb(f.raw("lamb"), path, c);
  const int64_t interval_override = read_eval(f.raw("eval"), path, c);
  const int64_t max_override = f.optional<int64_t>("max_samples", 0);
  if (f.has("max_samples")) require(max_override > 0, path, "field 'max_samples' must be positive");
  f.reject_unknown();
  apply_benchmark(base, path, interval_override, max_override, c);
  return c;
}

MemoryEstimate estimate_memory(const TrainConfig& c) {
  const BertConfig& m = c.model;
  const double H = m.hidden_size, I = m.intermediate_size, V = m.vocab_size, L = m.num_hidden_layers;
  MemoryEstimate e;
  // The tensors of model/bert_params.cpp: embeddings, L encoder layers, pooler and the two heads.
  e.parameters = V * H + double(m.max_position_embeddings) * H + double(m.type_vocab_size) * H + 2 * H +
                 L * (4 * H * H + 4 * H + 4 * H + 2 * H * I + I + H) + (H * H + H) + V + (H * H + H + 2 * H) +
                 (2 * H + 2);
  const BackendInfo& backend = backend_info(c.backend.name, c.backend.where);
  const bool device = !backend.host_memory;
  const double A = dtype_size(backend.act), F = dtype_size(backend.master);
  // Master weights, gradients and the two LAMB moments in F, the host copy in fp32 (plus an accumulator).
  const double W = backend.weight != backend.master ? dtype_size(backend.weight) : 0;  // a separate weight copy
  e.parameter_bytes = e.parameters * (device ? 4 : 4 * F + W + 4 + (c.grad_accum_steps > 1 ? F : 0));
  if (device) return e;
  // The largest batch: tokens N, prediction slots M (model/bert.cpp carves these), as the data plan sizes them.
  const BatchCapacity train = train_capacity(c), eval = eval_capacity(c);
  const double N = std::max(train.tokens, eval.tokens), M = std::max(train.predictions, eval.predictions);
  const double per_layer = N * (10 * H + 2 * I) * A + N * 4 * F;
  const double rest = N * (2 * H + 7 * H + I) * A + M * (4 * H + V) * A;
  e.activation_bytes = L * per_layer + rest;
  return e;
}

double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 0;
}

void check_memory(const TrainConfig& c, double available_bytes) {
  const MemoryEstimate e = estimate_memory(c);
  if (available_bytes <= 0 || e.total() <= available_bytes) return;
  const auto gib = [](double bytes) {
    char text[64];
    std::snprintf(text, sizeof text, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
    return std::string(text);
  };
  throw_input(c.source, cat("training this model needs at least ", gib(e.total()), " of memory per rank (",
                            std::setprecision(3), e.parameters, " parameters with gradients and optimizer state: ",
                            gib(e.parameter_bytes), "; activations for a batch of ",
                            std::max(c.local_batch_size, c.eval_batch_size), ": ", gib(e.activation_bytes),
                            "), more than the machine's ", gib(available_bytes),
                            "; reduce num_hidden_layers, hidden_size or the batch"));
}

void check_job_ranks(const TrainConfig& config, int ranks) {
  if (ranks != config.ranks)
    throw_input(config.source, cat("the config asks for ", config.ranks, " ranks (batch.ranks) but this job has ", ranks,
                                   "; launch it with mpirun -np ", config.ranks));
}

}  // namespace bertperf
