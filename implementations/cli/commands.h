// The subcommands of the `bertperf` executable. Each takes its own arguments (after the
// subcommand name) and returns the process exit code; bad input is reported by throwing
// InputError, which main turns into one line on stderr and exit status 2.
#pragma once

#include <string>
#include <vector>

#include "comm/context.h"

namespace bertperf::cli {

using Args = std::vector<std::string>;

// Every command gets the job's distributed context (a world of one unless launched by mpirun or srun).
int cmd_train(const Args& args, DistContext& dist);
int cmd_run(const Args& args, DistContext& dist);
int cmd_run_once(const Args& args, DistContext& dist);
int cmd_bench_step(const Args& args, DistContext& dist);
int cmd_bench_data(const Args& args, DistContext& dist);
int cmd_data(const Args& args, DistContext& dist);
int cmd_tokenize(const Args& args, DistContext& dist);
int cmd_convert_checkpoint(const Args& args, DistContext& dist);
int cmd_predict(const Args& args, DistContext& dist);

struct Command {
  const char* name;
  int (*run)(const Args&, DistContext&);
  const char* summary;
};

// The table main dispatches through; add a command here and nowhere else.
inline const Command kCommands[] = {
    {"train", cmd_train, "train from a config file and data files (no MLPerf logging)"},
    {"run", cmd_run, "an MLPerf result set: N timed runs into an MLPerf submission tree"},
    {"run-once", cmd_run_once, "one timed MLPerf run, its :::MLLOG log written atomically"},
    {"data", cmd_data, "create MLPerf HDF5 pretraining data from text (the reference algorithm)"},
    {"tokenize", cmd_tokenize, "WordPiece-tokenize text with a vocabulary (the reference tokenizer)"},
    {"convert-checkpoint", cmd_convert_checkpoint,
     "convert a TensorFlow checkpoint (e.g. phase-1 model.ckpt-28252) to an HDF5 checkpoint"},
    {"bench-step", cmd_bench_step, "time one training step at BERT mini/base/large shapes (JSON lines)"},
    {"bench-data", cmd_bench_data, "time the training read path of one rank of N at phase-2 shapes (JSON lines)"},
    {"predict", cmd_predict, "the scaling model: step time, throughput and time to train at any scale; --validate"},
};

}  // namespace bertperf::cli
