// The `bertperf` executable: dispatches to a subcommand and turns every failure into one line on
// stderr and a non-zero exit (2 for bad input, 1 for internal errors), never a signal. It builds the
// distributed context first and destroys it last; a failure on one rank of several ends the whole job
// (report_failure).
#include <cstring>
#include <iomanip>
#include <iostream>
#include <memory>

#include "cli/build_info.h"
#include "cli/commands.h"
#include "comm/context.h"

namespace {

void print_usage(std::ostream& out) {
  out << "usage: bertperf <command> [options]\n\ncommands:\n";
  for (const auto& c : bertperf::cli::kCommands) out << "  " << std::left << std::setw(20) << c.name << c.summary << "\n";
  out << "\n`bertperf <command> --help` describes a command; `bertperf --version` names the build.\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_usage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::cout << bertperf::cli::version_line() << "\n";
    return 0;
  }
  const std::string name = argv[1];
  const bertperf::cli::Args args(argv + 2, argv + argc);
  for (const auto& c : bertperf::cli::kCommands) {
    if (name == c.name)
      return bertperf::run_job("bertperf " + name, [&](bertperf::DistContext& dist) { return c.run(args, dist); });
  }
  std::cerr << "bertperf: unknown command '" << name << "'\n";
  print_usage(std::cerr);
  return 2;
}
