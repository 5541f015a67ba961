// `bertperf bench-step`: times one BERT pretraining step (forward with dropout, backward, clip,
// LAMB) on a random batch of full-length sequences, the same step scripts/bench_pytorch_step.py
// times in PyTorch, and prints JSON lines in the same shape so scripts/bench_train_step.py can set
// the two side by side. Also reports achieved GFLOP/s from the FLOP count of the step, the
// activation arena, the process's peak resident memory and the times a step waits on the host: the thread that runs
// the steps (host_waits_per_step: synchronize, host_wait and waiting uploads, device.h; 0 where nothing waits between
// the repeat's reads of the step records, harness/train_step.h) and the batch pipeline's reader
// (reader_waits_per_step: its waits for the upload that last read a pinned block). With --roofline it times nothing:
// it builds the step on the op-cost recorder (backends/op_cost.h), runs it once, and prices every op on a device of
// the table (perf/roofline.h): the predicted time of each op, the step's and the samples a second, in bf16 and with
// the encoder's linears in FP8, naming the op that holds the step back.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>

#include "cli/args.h"
#include "backends/op_cost.h"
#include "data/packing.h"
#include "harness/train_config.h"
#include "harness/train_stack.h"
#include "model/batch_pipeline.h"
#include "perf/roofline.h"
#include "registry/registry.h"

