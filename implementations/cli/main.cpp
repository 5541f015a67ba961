// The `bertperf` executable: dispatches to a subcommand and turns every failure into one line on
// stderr and a non-zero exit (2 for bad input, 1 for internal errors), never a signal.
#include <cstring>
#include <exception>
#include <iomanip>
#include <iostream>

#include "cli/commands.h"
#include "core/errors.h"

namespace {

void print_usage(std::ostream& out) {
  out << "usage: bertperf <command> [options]\n\ncommands:\n";
  for (const auto& c : bertperf::cli::kCommands) out << "  " << std::left << std::setw(20) << c.name << c.summary << "\n";
  out << "\n`bertperf <command> --help` describes a command.\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_usage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? 2 : 0;
  }
  const std::string name = argv[1];
  const bertperf::cli::Args args(argv + 2, argv + argc);
  for (const auto& c : bertperf::cli::kCommands) {
    if (name != c.name) continue;
    try {
      return c.run(args);
    } catch (const bertperf::InputError& e) {
      std::cerr << "bertperf " << name << ": error: " << e.what() << "\n";
      return 2;
    } catch (const std::bad_alloc&) {
      std::cerr << "bertperf " << name << ": error: out of memory\n";
      return 1;
    } catch (const std::exception& e) {
      std::cerr << "bertperf " << name << ": " << e.what() << "\n";
      return 1;
    }
  }
  std::cerr << "bertperf: unknown command '" << name << "'\n";
  print_usage(std::cerr);
  return 2;
}
