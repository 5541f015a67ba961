// `bertperf tokenize`: runs the reference BERT tokenizer (data/tokenizer.h) over a text file, one
// output line per input line, and reports the throughput of the tokenization alone. Used to inspect
// tokenization and by scripts/bench_tokenizer.py to compare with HuggingFace tokenizers.
#include <chrono>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string_view>
#include <thread>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/errors.h"
#include "core/files.h"
#include "data/tokenizer.h"

namespace bertperf::cli {

namespace {

constexpr const char* kUsage =
    "usage: bertperf tokenize --vocab VOCAB [--input FILE] [--ids | --count] [--threads N]\n"
    "\n"
    "Tokenizes each line of FILE (standard input when absent) with the MLPerf reference BERT\n"
    "tokenizer (lower-cased, accents stripped, WordPiece) and prints one line per input line: the\n"
    "WordPiece tokens, or their ids with --ids, separated by spaces. Invalid UTF-8 bytes are skipped\n"
    "and counted. A summary (lines, bytes, tokens, wall and CPU seconds and MB/s of tokenization\n"
    "alone, file reading and output excluded) goes to standard error.\n"
    "\n"
    "options:\n"
    "  --vocab VOCAB   vocab.txt, one token per line (required)\n"
    "  --input FILE    text to tokenize (standard input)\n"
    "  --ids           print ids instead of tokens\n"
    "  --count         print nothing per line, only the summary (for benchmarking)\n"
    "  --threads N     lines are split between N threads (1)\n";

std::string read_all(const std::string& path) {
  if (path == "-") {
    std::ostringstream buffer;
    buffer << std::cin.rdbuf();
    return buffer.str();
  }
  return read_file(path, "a text file");
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    lines.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return lines;
}

// What one thread produced for its contiguous range of lines.
struct Chunk {
  std::string output;
  size_t tokens = 0;
  size_t invalid_bytes = 0;
  size_t first_invalid_line = 0;  // 1-based; 0 when none
};

}  // namespace

int cmd_tokenize(const Args& args, DistContext&) {
  const Options opts(args, {"vocab", "input", "threads"}, {"ids", "count", "help"});
  if (opts.flag("help")) {
    std::cout << kUsage;
    return 0;
  }
  if (opts.flag("ids") && opts.flag("count")) throw_input("command line", "--ids and --count exclude each other");
  const int64_t threads = opts.integer("threads", 1);
  if (threads < 1 || threads > 1024) throw_input("command line", "--threads must be between 1 and 1024");
  const std::string input_path = opts.get("input").value_or("-");
  const bool print_ids = opts.flag("ids");
  const bool print_nothing = opts.flag("count");

  const FullTokenizer tokenizer(Vocab::load(opts.required("vocab")));
  const std::string text = read_all(input_path);
  const std::vector<std::string_view> lines = split_lines(text);

  const int n_threads = static_cast<int>(threads);
  std::vector<Chunk> chunks(static_cast<size_t>(n_threads));
  const auto start = std::chrono::steady_clock::now();
  const std::clock_t cpu_start = std::clock();
  // Each thread tokenizes one contiguous share of the lines into its own chunk; chunks print in order.
  auto tokenize_share = [&](int t) {
    const size_t begin = lines.size() * static_cast<size_t>(t) / static_cast<size_t>(n_threads);
    const size_t end = lines.size() * static_cast<size_t>(t + 1) / static_cast<size_t>(n_threads);
    Chunk& chunk = chunks[static_cast<size_t>(t)];
    std::vector<int32_t> ids;
    for (size_t i = begin; i < end; ++i) {
      ids.clear();
      const size_t invalid = tokenizer.encode(lines[i], ids);
      if (invalid && !chunk.invalid_bytes) chunk.first_invalid_line = i + 1;
      chunk.invalid_bytes += invalid;
      chunk.tokens += ids.size();
      if (print_nothing) continue;
      for (size_t k = 0; k < ids.size(); ++k) {
        if (k) chunk.output.push_back(' ');
        if (print_ids)
          chunk.output += std::to_string(ids[k]);
        else
          chunk.output += tokenizer.vocab().token(ids[k]);
      }
      chunk.output.push_back('\n');
    }
  };
  std::vector<std::thread> workers;
  for (int t = 1; t < n_threads; ++t) workers.emplace_back(tokenize_share, t);
  tokenize_share(0);
  for (std::thread& w : workers) w.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // CPU time of all threads: on a shared machine a steadier measure than wall time.
  const double cpu_seconds = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;

  size_t tokens = 0, invalid_bytes = 0, first_invalid_line = 0;
  for (const Chunk& chunk : chunks) {
    std::fwrite(chunk.output.data(), 1, chunk.output.size(), stdout);
    tokens += chunk.tokens;
    if (chunk.invalid_bytes && !first_invalid_line) first_invalid_line = chunk.first_invalid_line;
    invalid_bytes += chunk.invalid_bytes;
  }
  std::fflush(stdout);
  const std::string where = input_path == "-" ? "<stdin>" : input_path;
  if (invalid_bytes)
    std::cerr << where << ": skipped " << invalid_bytes << " invalid UTF-8 bytes (first on line "
              << first_invalid_line << ")\n";
  std::cerr << "tokenize: " << lines.size() << " lines, " << text.size() << " bytes, " << tokens
            << " tokens, " << seconds << " s, " << cpu_seconds << " cpu-s, " << (seconds > 0 ? text.size() / seconds / 1e6 : 0.0)
            << " MB/s, " << (seconds > 0 ? lines.size() / seconds : 0.0) << " lines/s, " << n_threads
            << " thread(s)\n";
  return 0;
}

}  // namespace bertperf::cli