namespace bertperf::cli {

namespace {

BertConfig bench_shape(const std::string& name) {
  BertConfig c;  // BERT-large defaults
  if (name == "mini") {
    c.num_hidden_layers = 4, c.hidden_size = 256, c.num_attention_heads = 4, c.intermediate_size = 1024;
  } else if (name == "base") {
    c.num_hidden_layers = 12, c.hidden_size = 768, c.num_attention_heads = 12, c.intermediate_size = 3072;
  } else if (name != "large") {
    throw_input("command line", "option --model must be mini, base or large, got '" + name + "'");
  }
  return c;
}

// Training FLOPs of one step: 3x the forward (forward, and the two GEMMs of each backward),
// counting the GEMM-shaped work: the four attention projections, the FFN, QK^T and PV (within each sequence), the
// pooler, the MLM transform and decoder at the masked rows, and NSP.
double step_flops(const BertConfig& c, const Packing& rows) {
  const double H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  double tokens = 0, predictions = 0, sequences = 0, attention = 0;
  for (const auto& row : rows)
    for (const SequenceShape& q : row) {
      tokens += q.length;
      predictions += q.predictions;
      sequences += 1;
      attention += 2 * 2 * double(q.length) * q.length * H;
    }
  const double per_layer = 2 * tokens * (4 * H * H + 2 * H * I) + attention;
  const double heads = 2 * predictions * (H * H + H * V) + 2 * sequences * (H * H + 2 * H);
  return 3 * (c.num_hidden_layers * per_layer + heads);
}

// MLPerf phase-2 shapes: B packed rows of 512 tokens holding up to 3 sequences each. The rows cycle through four
// packings whose aggregates are the published ones of the MLPerf packed data set: 2 sequences per row (1.999) of
// 254 real tokens on average, 76 predictions per row (0.15 of each sequence, at most 76). Shared with
// scripts/bench_pytorch_gpu.py, so both time the same sequences.
const std::vector<std::vector<int>> kPhase2Rows = {{508}, {300, 208}, {380, 128}, {200, 160, 148}};

int phase2_predictions(int length) { return std::min(76, int(0.15 * length + 0.5)); }

Packing packed_rows(int B) {
  Packing rows;
  for (int r = 0; r < B; ++r) {
    rows.emplace_back();
    for (int len : kPhase2Rows[r % kPhase2Rows.size()]) rows.back().push_back({len, phase2_predictions(len)});
  }
  return rows;
}

// The batches a step is timed on: two in turn (the next staged while a step runs, as a training run does), of
// random tokens in one packing (packed phase-2 rows, or B full-length sequences of S tokens with P predictions),
// made once and held in memory, so a step's staging is a copy.
CachedSource bench_batches(const Packing& rows, bool packed, int B, int S, int P, int V) {
  const BatchShape shape = packed ? BatchShape{true, {B * 512, B * kPackedRow.max_sequences, B * 76, 512}}
                                  : BatchShape{false, {B * S, B, B * P, S}};
  SyntheticSource two(shape, {rows, rows}, V, 1, false);
  return CachedSource(two, true);
}

// The roofline of one step on `device`: the ops of `costs` grouped by name and shape, the longest first, as JSON
// lines, then one summary line for bf16 and one with the encoder linears in FP8.
void print_roofline(const std::vector<OpCost>& costs, const perf::RooflineDevice& device, const std::string& model,
                    int B, int S, int P, int micro_batches, int sequences) {
  struct Group {
    std::string name, shape;
    int count = 0;
    double flops = 0, bytes = 0, bf16_s = 0, fp8_s = 0;
    bool encoder_linear = false, memory_bound = false;
  };
  std::map<std::pair<std::string, std::string>, Group> groups;
  for (const OpCost& c : costs) {
    Group& g = groups[{c.name, c.shape}];
    const perf::OpTime bf16 = perf::op_time(c.flops, c.bytes, device.bf16_flops, device);
    const perf::OpTime fp8 =
        c.encoder_linear ? perf::op_time(c.flops, c.fp8_bytes, device.fp8_flops, device) : bf16;
    g.name = c.name, g.shape = c.shape, g.encoder_linear = c.encoder_linear, g.memory_bound = bf16.memory_bound();
    ++g.count, g.flops += c.flops, g.bytes += c.bytes, g.bf16_s += bf16.time_s, g.fp8_s += fp8.time_s;
  }
  std::vector<Group> rows;
  for (auto& [key, g] : groups) rows.push_back(g);
  std::sort(rows.begin(), rows.end(), [](const Group& a, const Group& b) { return a.bf16_s > b.bf16_s; });
  double flops = 0, bytes = 0, bf16_s = 0, fp8_s = 0, launches_s = double(costs.size()) * device.launch_s;
  for (const Group& g : rows) {
    flops += g.flops, bytes += g.bytes, bf16_s += g.bf16_s, fp8_s += g.fp8_s;
    std::printf("{\"bench\": \"bertperf_roofline\", \"device\": \"%s\", \"op\": \"%s\", \"shape\": \"%s\", "
                "\"count\": %d, \"gflop\": %.3f, \"mib\": %.3f, \"bound\": \"%s\", \"bf16_us\": %.2f, "
                "\"fp8_us\": %.2f}\n",
                device.name.c_str(), g.name.c_str(), g.shape.c_str(), g.count, g.flops * 1e-9, g.bytes / 1048576.0,
                g.memory_bound ? "memory" : "compute", g.bf16_s * 1e6, g.fp8_s * 1e6);
  }
  auto summary = [&](const char* precision, double step_s, double peak, bool fp8) {
    const Group* worst = &rows.front();
    for (const Group& g : rows)
      if ((fp8 ? g.fp8_s : g.bf16_s) > (fp8 ? worst->fp8_s : worst->bf16_s)) worst = &g;
    std::printf("{\"bench\": \"bertperf_roofline\", \"summary\": \"%s\", \"device\": \"%s\", \"model\": \"%s\", "
                "\"batch\": %d, \"seq_len\": %d, \"predictions\": %d, \"micro_batches\": %d, \"sequences\": %d, "
                "\"ops\": %zu, \"gflop\": %.1f, \"gib\": %.3f, \"launch_ms\": %.3f, \"step_ms\": %.4f, "
                "\"samples_per_s\": %.1f, \"bf16_mfu\": %.3f, \"holds_back\": \"%s %s\", "
                "\"holds_back_share\": %.3f}\n",
                precision, device.name.c_str(), model.c_str(), B, S, P, micro_batches, sequences, costs.size(),
                flops * 1e-9, bytes / 1073741824.0, launches_s * 1e3, step_s * 1e3, sequences / step_s,
                flops / peak / step_s, worst->name.c_str(), worst->shape.c_str(),
                (fp8 ? worst->fp8_s : worst->bf16_s) / step_s);
  };
  summary("bf16", bf16_s, device.bf16_flops, false);
  summary("fp8", fp8_s, device.bf16_flops, true);
  std::fflush(stdout);
}

void print_help() {
  std::string names;
  for (const BackendInfo& b : backend_infos()) names += (names.empty() ? "" : "|") + b.name;
  std::cout << "usage: bertperf bench-step [--model mini|base|large | --config CONFIG.json] [--backend " << names
            << "]\n"
               "                          [--backend-options KEY=VALUE,...] [--batch 32] [--seq-len 128]\n"
               "                          [--predictions P] [--threads N] [--warmup 2] [--steps 5] [--repeats 3]\n"
               "                          [--micro-batches 1] [--packed] [--eager] [--losses]\n"
               "                          [--roofline [--device h200] [--devices DEVICES.json]]\n"
               "  --model   a standard shape: mini (L4 H256), base (L12 H768) or large (L24 H1024)\n"
               "  --config  the model, batch, sequence length, predictions and backend of a train config\n"
               "            (e.g. benchmarks/bert/mini/cpu_2c.json); the other options override them\n"
               "  --backend-options  fields of the config's \"backend\" block, e.g. attention=kernel,gelu=kernel\n"
               "            for cuda (implementations/registry/registry.h); --threads N is threads=N\n"
               "  --packed  MLPerf phase-2 shapes: --batch packed rows of 512 tokens, about 2 sequences of 254\n"
               "            real tokens and 76 predictions per row (seqs_per_s counts sequences)\n"
               "  --eager   no captured step (CUDA graph) even where the backend can capture\n"
               "  --micro-batches  micro-batches a step (gradient accumulation), each of --batch\n"
               "  --roofline  time nothing: the step's ops priced on --device (a class of the device table,\n"
               "            benchmarks/bert/mlperf/reference/devices.json, or an accelerator name: h200, h100-sxm):\n"
               "            a JSON line an op (name and shape, longest first), then the step in bf16 and with the\n"
               "            encoder's linears in FP8: time, samples/s and the op that holds it back\n"
               "  --losses  a line per step with its losses (summed over the ranks under mpirun) and gradient norm\n"
               "            (the same batches and initial weights on every backend, so two backends' lines compare\n"
               "            their numerics step by step); reading each step's record, it waits once a step\n"
               "Prints a paths line after the warm-up (which way the backend's ops went where it has a choice,\n"
               "e.g. the CUDA attention: cudnn or kernel), then one JSON line per repeat and a summary.\n";
}

// The backend block: the config's (or "cpu"), with the command line's name and options over it.
BackendSpec bench_backend(const Options& opt, const BackendSpec& wanted) {
  Json block = backend_block(wanted);
  if (opt.get("backend")) block["name"] = *opt.get("backend");
  if (opt.get("threads")) block["threads"] = opt.integer("threads", 0, 0, 1024);
  if (opt.get("backend-options")) set_backend_options(block, opt.list("backend-options"), "option --backend-options");
  if (opt.flag("eager")) block["capture"] = false;
  return parse_backend_spec(block, "command line: backend");
}

// What one run times: the model and its batch (B rows of S tokens with P predictions), the backend, the loop's
// counts; a config's, with the command line's over it.
struct BenchPlan {
  std::string model_name;
  BertConfig config;
  int B = 32, S = 128, P = 0;
  int micro_batches = 1, warmup = 2, steps = 5, repeats = 3;
  bool packed = false, losses = false, roofline = false;
  BackendSpec backend;
  ReductionOptions reduction;  // a config's "distributed" block, for steps timed under mpirun
  bool clip_after_reduction = false;
};

BenchPlan read_plan(const Options& opt) {
  if (opt.get("model") && opt.get("config")) throw_input("command line", "give --model or --config, not both");
  BenchPlan plan;
  plan.model_name = opt.get("model").value_or("mini");
  BackendSpec backend_wanted;
  if (auto path = opt.get("config")) {
    const TrainConfig train = load_train_config(*path, false);
    plan.model_name = train.benchmark + "/" + train.system;
    plan.config = train.model;
    plan.B = train.local_batch_size, plan.S = train.seq_len, plan.P = train.max_predictions;
    backend_wanted = train.backend;
    plan.reduction = train.reduction;
    plan.clip_after_reduction = train.clip_after_reduction;
  } else {
    plan.config = bench_shape(plan.model_name);
  }
  plan.packed = opt.flag("packed"), plan.losses = opt.flag("losses");
  int &B = plan.B, &S = plan.S, &P = plan.P;
  B = int(opt.integer("batch", B, 1, 1 << 20));
  S = int(opt.integer("seq-len", plan.packed ? 512 : S, 1, 1 << 20));
  P = int(opt.integer("predictions", P > 0 && !opt.get("seq-len") ? P
                                     : S == 512 ? 76 : S == 128 ? 20 : std::max(1, int(0.15 * S + 0.5)), 1, 1 << 20));
  plan.micro_batches = int(opt.integer("micro-batches", 1, 1, 1 << 10));
  plan.roofline = opt.flag("roofline");
  if (!plan.roofline && (opt.get("device") || opt.get("devices")))
    throw_input("command line", "--device and --devices go with --roofline");
  plan.warmup = int(opt.integer("warmup", 2, 0, 1 << 20)), plan.steps = int(opt.integer("steps", 5, 1, 1 << 20)),
  plan.repeats = int(opt.integer("repeats", 3, 1, 1 << 20));
  if (B <= 0 || S <= 1 || S > plan.config.max_position_embeddings || P <= 0 || P >= S || plan.steps <= 0 ||
      plan.repeats <= 0 || plan.warmup < 0)
    throw_input("command line", "batch, seq-len, predictions, steps and repeats must be positive, predictions < seq-len");
  if (int64_t(B) * S > (int64_t{1} << 30))
    throw_input("command line", cat("--batch x --seq-len = ", int64_t(B) * S, " tokens is over the limit of 2^30"));
  plan.backend = bench_backend(opt, backend_wanted);
  if (plan.packed && (S != 512 || plan.config.max_position_embeddings < 512))
    throw_input("command line", "--packed takes MLPerf phase-2 rows of 512 tokens: give --seq-len 512 (or none)");
  return plan;
}

TrainStackSpec stack_spec(const BenchPlan& plan, const BatchShape& shape) {
  TrainStackSpec spec;
  spec.model = plan.config;
  spec.backend = plan.backend;
  spec.lamb.learning_rate = 1e-4;
  spec.lamb.train_steps = 1000000;
  spec.reduction = plan.reduction;
  spec.clip = plan.clip_after_reduction ? ClipMode::AFTER_REDUCTION : ClipMode::PER_MICRO_BATCH;
  spec.seed = spec.init_seed = 1;
  spec.train_capacity = shape.capacity;
  spec.micro_batches = plan.micro_batches;
  return spec;
}

// The device --device names: a class of the table --devices names, or the class of an accelerator's name.
perf::RooflineDevice roofline_device(const Options& opt) {
  const std::string table_path = opt.get("devices").value_or("benchmarks/bert/mlperf/reference/devices.json");
  const perf::DeviceTable table = perf::DeviceTable::load(table_path);
  const std::string wanted = opt.get("device").value_or("h200");
  const perf::DeviceClass* device = nullptr;
  for (const perf::DeviceClass& d : table.classes())
    if (d.name == wanted) device = &d;
  if (!device) device = table.match(wanted);
  if (!device) device = &table.by_name(wanted);  // the error naming the known classes
  return perf::roofline_device(*device, table_path);
}

// --roofline: the step built on the op-cost recorder and run once (uncaptured), its ops priced on the device.
void price_step(const BenchPlan& plan, TrainStackSpec spec, CachedSource& source, const perf::RooflineDevice& device,
                int sequences, DistContext& dist) {
  auto recorder = std::make_unique<OpCostRecorder>();
  OpCostRecorder& costs = *recorder;
  spec.backend.capture = false;
  TrainStack stack(spec, dist, std::move(recorder));
  BatchPipeline batches(stack.backend(), source, plan.micro_batches, LossWeighting::MEAN);
  StagedStep one;
  batches.next(one);
  costs.clear();
  stack.step().launch(one, 0);  // the recorder runs no op: no record to read
  if (dist.is_root())
    print_roofline(costs.costs(), device, plan.model_name, plan.B, plan.S, plan.P, plan.micro_batches, sequences);
}

// The steps timed, as a training session runs them (harness/train_session.cpp): the next batch staged while a step
// runs; a JSON line of losses a step with --losses, the backend's paths after the warm-up, a line of timings a
// repeat and the best. Rank 0 speaks for the job under mpirun (its step waits for every rank's).
class StepBench {
 public:
  StepBench(const BenchPlan& plan, TrainStack& stack, CachedSource& source, const Packing& rows, int sequences,
            DistContext& dist)
      : plan_(plan), stack_(stack), backend_(stack.backend()), dist_(dist),
        batches_(backend_, source, plan.micro_batches, LossWeighting::MEAN), sequences_(sequences),
        flops_(step_flops(plan.config, rows) * plan.micro_batches) {
    for (const auto& t : stack.table().tensors()) params_ += t.numel;
  }

