// `bertperf data`: MLPerf BERT pretraining shards from text (the reference generator's algorithm,
// data/create_pretraining_data.h), and hdf5_md5.py checksums of existing shards so users can check
// official data.
#include <filesystem>
#include <iostream>

#include "cli/args.h"
#include "cli/commands.h"
#include "data/create_pretraining_data.h"
#include "data/layouts.h"
#include "data/shard_index.h"
#include "data/tokenizer.h"

namespace bertperf::cli {

namespace {

constexpr const char* kUsage =
    "usage: bertperf data --vocab VOCAB --out DIR [options] TEXT_FILE...\n"
    "       bertperf data --checksum HDF5_FILE...\n"
    "       bertperf data --index HDF5_FILE...\n"
    "\n"
    "Creates MLPerf BERT pretraining shards exactly as the reference create_pretraining_data.py:\n"
    "each text file (one sentence per line, a blank line between documents) is processed with its\n"
    "own random.Random(seed) and written to DIR/<file name>.hdf5 (see --shards for one job over\n"
    "all inputs), with the reader's length index beside each (<file>.hdf5.lengths). Progress goes\n"
    "to stderr.\n"
    "\n"
    "options (defaults are the MLPerf settings):\n"
    "  --input A,B,...        text files, comma-separated (in addition to positional ones)\n"
    "  --seed N               random seed (12345)\n"
    "  --dupe-factor N        passes over the documents, each with new masks (10)\n"
    "  --max-seq-length N     tokens per sequence, [CLS] and [SEP]s included (512)\n"
    "  --max-predictions N    masked-LM predictions per sequence (76)\n"
    "  --masked-lm-prob P     fraction of tokens masked (0.15)\n"
    "  --short-seq-prob P     probability of a shorter target length (0.1)\n"
    "  --layout L             varlength (h5py vlen, what training reads), fixed, or packed (NVIDIA's\n"
    "                         packed rows: up to 3 sequences in a row of --max-seq-length tokens,\n"
    "                         packed greedily as the reader packs) (varlength)\n"
    "  --eval-samples N       write only DIR/eval_<N>.hdf5: N evenly spaced instances of all\n"
    "                         inputs, as pick_eval_samples.py (the MLPerf eval set: 10000)\n"
    "  --shards N             one job over all inputs instead (their text as one stream, one\n"
    "                         random.Random(seed)), its instances dealt round-robin into\n"
    "                         DIR/part-<i>-of-<N>.hdf5 as the reference does for several output\n"
    "                         files: every shard an even mix of the inputs (single-threaded)\n"
    "  --threads N            input files processed in parallel (1)\n"
    "  --md5                  print the hdf5_md5.py checksum of each output (name<TAB>md5)\n"
    "  --checksum             print hdf5_md5.py checksums of the given HDF5 files and exit\n"
    "                         (compare with NVIDIA's *.chk files to verify official data)\n"
    "  --index                write the reader's length index beside each given shard (made\n"
    "                         elsewhere, e.g. the official data) and exit: every rank then reads\n"
    "                         it instead of building it on first open\n";

constexpr int64_t kMaxDupeFactor = 1000;

}  // namespace

int cmd_data(const Args& args, DistContext&) {
  const Options opts(args,
                     {"input", "vocab", "out", "seed", "dupe-factor", "max-seq-length", "max-predictions",
                      "masked-lm-prob", "short-seq-prob", "layout", "eval-samples", "shards", "threads"},
                     {"checksum", "md5", "index", "help"});
  if (opts.flag("help")) {
    std::cout << kUsage;
    return 0;
  }
  std::vector<std::string> inputs = opts.positional();
  for (const std::string& input : opts.list("input"))
    if (!input.empty()) inputs.push_back(input);
  if (inputs.empty()) throw_input("command line", "no input files (see bertperf data --help)");

  if (opts.flag("index")) {
    for (const auto& path : inputs) {
      ShardIndex::write(path);
      std::cout << ShardIndex::path_of(path) << std::endl;
    }
    return 0;
  }
  if (opts.flag("checksum")) {
    for (const auto& path : inputs) {
      const std::string digest = hdf5_md5(path);  // first, so a bad file prints no half line
      std::cout << std::filesystem::path(path).filename().string() << "\t" << digest << std::endl;
    }
    return 0;
  }

  PretrainingDataConfig config;
  const int64_t seed = opts.integer("seed", 12345);
  if (seed < 0) throw_input("command line", "--seed must be non-negative");
  config.random_seed = static_cast<uint64_t>(seed);
  // Every pass holds all the corpus's instances in memory: the bound keeps a typo from filling it.
  config.dupe_factor = static_cast<int>(opts.integer("dupe-factor", 10, 1, kMaxDupeFactor));
  config.max_seq_length = static_cast<int>(opts.integer("max-seq-length", 512, 5, 32767));
  config.max_predictions_per_seq = static_cast<int>(opts.integer("max-predictions", 76, 1, 32767));
  config.masked_lm_prob = opts.number("masked-lm-prob", 0.15);
  config.short_seq_prob = opts.number("short-seq-prob", 0.1);
  config.validate();

  CreateDataJob job;
  job.inputs = inputs;
  job.out_dir = opts.required("out");
  job.layout = parse_layout(opts.get("layout").value_or("varlength"), "option --layout");
  job.threads = static_cast<int>(opts.integer("threads", 1, 1, 1024));
  job.eval_samples = opts.integer("eval-samples", 0, 0, int64_t{1} << 40);
  job.shards = opts.integer("shards", 0, 1, 1 << 20);
  if (opts.get("shards") && job.shards < 1) throw_input("command line", "--shards must be at least 1");
  job.checksums = opts.flag("md5");
  if (job.threads < 1) throw_input("command line", "--threads must be at least 1");
  if (job.eval_samples < 0) throw_input("command line", "--eval-samples must be positive");

  const FullTokenizer tokenizer(Vocab::load(opts.required("vocab")));
  const auto files = create_pretraining_files(job, tokenizer, config, std::cerr);
  for (const auto& f : files)
    if (!f.output.empty() && job.checksums) std::cout << std::filesystem::path(f.output).filename().string() << "\t" << f.checksum << std::endl;
  return 0;
}

}  // namespace bertperf::cli
