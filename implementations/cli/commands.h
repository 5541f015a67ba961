// The subcommands of the `bertperf` executable. Each takes its own arguments (after the
// subcommand name) and returns the process exit code; bad input is reported by throwing
// InputError, which main turns into one line on stderr and exit status 2.
#pragma once

#include <string>
#include <vector>

namespace bertperf::cli {

using Args = std::vector<std::string>;

int cmd_train(const Args& args);

struct Command {
  const char* name;
  int (*run)(const Args&);
  const char* summary;
};

// The table main dispatches through; add a command here and nowhere else.
inline const Command kCommands[] = {
    {"train", cmd_train, "train from a config file and data files (no MLPerf logging)"},
};

}  // namespace bertperf::cli