  void run() {
    for (int i = 0; i < plan_.warmup; ++i) step();
    stack_.step().read();  // each repeat starts with the ring of step records read
    print_paths();
    Backend::GemmProfile none;
    Backend::GemmProfile& gemm = backend_.gemm_profile() ? *backend_.gemm_profile() : none;
    gemm.enabled = true;
    Repeat best{1e300, 0, 0, 0, 0};
    for (int r = 0; r < plan_.repeats; ++r) {
      const Repeat this_repeat = repeat(gemm);
      if (this_repeat.step_s < best.step_s) best = this_repeat;
      print(cat("\"repeat\": ", r, ", "), this_repeat);
    }
    gemm.enabled = false;
    print(cat("\"summary\": \"best\", \"packed\": ", plan_.packed ? "true" : "false", ", \"sequences\": ", sequences_,
              ", \"captured\": ", stack_.step().captured() ? "true" : "false", ", "),
          best);
  }

 private:
  struct Repeat {
    double step_s, gemm_s, gemm_flops;
    double host_waits, reader_waits;  // a step's: the stepping thread's, the other threads' (device.h)
  };

  void step() {
    if (ahead_ready_) std::swap(current_, ahead_);
    else batches_.next(current_);
    TrainStep& train_step = stack_.step();
    train_step.launch(current_, step_index_);
    ahead_ready_ = batches_.reads_ahead() && batches_.next(ahead_);
    ++step_index_;
    if (!plan_.losses) return;
    const StepStats stats = train_step.read().back();  // a wait a step: --losses is for checking, not timing
    if (dist_.is_root())
      std::printf("{\"bench\": \"bertperf_step_loss\", \"backend\": \"%s\", \"step\": %lld, \"mlm_loss\": %.6f, "
                  "\"nsp_loss\": %.6f, \"grad_norm\": %.6f}\n",
                  backend_.name().c_str(), static_cast<long long>(stats.updates), stats.loss.mlm_loss,
                  stats.loss.nsp_loss, stats.grad_norm);
  }

