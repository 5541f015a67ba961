// The subcommands of the `bertperf` executable. Each takes its own arguments (after the
// subcommand name) and returns the process exit code; bad input is reported by throwing
// InputError, which main turns into one line on stderr and exit status 2. The commands that run
// on every rank of a job (train, run-once, bench-step) also get the distributed context main
// built; a failure on any rank of such a job ends all of them (report_failure, dist/context.h).
#pragma once

#include <string>
#include <vector>

#include "dist/context.h"

namespace bertperf::cli {

using Args = std::vector<std::string>;

int cmd_train(const Args& args, DistContext& dist);
int cmd_run(const Args& args);
int cmd_run_once(const Args& args, DistContext& dist);
int cmd_bench_step(const Args& args, DistContext& dist);
int cmd_data(const Args& args);
int cmd_tokenize(const Args& args);
int cmd_convert_checkpoint(const Args& args);

// One of `run` (a single process) and `run_dist` (every rank of a job) is set.
struct Command {
  const char* name;
  int (*run)(const Args&);
  int (*run_dist)(const Args&, DistContext&);
  const char* summary;
};

// The table main dispatches through; add a command here and nowhere else.
inline const Command kCommands[] = {
    {"train", nullptr, cmd_train, "train from a config file and data files (no MLPerf logging)"},
    {"run", cmd_run, nullptr, "an MLPerf result set: N timed runs into an MLPerf submission tree"},
    {"run-once", nullptr, cmd_run_once, "one timed MLPerf run, its :::MLLOG log written atomically"},
    {"data", cmd_data, nullptr, "create MLPerf HDF5 pretraining data from text (the reference algorithm)"},
    {"tokenize", cmd_tokenize, nullptr, "WordPiece-tokenize text with a vocabulary (the reference tokenizer)"},
    {"convert-checkpoint", cmd_convert_checkpoint, nullptr,
     "convert a TensorFlow checkpoint (e.g. phase-1 model.ckpt-28252) to an HDF5 checkpoint"},
    {"bench-step", nullptr, cmd_bench_step, "time one training step at BERT mini/base/large shapes (JSON lines)"},
};

}  // namespace bertperf::cli
