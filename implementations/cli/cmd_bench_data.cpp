// `bertperf bench-data`: the training read path of one rank, timed apart from the model: the reader's plan over the
// length indexes, the reads of its own rows and the batches written into pinned memory (model/batch_stage.h's
// block), at MLPerf phase-2 shapes (packed rows of 512 tokens, shuffled, balanced across N simulated ranks). Prints
// JSON lines: samples per second, per CPU second of the process (per core), and the bytes read per step from the
// shards beside the bytes of the rows' values (the rank's own share) and the length indexes'.
// scripts/bench_data.py runs it beside the PyTorch-style peer (scripts/bench_data_peer.py) on shards made by
// `bertperf data` at the size of the MLPerf phase-2 shards.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli/args.h"
#include "data/reader.h"
#include "model/batch_stage.h"
#include "registry/registry.h"

namespace bertperf::cli {

namespace {

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// The shards: the files given, or the .hdf5 files of the folders given, in name order.
std::vector<std::string> shard_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    if (!std::filesystem::is_directory(input)) {
      files.push_back(input);
      continue;
    }
    std::vector<std::string> found;
    for (const auto& entry : std::filesystem::directory_iterator(input))
      if (entry.path().extension() == ".hdf5") found.push_back(entry.path().string());
    std::sort(found.begin(), found.end());
    if (found.empty()) throw_input(input, "holds no .hdf5 shards");
    files.insert(files.end(), found.begin(), found.end());
  }
  if (files.empty()) throw_input("command line", "no shards (see bertperf bench-data --help)");
  return files;
}

}  // namespace

int cmd_bench_data(const Args& args, DistContext&) {
  const Options opt(args, {"ranks", "rank", "batch", "steps", "seq-len", "predictions", "seed", "backend"},
                    {"help", "unbalanced"});
  if (opt.flag("help")) {
    std::cout << "usage: bertperf bench-data [--ranks 512] [--rank 0] [--batch 28] [--steps 200] [--seq-len 512]\n"
                 "                          [--predictions 76] [--seed 1] [--backend cpu] [--unbalanced] SHARDS...\n"
                 "  SHARDS      packed (or unpacked, then packed by the reader) shards, or folders of them\n"
                 "  --ranks N   the simulated world: rank --rank reads its share of balanced global batches\n"
                 "              of N x --batch rows (--unbalanced: its own shards, as without balance)\n"
                 "  --batch B   rows per batch (packed rows of --seq-len tokens)\n"
                 "  --backend   whose pinned memory the batches are written into\n";
    return 0;
  }
  ReaderOptions o;
  o.files = shard_files(opt.positional());
  o.world_size = int(opt.integer("ranks", 512, 1, 1 << 20));
  o.rank = int(opt.integer("rank", 0, 0, o.world_size - 1));
  o.batch_rows = int(opt.integer("batch", 28, 1, 1 << 16));
  o.seq_len = int(opt.integer("seq-len", 512, 2, 32767));
  o.max_predictions = int(opt.integer("predictions", 76, 1, 32767));
  o.seed = uint64_t(opt.integer("seed", 1, 0, int64_t{1} << 62));
  o.pack = true;
  o.balance = !opt.flag("unbalanced");
  o.pad_predictions = false;  // as training reads (harness/reader_plan.h)
  const int steps = int(opt.integer("steps", 200, 1, 1 << 24));
  const std::unique_ptr<Backend> backend =
      make_backend(parse_backend_spec(Json{{"name", opt.get("backend").value_or("cpu")}}, "option --backend"), {});

  // Opening reads every shard's length index (built here once where there is none): timed apart.
  const auto t_open = std::chrono::steady_clock::now();
  const double cpu_open = cpu_seconds();
  PretrainingReader reader(o);
  const double open_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_open).count();
  const double open_cpu_s = cpu_seconds() - cpu_open;
  const ReadStats opened = reader.stats();
  BatchStage stage(*backend, reader.capacity());

  int64_t samples = 0, tokens = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = cpu_seconds();
  int done = 0;
  for (; done < steps; ++done) {
    BatchView& view = stage.host();
    if (!reader.next(view)) break;
    samples += view.sequences;
    tokens += view.tokens;
  }
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu_s = cpu_seconds() - cpu0;
  if (done == 0) throw_input("command line", "the shards give no batch at these options");
  const ReadStats s = reader.stats();
  const double per_step = 1.0 / done;
  std::printf(
      "{\"bench\": \"bertperf_data\", \"files\": %zu, \"ranks\": %d, \"rank\": %d, \"balanced\": %s, \"batch\": %d, "
      "\"seq_len\": %d, \"steps\": %d, \"samples\": %lld, \"rows_per_step\": %.1f, \"tokens_per_step\": %.1f, "
      "\"wall_s\": %.3f, \"cpu_s\": %.3f, \"samples_per_s\": %.1f, \"samples_per_s_per_core\": %.1f, "
      "\"shard_bytes_per_step\": %.0f, \"value_bytes_per_step\": %.0f, \"index_bytes_per_step\": %.0f, "
      "\"index_open_bytes\": %llu, \"open_s\": %.3f, \"open_cpu_s\": %.3f}\n",
      o.files.size(), o.world_size, o.rank, o.balance ? "true" : "false", o.batch_rows, o.seq_len, done,
      static_cast<long long>(samples), double(s.rows) * per_step, double(tokens) * per_step, wall_s, cpu_s,
      double(samples) / wall_s, double(samples) / std::max(cpu_s, 1e-9), double(s.shard_bytes) * per_step,
      double(s.value_bytes) * per_step, double(s.index_bytes - opened.index_bytes) * per_step,
      static_cast<unsigned long long>(opened.index_bytes), open_s, open_cpu_s);
  return 0;
}

}  // namespace bertperf::cli