  // Which way the backend's ops went in the warm-up steps where it has a choice (the CUDA attention: cuDNN's or its
  // own kernel; nothing before a first step), before timing: scripts/device_check.sh's probe says it.
  void print_paths() {
    if (!dist_.is_root()) return;
    std::string paths;
    for (const auto& [what, how] : backend_.paths_taken())
      paths += cat(paths.empty() ? "" : ", ", "\"", what, "\": \"", how, "\"");
    std::printf("{\"bench\": \"bertperf_paths\", \"model\": \"%s\", \"backend\": \"%s\", \"paths\": {%s}}\n",
                plan_.model_name.c_str(), backend_.name().c_str(), paths.c_str());
    std::fflush(stdout);
  }

  Repeat repeat(Backend::GemmProfile& gemm) {
    gemm.seconds = gemm.flops = 0;
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t mine_before = Device::host_waits_of_this_thread(), all_before = backend_.host_waits();
    const int slots = stack_.step().options().record_slots;
    for (int i = 0; i < plan_.steps; ++i) {
      step();
      // The ring is full: the wait launch() would make next, the records dropped (the last step's, after the loop).
      if ((i + 1) % slots == 0 && i + 1 < plan_.steps) stack_.step().read();
    }
    const int64_t mine = Device::host_waits_of_this_thread() - mine_before;
    const int64_t others = backend_.host_waits() - all_before - mine;
    stack_.step().read();  // the repeat's log point: the records of its steps, one wait
    backend_.synchronize();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / plan_.steps;
    return {dt, gemm.seconds / plan_.steps, gemm.flops / plan_.steps, double(mine) / plan_.steps,
            double(others) / plan_.steps};
  }

