// `bertperf bench-step`: times one BERT pretraining step (forward with dropout, backward, clip,
// LAMB) on a random batch of full-length sequences, the same step scripts/bench_pytorch_step.py
// times in PyTorch, and prints JSON lines in the same shape so scripts/bench_train_step.py can set
// the two side by side. Also reports achieved GFLOP/s from the FLOP count of the step, the
// activation arena and the process's peak resident memory.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "cli/args.h"
#include "backends/registry.h"
#include "data/packing.h"
#include "harness/train_config.h"
#include "harness/train_stack.h"
#include "model/batch_pipeline.h"

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

}  // namespace

int cmd_bench_step(const Args& args, DistContext& dist) {
  const Options opt(args,
                    {"model", "config", "backend", "backend-options", "batch", "seq-len", "predictions", "threads",
                     "warmup", "steps", "repeats"},
                    {"help", "packed", "eager", "losses"});
  if (opt.flag("help")) {
    std::string names;
    for (const BackendInfo& b : backend_infos()) names += (names.empty() ? "" : "|") + b.name;
    std::cout << "usage: bertperf bench-step [--model mini|base|large | --config CONFIG.json] [--backend " << names
              << "]\n"
                 "                          [--backend-options KEY=VALUE,...] [--batch 32] [--seq-len 128]\n"
                 "                          [--predictions P] [--threads N] [--warmup 2] [--steps 5] [--repeats 3]\n"
                 "                          [--packed] [--eager] [--losses]\n"
                 "  --model   a standard shape: mini (L4 H256), base (L12 H768) or large (L24 H1024)\n"
                 "  --config  the model, batch, sequence length, predictions and backend of a train config\n"
                 "            (e.g. benchmarks/bert/mini/cpu_2c.json); the other options override them\n"
                 "  --backend-options  fields of the config's \"backend\" block, e.g. attention=kernel,gelu=kernel\n"
                 "            for cuda (implementations/backends/registry.h); --threads N is threads=N\n"
                 "  --packed  MLPerf phase-2 shapes: --batch packed rows of 512 tokens, about 2 sequences of 254\n"
                 "            real tokens and 76 predictions per row (seqs_per_s counts sequences)\n"
                 "  --eager   no captured step (CUDA graph) even where the backend can capture\n"
                 "  --losses  a line per step with its losses and gradient norm (the same batches and initial weights\n"
                 "            on every backend, so two backends' lines compare their numerics step by step)\n";
    return 0;
  }
  if (opt.get("model") && opt.get("config")) throw_input("command line", "give --model or --config, not both");
  std::string model_name = opt.get("model").value_or("mini");
  BertConfig config;
  int B = 32, S = 128, P = 0;
  BackendSpec backend_wanted;
  ReductionOptions reduction;  // a config's "distributed" block, for steps timed under mpirun
  bool clip_after_reduction = false;
  if (auto path = opt.get("config")) {
    const TrainConfig train = load_train_config(*path, false);
    model_name = train.benchmark + "/" + train.system;
    config = train.model;
    B = train.local_batch_size, S = train.seq_len, P = train.max_predictions;
    backend_wanted = train.backend;
    reduction = train.reduction;
    clip_after_reduction = train.clip_after_reduction;
  } else {
    config = bench_shape(model_name);
  }
  const bool packed = opt.flag("packed"), losses = opt.flag("losses");
  B = int(opt.integer("batch", B, 1, 1 << 20));
  S = int(opt.integer("seq-len", packed ? 512 : S, 1, 1 << 20));
  P = int(opt.integer("predictions", P > 0 && !opt.get("seq-len") ? P
                                     : S == 512 ? 76 : S == 128 ? 20 : std::max(1, int(0.15 * S + 0.5)), 1, 1 << 20));
  const int warmup = int(opt.integer("warmup", 2, 0, 1 << 20)), steps = int(opt.integer("steps", 5, 1, 1 << 20)),
            repeats = int(opt.integer("repeats", 3, 1, 1 << 20));
  if (B <= 0 || S <= 1 || S > config.max_position_embeddings || P <= 0 || P >= S || steps <= 0 || repeats <= 0 ||
      warmup < 0)
    throw_input("command line", "batch, seq-len, predictions, steps and repeats must be positive, predictions < seq-len");
  if (int64_t(B) * S > (int64_t{1} << 30))
    throw_input("command line", cat("--batch x --seq-len = ", int64_t(B) * S, " tokens is over the limit of 2^30"));
  // The backend block: the config's (or "cpu"), with the command line's name and options over it.
  Json block = backend_wanted.options;
  block["name"] = opt.get("backend").value_or(backend_wanted.name);
  block["capture"] = backend_wanted.capture && !opt.flag("eager");
  if (opt.get("threads")) block["threads"] = opt.integer("threads", 0, 0, 1024);
  if (auto extra = opt.get("backend-options")) {
    std::vector<std::string> pairs;
    for (size_t at = 0; at <= extra->size();) {
      const size_t comma = std::min(extra->find(',', at), extra->size());
      pairs.push_back(extra->substr(at, comma - at));
      at = comma + 1;
    }
    const BackendSpec extra_spec = backend_spec(block["name"].get<std::string>(), pairs, "option --backend-options");
    for (auto it = extra_spec.options.begin(); it != extra_spec.options.end(); ++it) block[it.key()] = it.value();
  }
  const BackendSpec backend_options = parse_backend_spec(block, "command line: backend");
  if (packed && (S != 512 || config.max_position_embeddings < 512))
    throw_input("command line", "--packed takes MLPerf phase-2 rows of 512 tokens: give --seq-len 512 (or none)");
  const Packing rows = packed ? packed_rows(B) : Packing(B, {{S, P}});
  CachedSource source = bench_batches(rows, packed, B, S, P, config.vocab_size);
  if (packed) P = source.shape().capacity.predictions / B;
  TrainStackSpec spec;
  spec.model = config;
  spec.backend = backend_options;
  spec.lamb.learning_rate = 1e-4;
  spec.lamb.train_steps = 1000000;
  spec.reduction = reduction;
  spec.clip = clip_after_reduction ? ClipMode::AFTER_REDUCTION : ClipMode::PER_MICRO_BATCH;
  spec.seed = spec.init_seed = 1;
  spec.train_capacity = source.shape().capacity;
  TrainStack stack(spec, dist);
  Backend& backend = stack.backend();
  const TensorTable& table = stack.table();
  TrainStep& train_step = stack.step();
  BatchPipeline batches(backend, source, 1, LossWeighting::MEAN);
  StagedStep current, ahead;
  bool ahead_ready = false;
  int64_t step_index = 0;
  auto step = [&] {  // as a training session runs a step (harness/train_session.cpp)
    if (ahead_ready) std::swap(current, ahead);
    else batches.next(current);
    train_step.launch(current, step_index);
    ahead_ready = batches.reads_ahead() && batches.next(ahead);
    const StepStats stats = train_step.finish();
    if (losses && dist.is_root())
      std::printf("{\"bench\": \"bertperf_step_loss\", \"backend\": \"%s\", \"step\": %lld, \"mlm_loss\": %.6f, "
                  "\"nsp_loss\": %.6f, \"grad_norm\": %.6f}\n",
                  backend.name().c_str(), static_cast<long long>(step_index), stats.loss.mlm_loss,
                  stats.loss.nsp_loss, stats.grad_norm);
    ++step_index;
  };
  for (int i = 0; i < warmup; ++i) step();

  const double flops = step_flops(config, rows);
  int sequences = 0;
  for (const auto& row : rows) sequences += int(row.size());
  size_t param_count = 0;
  for (const auto& t : table.tensors()) param_count += t.numel;
  struct Repeat {
    double step_s, gemm_s, gemm_flops;
  };
  auto line = [&](std::string extra, const Repeat& r) {
    if (!dist.is_root()) return;  // under mpirun: rank 0 speaks for the job (its step waits for every rank's)
    if (dist.size() > 1)
      extra = cat("\"ranks\": ", dist.size(), ", \"reduction\": \"", stack.reducer().describe(),
                  "\", \"lamb_state_mib\": ", stack.lamb().state_bytes() / 1048576.0, ", ", extra);
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::printf(
        "{\"bench\": \"bertperf_step\", \"model\": \"%s\", \"backend\": \"%s\", \"batch\": %d, \"seq_len\": %d, "
        "\"predictions\": %d, \"threads\": %d, \"params\": %zu, %s\"step_s\": %.5f, \"seqs_per_s\": %.3f, \"gflops\": %.1f, "
        "\"gemm_share\": %.3f, \"gemm_gflops\": %.1f, \"arena_mib\": %.1f, \"peak_rss_mib\": %.1f}\n",
        model_name.c_str(), backend.name().c_str(), B, S, P, backend_options.options.value("threads", 0), param_count,
        extra.c_str(), r.step_s, sequences / r.step_s,
        flops / r.step_s * 1e-9, r.gemm_s / r.step_s, r.gemm_s > 0 ? r.gemm_flops / r.gemm_s * 1e-9 : 0.0,
        stack.model().arena_bytes() / 1048576.0, usage.ru_maxrss / 1024.0);
    std::fflush(stdout);
  };
  Backend::GemmProfile none;
  Backend::GemmProfile& gemm = backend.gemm_profile() ? *backend.gemm_profile() : none;
  gemm.enabled = true;
  Repeat best{1e300, 0, 0};
  for (int r = 0; r < repeats; ++r) {
    gemm.seconds = gemm.flops = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    backend.synchronize();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
    const Repeat this_repeat{dt, gemm.seconds / steps, gemm.flops / steps};
    if (dt < best.step_s) best = this_repeat;
    line(cat("\"repeat\": ", r, ", "), this_repeat);
  }
  gemm.enabled = false;
  line(cat("\"summary\": \"best\", \"packed\": ", packed ? "true" : "false", ", \"sequences\": ", sequences,
           ", \"captured\": ", train_step.captured() ? "true" : "false", ", "),
       best);
  return 0;
}

}  // namespace bertperf::cli
