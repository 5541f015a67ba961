// The MLPerf BERT pretraining-data generator (the reference's create_pretraining_data.py,
// bert-reference.md section 3), reproducing its random-number use call for call so that the same
// text, vocabulary and seed give the same instances: documents shuffled once, dupe_factor passes
// over every document, target lengths with short_seq_prob, the A/B split, random next sentences
// with the 10-draw rule and put-back, truncate_seq_pair, 80/10/10 masking over the whole
// vocabulary, and the final shuffle of all instances.
//
// As in the MLPerf recipe, each input file is an independent job with its own fresh
// random.Random(seed); jobs run on a pool of threads and each writes its own HDF5 shard.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "data/layouts.h"
#include "data/python_random.h"
#include "data/samples.h"

namespace bertperf {

class FullTokenizer;

struct PretrainingDataConfig {
  int max_seq_length = 512;
  int max_predictions_per_seq = 76;
  double masked_lm_prob = 0.15;
  double short_seq_prob = 0.1;
  int dupe_factor = 10;
  uint64_t random_seed = 12345;
  // Throws InputError for values the reference would crash on or that make no sense.
  void validate() const;
};

// The ids the generator inserts, and the vocabulary size the random replacement draws from.
struct SpecialTokenIds {
  int32_t cls = -1, sep = -1, mask = -1;
  int32_t vocab_size = 0;
};
// Looks up [CLS], [SEP] and [MASK]; a vocabulary without them is an InputError.
SpecialTokenIds special_token_ids(const FullTokenizer& tokenizer);

using Sentence = std::vector<int32_t>;
using Document = std::vector<Sentence>;

// Splits a text as the reference reads it: lines end at '\n'; a line that is empty after Python's
// strip() starts a new document; other lines are tokenized and kept when they give any token.
// Empty documents are dropped.
std::vector<Document> read_documents(std::string_view text, const FullTokenizer& tokenizer);

// The reference's create_training_instances after reading: shuffle the documents, run the dupe
// passes, shuffle the instances. Token ids must lie below ids.vocab_size (InputError otherwise,
// naming `source`).
SequenceStore create_training_instances(std::vector<Document> documents, const SpecialTokenIds& ids,
                                        const PretrainingDataConfig& config, PythonRandom& rng,
                                        const std::string& source = "documents");
// The same, with the final shuffle returned as an order over the instances in creation order
// (output instance k is instances[order[k]]); writers take the order and skip a copy.
struct UnshuffledInstances {
  SequenceStore instances;
  std::vector<size_t> order;
};
UnshuffledInstances create_training_instances_ordered(std::vector<Document> documents, const SpecialTokenIds& ids,
                                                      const PretrainingDataConfig& config, PythonRandom& rng,
                                                      const std::string& source = "documents");

// pick_eval_samples.py: sample i of k is instance int(i * (n / k)), in double precision.
std::vector<size_t> eval_pick_indices(size_t n, size_t k);

struct CreateDataJob {
  std::vector<std::string> inputs;  // text files: one sentence per line, blank line between documents
  std::string out_dir;
  ShardLayout layout = ShardLayout::VARLENGTH;
  int threads = 1;
  // When > 0: all inputs' instances, in input order, are reduced to this many evenly spaced picks
  // and written to one file eval_<n>.hdf5 (the MLPerf eval-set recipe) instead of one per input.
  int64_t eval_samples = 0;
  // When > 0: one reference job over all inputs (their text read as one stream, in input order,
  // with one random.Random(seed)) whose shuffled instances are dealt round-robin into this many
  // files DIR/part-<i>-of-<n>.hdf5, as the reference does given several output files. Every shard
  // is then an even mix of all inputs, which a small corpus of unlike sources needs because a
  // reader walks one shard at a time.
  int64_t shards = 0;
  // Compute the hdf5_md5.py checksum of each written file (costs about a fifth of the run).
  bool checksums = false;
};

struct CreatedFile {
  std::string input;
  std::string output;  // empty for inputs folded into an eval file
  int64_t documents = 0;
  int64_t instances = 0;
  std::string checksum;  // hdf5_md5.py digest of the written file, when asked for
};

// Runs the job, printing one progress line per finished input to `progress` and returning one
// entry per input (plus the eval file, if any, last), or one per shard in shard mode.
std::vector<CreatedFile> create_pretraining_files(const CreateDataJob& job, const FullTokenizer& tokenizer,
                                                  const PretrainingDataConfig& config, std::ostream& progress);

}  // namespace bertperf