  void print(std::string extra, const Repeat& r) {
    if (!dist_.is_root()) return;
    if (dist_.size() > 1)
      extra = cat("\"ranks\": ", dist_.size(), ", \"reduction\": \"", stack_.reducer().describe(),
                  "\", \"lamb_state_mib\": ", stack_.lamb().state_bytes() / 1048576.0, ", ", extra);
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::printf(
        "{\"bench\": \"bertperf_step\", \"model\": \"%s\", \"backend\": \"%s\", \"batch\": %d, \"seq_len\": %d, "
        "\"predictions\": %d, \"threads\": %d, \"params\": %zu, %s\"step_s\": %.5f, \"seqs_per_s\": %.3f, \"gflops\": %.1f, "
        "\"gemm_share\": %.3f, \"gemm_gflops\": %.1f, \"host_waits_per_step\": %.2f, \"reader_waits_per_step\": %.2f, "
        "\"arena_mib\": %.1f, "
        "\"peak_rss_mib\": %.1f}\n",
        plan_.model_name.c_str(), backend_.name().c_str(), plan_.B, plan_.S, plan_.P,
        plan_.backend.options.value("threads", 0), params_, extra.c_str(), r.step_s, sequences_ / r.step_s,
        flops_ / r.step_s * 1e-9, r.gemm_s / r.step_s, r.gemm_s > 0 ? r.gemm_flops / r.gemm_s * 1e-9 : 0.0,
        r.host_waits, r.reader_waits, stack_.model().arena_bytes() / 1048576.0, usage.ru_maxrss / 1024.0);
    std::fflush(stdout);
  }

