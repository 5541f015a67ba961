// Throughput of the BERT tokenizer (data/tokenizer.h) on the real corpus: lines/s and bytes/s for
// the full tokenizer and for the BasicTokenizer pass alone. Needs the prepared data
// (scripts/prepare_corpus.py); run from the repository root, or point BERTPERF_CORPUS at a text file
// and BERTPERF_VOCAB at a vocab.txt.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace {

struct Corpus {
  std::vector<std::string> lines;
  size_t bytes = 0;
  std::unique_ptr<bertperf::FullTokenizer> tokenizer;
  std::string error;
};

// About 8 MB of lines, taken from every corpus file in turn so that each source is represented.
const Corpus& corpus() {
  static const Corpus c = [] {
    Corpus c;
    const char* vocab = std::getenv("BERTPERF_VOCAB");
    const std::string vocab_path = vocab ? vocab : "data/vocab/vocab.txt";
    std::vector<std::string> files;
    if (const char* file = std::getenv("BERTPERF_CORPUS")) {
      files.push_back(file);
    } else if (std::filesystem::is_directory("data/corpus")) {
      for (const auto& entry : std::filesystem::directory_iterator("data/corpus"))
        if (entry.path().extension() == ".txt") files.push_back(entry.path().string());
    }
    if (files.empty() || !std::filesystem::exists(vocab_path)) {
      c.error = "no corpus or vocab: run scripts/prepare_corpus.py and bench from the repository root";
      return c;
    }
    std::sort(files.begin(), files.end());
    const size_t per_file = 8'000'000 / files.size();
    for (const auto& file : files) {
      std::ifstream in(file, std::ios::binary);
      size_t taken = 0;
      for (std::string line; taken < per_file && std::getline(in, line);) {
        taken += line.size() + 1;
        c.bytes += line.size() + 1;
        c.lines.push_back(std::move(line));
      }
    }
    c.tokenizer = std::make_unique<bertperf::FullTokenizer>(bertperf::Vocab::load(vocab_path));
    return c;
  }();
  return c;
}

void BM_TokenizeCorpus(benchmark::State& state) {
  const Corpus& c = corpus();
  if (!c.error.empty()) {
    state.SkipWithError(c.error.c_str());
    return;
  }
  std::vector<int32_t> ids;
  size_t tokens = 0;
  for (auto _ : state) {
    for (const std::string& line : c.lines) {
      ids.clear();
      c.tokenizer->encode(line, ids);
      tokens += ids.size();
    }
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * c.bytes));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * c.lines.size()));
  state.counters["lines/s"] = benchmark::Counter(double(state.iterations() * c.lines.size()), benchmark::Counter::kIsRate);
  state.counters["tokens/s"] = benchmark::Counter(double(tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_TokenizeCorpus)->Unit(benchmark::kMillisecond)->MinTime(2.0);

void BM_BasicTokenizeCorpus(benchmark::State& state) {
  const Corpus& c = corpus();
  if (!c.error.empty()) {
    state.SkipWithError(c.error.c_str());
    return;
  }
  for (auto _ : state)
    for (const std::string& line : c.lines) benchmark::DoNotOptimize(c.tokenizer->basic_tokenize(line));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * c.bytes));
  state.counters["lines/s"] = benchmark::Counter(double(state.iterations() * c.lines.size()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_BasicTokenizeCorpus)->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace
