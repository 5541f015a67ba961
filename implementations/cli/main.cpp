// The `bertperf` executable: dispatches to a subcommand and turns every failure into one line on
// stderr and a non-zero exit (2 for bad input, 1 for internal errors), never a signal.
#include <cstring>
#include <exception>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/errors.h"
#include "dist/context.h"

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
    std::unique_ptr<bertperf::DistContext> dist;
    // A failure on one rank of a job ends every rank (an abort), so nothing waits on it forever.
    auto fail = [&](int code, const std::string& line) {
      const bool job = dist && dist->size() > 1;
      std::cerr << "bertperf " << name << ": "
                << (job ? "rank " + std::to_string(dist->rank()) + " on " + dist->host() + ": " : "") << line << "\n";
      if (job) dist->abort(code);
      return code;
    };
    try {
      dist = bertperf::DistContext::create();
      return c.run(args, *dist);
    } catch (const bertperf::InputError& e) {
      return fail(2, std::string("error: ") + e.what());
    } catch (const std::bad_alloc&) {
      return fail(1, "error: out of memory");
    } catch (const std::exception& e) {
      return fail(1, e.what());
    }
  }
  std::cerr << "bertperf: unknown command '" << name << "'\n";
  print_usage(std::cerr);
  return 2;
}