  const BenchPlan& plan_;
  TrainStack& stack_;
  Backend& backend_;
  DistContext& dist_;
  BatchPipeline batches_;
  StagedStep current_, ahead_;
  bool ahead_ready_ = false;
  int64_t step_index_ = 0;
  const int sequences_;
  const double flops_;
  size_t params_ = 0;
};

}  // namespace

int cmd_bench_step(const Args& args, DistContext& dist) {
  const Options opt(args,
                    {"model", "config", "backend", "backend-options", "batch", "seq-len", "predictions", "threads",
                     "warmup", "steps", "repeats", "micro-batches", "device", "devices"},
                    {"help", "packed", "eager", "roofline", "losses"});
  if (opt.flag("help")) {
    print_help();
    return 0;
  }
  BenchPlan plan = read_plan(opt);
  const Packing rows = plan.packed ? packed_rows(plan.B) : Packing(plan.B, {{plan.S, plan.P}});
  CachedSource source = bench_batches(rows, plan.packed, plan.B, plan.S, plan.P, plan.config.vocab_size);
  if (plan.packed) plan.P = source.shape().capacity.predictions / plan.B;
  const TrainStackSpec spec = stack_spec(plan, source.shape());
  int sequences = 0;
  for (const auto& row : rows) sequences += int(row.size());
  sequences *= plan.micro_batches;
  if (plan.roofline) {
    price_step(plan, spec, source, roofline_device(opt), sequences, dist);
    return 0;
  }
  TrainStack stack(spec, dist);
  StepBench(plan, stack, source, rows, sequences, dist).run();
  return 0;
}

}  // namespace bertperf::cli
