// The MLPerf BERT pretraining-data generator (create_pretraining_data.h). Every random draw below
// mirrors one in the reference, in the same order; the comments name the reference step where
// the order is not obvious.
#include "data/create_pretraining_data.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <numeric>
#include <thread>

#include "core/errors.h"
#include "core/files.h"
#include "data/layouts.h"
#include "data/shard_index.h"
#include "data/tokenizer.h"

namespace bertperf {

void PretrainingDataConfig::validate() const {
  // Below 5 the reference's truncation can empty A or B and its assertion fails.
  if (max_seq_length < 5) throw_input("data config", cat("max_seq_length must be at least 5, got ", max_seq_length));
  if (max_predictions_per_seq < 1) throw_input("data config", "max_predictions_per_seq must be at least 1");
  if (!(masked_lm_prob >= 0.0 && masked_lm_prob <= 1.0)) throw_input("data config", "masked_lm_prob must lie in [0, 1]");
  if (!(short_seq_prob >= 0.0 && short_seq_prob <= 1.0)) throw_input("data config", "short_seq_prob must lie in [0, 1]");
  if (dupe_factor < 1) throw_input("data config", "dupe_factor must be at least 1");
}

SpecialTokenIds special_token_ids(const FullTokenizer& tokenizer) {
  const Vocab& vocab = tokenizer.vocab();
  SpecialTokenIds ids;
  ids.cls = vocab.find("[CLS]");
  ids.sep = vocab.find("[SEP]");
  ids.mask = vocab.find("[MASK]");
  for (const char* name : {"[CLS]", "[SEP]", "[MASK]"})
    if (vocab.find(name) < 0) throw_input(vocab.source(), cat("vocabulary has no ", name, " token"));
  ids.vocab_size = static_cast<int32_t>(vocab.size());
  return ids;
}

namespace {

// Python's str.strip() removes exactly these (str.isspace() code points).
bool python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// Whether the reference sees the line as empty after decode("utf-8", "ignore") and strip().
bool blank_line(std::string_view line, std::vector<char32_t>& scratch) {
  bool ascii = true;
  for (unsigned char c : line) {
    if (c >= 0x80) {
      ascii = false;
      break;
    }
    if (!python_space(c)) return false;
  }
  if (ascii) return true;
  scratch.clear();
  decode_utf8(line, scratch);
  return std::all_of(scratch.begin(), scratch.end(), python_space);
}

// A token list the reference edits at both ends: truncate_seq_pair deletes from the front or back.
struct TokenSpan {
  std::vector<int32_t> tokens;
  size_t begin = 0;
  size_t size() const { return tokens.size() - begin; }
  void clear() {
    tokens.clear();
    begin = 0;
  }
  void extend(const Sentence& s) { tokens.insert(tokens.end(), s.begin(), s.end()); }
};

// Scratch buffers reused across calls, so the inner loop allocates nothing.
struct Workspace {
  TokenSpan a, b;
  std::vector<int32_t> candidates;
  std::vector<std::pair<int32_t, int32_t>> predictions;  // (position, original id)
};

void truncate_seq_pair(TokenSpan& a, TokenSpan& b, size_t max_num_tokens, PythonRandom& rng) {
  while (a.size() + b.size() > max_num_tokens) {
    TokenSpan& trunc = a.size() > b.size() ? a : b;
    if (rng.random() < 0.5)
      ++trunc.begin;
    else
      trunc.tokens.pop_back();
  }
}

// Appends "[CLS] A [SEP] B [SEP]" to `out` and masks it in place (create_masked_lm_predictions).
void append_masked_instance(Workspace& ws, bool is_random_next, const SpecialTokenIds& ids,
                            const PretrainingDataConfig& config, PythonRandom& rng, SequenceStore& out) {
  std::vector<int32_t>& all = out.input_ids;
  const size_t first = all.size();
  all.push_back(ids.cls);
  all.insert(all.end(), ws.a.tokens.begin() + static_cast<std::ptrdiff_t>(ws.a.begin), ws.a.tokens.end());
  all.push_back(ids.sep);
  const size_t segment_a_count = all.size() - first;
  all.insert(all.end(), ws.b.tokens.begin() + static_cast<std::ptrdiff_t>(ws.b.begin), ws.b.tokens.end());
  all.push_back(ids.sep);
  const size_t n = all.size() - first;
  int32_t* tokens = all.data() + first;

  ws.candidates.clear();
  for (size_t i = 0; i < n; ++i)
    if (tokens[i] != ids.cls && tokens[i] != ids.sep) ws.candidates.push_back(static_cast<int32_t>(i));
  rng.shuffle(ws.candidates);

  const double rounded = python_round(static_cast<double>(n) * config.masked_lm_prob);
  const size_t num_to_predict = std::min<size_t>(config.max_predictions_per_seq,
                                                 std::max<size_t>(1, static_cast<size_t>(rounded)));
  ws.predictions.clear();
  // Each candidate is visited once, so tokens[index] still holds the original token when read.
  for (size_t c = 0; c < ws.candidates.size() && ws.predictions.size() < num_to_predict; ++c) {
    const int32_t index = ws.candidates[c];
    const int32_t original = tokens[index];
    int32_t masked;
    if (rng.random() < 0.8) {
      masked = ids.mask;
    } else if (rng.random() < 0.5) {
      masked = original;  // the 10% kept as is
    } else {
      masked = static_cast<int32_t>(rng.randint(0, ids.vocab_size - 1));  // whole vocabulary
    }
    tokens[index] = masked;
    ws.predictions.emplace_back(index, original);
  }
  std::sort(ws.predictions.begin(), ws.predictions.end());

  out.segment_ids.insert(out.segment_ids.end(), segment_a_count, int8_t{0});
  out.segment_ids.insert(out.segment_ids.end(), n - segment_a_count, int8_t{1});
  out.token_offsets.push_back(all.size());
  for (const auto& [position, label] : ws.predictions) {
    out.mlm_positions.push_back(position);
    out.mlm_ids.push_back(label);
  }
  out.mlm_offsets.push_back(out.mlm_positions.size());
  out.nsp_labels.push_back(is_random_next ? 1 : 0);
}

void create_instances_from_document(const std::vector<Document>& documents, size_t document_index,
                                    const SpecialTokenIds& ids, const PretrainingDataConfig& config,
                                    PythonRandom& rng, Workspace& ws, SequenceStore& out) {
  const Document& document = documents[document_index];
  const size_t max_num_tokens = static_cast<size_t>(config.max_seq_length) - 3;
  // One target per call, i.e. per document and dupe pass.
  int64_t target_seq_length = static_cast<int64_t>(max_num_tokens);
  if (rng.random() < config.short_seq_prob) target_seq_length = rng.randint(2, static_cast<int64_t>(max_num_tokens));

  // The chunk is always the sentences [chunk_begin, i] of this document.
  size_t chunk_begin = 0;
  int64_t current_length = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(document.size()); ++i) {
    current_length += static_cast<int64_t>(document[i].size());
    const bool last = i == static_cast<int64_t>(document.size()) - 1;
    if (!last && current_length < target_seq_length) continue;
    const size_t chunk_size = static_cast<size_t>(i) + 1 - chunk_begin;
    size_t a_end = 1;
    if (chunk_size >= 2) a_end = static_cast<size_t>(rng.randint(1, static_cast<int64_t>(chunk_size) - 1));
    ws.a.clear();
    ws.b.clear();
    for (size_t j = 0; j < a_end; ++j) ws.a.extend(document[chunk_begin + j]);

    bool is_random_next = false;
    // Short-circuit as in the reference: a one-sentence chunk draws no coin.
    if (chunk_size == 1 || rng.random() < 0.5) {
      is_random_next = true;
      const int64_t target_b_length = target_seq_length - static_cast<int64_t>(ws.a.size());
      size_t random_document_index = 0;
      for (int attempt = 0; attempt < 10; ++attempt) {
        random_document_index = static_cast<size_t>(rng.randint(0, static_cast<int64_t>(documents.size()) - 1));
        if (random_document_index != document_index) break;
      }
      const Document& random_document = documents[random_document_index];
      const size_t random_start = static_cast<size_t>(rng.randint(0, static_cast<int64_t>(random_document.size()) - 1));
      for (size_t j = random_start; j < random_document.size(); ++j) {
        ws.b.extend(random_document[j]);
        if (static_cast<int64_t>(ws.b.size()) >= target_b_length) break;
      }
      // The chunk's unused sentences go back to be read again.
      i -= static_cast<int64_t>(chunk_size - a_end);
    } else {
      for (size_t j = a_end; j < chunk_size; ++j) ws.b.extend(document[chunk_begin + j]);
    }
    truncate_seq_pair(ws.a, ws.b, max_num_tokens, rng);

    append_masked_instance(ws, is_random_next, ids, config, rng, out);

    chunk_begin = static_cast<size_t>(i) + 1;
    current_length = 0;
  }
}

}  // namespace

std::vector<Document> read_documents(std::string_view text, const FullTokenizer& tokenizer) {
  // The reference starts with one empty document and opens a new one at each blank line.
  std::vector<Document> documents(1);
  std::vector<char32_t> scratch;
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (blank_line(line, scratch)) {
      if (!documents.back().empty()) documents.emplace_back();
      continue;  // an empty document would be dropped anyway
    }
    ids.clear();
    tokenizer.encode(line, ids);
    if (!ids.empty()) documents.back().push_back(ids);
  }
  if (documents.back().empty()) documents.pop_back();
  return documents;
}

SequenceStore create_training_instances(std::vector<Document> documents, const SpecialTokenIds& ids,
                                        const PretrainingDataConfig& config, PythonRandom& rng,
                                        const std::string& source) {
  const UnshuffledInstances r = create_training_instances_ordered(std::move(documents), ids, config, rng, source);
  return r.instances.select(r.order);
}

UnshuffledInstances create_training_instances_ordered(std::vector<Document> documents, const SpecialTokenIds& ids,
                                                      const PretrainingDataConfig& config, PythonRandom& rng,
                                                      const std::string& source) {
  config.validate();
  BERT_CHECK(ids.vocab_size > 0 && ids.cls >= 0 && ids.sep >= 0 && ids.mask >= 0, "special token ids not set");
  std::erase_if(documents, [](const Document& d) { return d.empty(); });
  for (size_t d = 0; d < documents.size(); ++d)
    for (const Sentence& s : documents[d])
      for (int32_t id : s)
        if (id < 0 || id >= ids.vocab_size)
          throw_input(source, cat("document ", d, ": token id ", id, " is outside the vocabulary of ", ids.vocab_size));
  if (documents.empty()) throw_input(source, "no text: every document is empty");
  rng.shuffle(documents);

  SequenceStore instances;
  // Each pass emits about every token once, plus random-next B segments: reserve to avoid regrowth.
  size_t tokens = 0;
  for (const Document& d : documents)
    for (const Sentence& s : d) tokens += s.size();
  const size_t expect_tokens = tokens * static_cast<size_t>(config.dupe_factor) * 5 / 4;
  instances.input_ids.reserve(expect_tokens);
  instances.segment_ids.reserve(expect_tokens);
  instances.mlm_positions.reserve(static_cast<size_t>(expect_tokens * config.masked_lm_prob) + 16);
  instances.mlm_ids.reserve(static_cast<size_t>(expect_tokens * config.masked_lm_prob) + 16);
  Workspace ws;
  for (int pass = 0; pass < config.dupe_factor; ++pass)
    for (size_t d = 0; d < documents.size(); ++d)
      create_instances_from_document(documents, d, ids, config, rng, ws, instances);

  // rng.shuffle(instances): the draws depend only on the count, so shuffle an index instead.
  std::vector<size_t> order(instances.size());
  std::iota(order.begin(), order.end(), size_t{0});
  rng.shuffle(order);
  return {std::move(instances), std::move(order)};
}

std::vector<size_t> eval_pick_indices(size_t n, size_t k) {
  std::vector<size_t> picks(k);
  const double ratio = static_cast<double>(n) / static_cast<double>(k);
  for (size_t i = 0; i < k; ++i) picks[i] = static_cast<size_t>(static_cast<double>(i) * ratio);
  return picks;
}

namespace {

std::string read_text_file(const std::string& path) { return read_file(path, "an input text file"); }

void write_layout(const std::string& path, const SequenceStore& s, const std::vector<size_t>& order, ShardLayout layout,
                  const PretrainingDataConfig& c) {
  switch (layout) {
    case ShardLayout::FIXED: write_fixed(path, s, c.max_seq_length, c.max_predictions_per_seq, order); break;
    case ShardLayout::VARLENGTH: write_varlength(path, s, order); break;
    case ShardLayout::PACKED: write_packed(path, s, c.max_seq_length, kPackedRow, order); break;
  }
  ShardIndex::write(path);  // the reader's length index beside it (data/shard_index.h)
}

// The hdf5_md5.py checksum of a file just written from `s` in `order`: computed from the sequences (a packed file's
// rows are known only once packed, so from the file).
std::string checksum(const std::string& path, const SequenceStore& s, const std::vector<size_t>& order,
                     ShardLayout layout, const PretrainingDataConfig& c) {
  if (layout == ShardLayout::PACKED) return hdf5_md5(path);
  return hdf5_md5(s, layout == ShardLayout::FIXED, c.max_seq_length, order);
}

// Shard mode (CreateDataJob::shards): the reference reads every input into one document list
// (a file that does not end in a blank line runs into the next one's first document, as there).
std::vector<CreatedFile> create_sharded_files(const CreateDataJob& job, const FullTokenizer& tokenizer,
                                              const PretrainingDataConfig& config, const SpecialTokenIds& ids,
                                              std::ostream& progress) {
  namespace fs = std::filesystem;
  const auto start = std::chrono::steady_clock::now();
  std::string text;
  for (const auto& input : job.inputs) text += read_text_file(input);
  std::vector<Document> documents = read_documents(text, tokenizer);
  text = std::string();
  if (documents.empty()) throw_input(job.inputs.front(), "no text: the inputs have no non-empty document");
  const int64_t n_documents = static_cast<int64_t>(documents.size());
  progress << "read " << job.inputs.size() << " inputs: " << n_documents << " documents" << std::endl;
  PythonRandom rng(config.random_seed);
  const UnshuffledInstances made = create_training_instances_ordered(std::move(documents), ids, config, rng, "inputs");
  const size_t n = static_cast<size_t>(job.shards);
  if (made.order.size() < n)
    throw_input("command line", cat("--shards ", n, " is more than the ", made.order.size(), " instances made"));
  std::vector<CreatedFile> results(n);
  for (size_t s = 0; s < n; ++s) {
    std::vector<size_t> order;
    for (size_t k = s; k < made.order.size(); k += n) order.push_back(made.order[k]);
    char name[64];
    std::snprintf(name, sizeof name, "part-%05zu-of-%05zu.hdf5", s, n);
    CreatedFile& f = results[s];
    f.input = "(all inputs)";
    f.output = (fs::path(job.out_dir) / name).string();
    f.documents = n_documents;
    f.instances = static_cast<int64_t>(order.size());
    write_layout(f.output, made.instances, order, job.layout, config);
    if (job.checksums) f.checksum = checksum(f.output, made.instances, order, job.layout, config);
    progress << "[" << s + 1 << "/" << n << "] " << f.output << ": " << f.instances << " instances" << std::endl;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  progress << "done: " << made.order.size() << " instances in " << n << " shards in " << std::fixed
           << std::setprecision(1) << seconds << " s" << std::endl;
  return results;
}

}  // namespace

std::vector<CreatedFile> create_pretraining_files(const CreateDataJob& job, const FullTokenizer& tokenizer,
                                                  const PretrainingDataConfig& config, std::ostream& progress) {
  config.validate();
  if (job.inputs.empty()) throw_input("command line", "no input text files");
  if (job.shards < 0) throw_input("command line", "--shards must be positive");
  if (job.shards > 0 && job.eval_samples > 0) throw_input("command line", "--shards and --eval-samples exclude each other");
  const SpecialTokenIds ids = special_token_ids(tokenizer);
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(job.out_dir, ec);
  if (ec) throw_input(job.out_dir, "cannot create the output directory: " + ec.message());
  if (job.shards > 0) return create_sharded_files(job, tokenizer, config, ids, progress);

  const bool eval = job.eval_samples > 0;
  std::vector<CreatedFile> results(job.inputs.size());
  std::vector<std::string> seen_names;
  for (size_t f = 0; f < job.inputs.size(); ++f) {
    results[f].input = job.inputs[f];
    if (eval) continue;
    const std::string name = fs::path(job.inputs[f]).filename().string() + ".hdf5";
    if (std::find(seen_names.begin(), seen_names.end(), name) != seen_names.end())
      throw_input(job.inputs[f], "two inputs share the file name " + name + "; outputs would collide");
    seen_names.push_back(name);
    results[f].output = (fs::path(job.out_dir) / name).string();
  }

  // The eval recipe needs every input's instances in input order before picking.
  std::vector<UnshuffledInstances> kept(eval ? job.inputs.size() : 0);
  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  std::mutex log_mutex;
  std::exception_ptr failure;
  const auto start = std::chrono::steady_clock::now();
  auto worker = [&] {
    for (size_t f; (f = next.fetch_add(1)) < job.inputs.size();) {
      try {
        const auto t0 = std::chrono::steady_clock::now();
        const std::string text = read_text_file(job.inputs[f]);
        std::vector<Document> documents = read_documents(text, tokenizer);
        results[f].documents = static_cast<int64_t>(documents.size());
        if (documents.empty()) throw_input(job.inputs[f], "no text: the file has no non-empty document");
        PythonRandom rng(config.random_seed);  // fresh per input, as the reference runs per part
        UnshuffledInstances made = create_training_instances_ordered(std::move(documents), ids, config, rng, job.inputs[f]);
        results[f].instances = static_cast<int64_t>(made.order.size());
        if (eval) {
          kept[f] = std::move(made);
        } else {
          write_layout(results[f].output, made.instances, made.order, job.layout, config);
          if (job.checksums)
            results[f].checksum = checksum(results[f].output, made.instances, made.order, job.layout, config);
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::lock_guard<std::mutex> lock(log_mutex);
        progress << "[" << ++done << "/" << job.inputs.size() << "] " << job.inputs[f] << ": "
                 << results[f].documents << " documents, " << results[f].instances << " instances, "
                 << std::fixed << std::setprecision(1) << seconds << " s" << std::endl;
      } catch (...) {
        std::lock_guard<std::mutex> lock(log_mutex);
        if (!failure) failure = std::current_exception();
        next = job.inputs.size();  // stop handing out work
      }
    }
  };
  const int threads = std::max(1, std::min<int>(job.threads, static_cast<int>(job.inputs.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);

  if (eval) {
    size_t total = 0;
    for (const auto& k : kept) total += k.order.size();
    SequenceStore all;
    for (const auto& k : kept)
      for (size_t i : k.order) all.append_from(k.instances, i);
    kept.clear();
    if (total < static_cast<size_t>(job.eval_samples))
      progress << "warning: only " << total << " instances for " << job.eval_samples
               << " eval samples; some are picked more than once" << std::endl;
    const SequenceStore picked = all.select(eval_pick_indices(total, static_cast<size_t>(job.eval_samples)));
    CreatedFile e;
    e.input = "(all inputs)";
    e.output = (fs::path(job.out_dir) / cat("eval_", job.eval_samples, ".hdf5")).string();
    e.instances = static_cast<int64_t>(picked.size());
    write_layout(e.output, picked, {}, job.layout, config);
    if (job.checksums) e.checksum = checksum(e.output, picked, {}, job.layout, config);
    results.push_back(e);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  progress << "done: " << job.inputs.size() << " inputs in " << std::fixed << std::setprecision(1) << seconds << " s"
           << std::endl;
  return results;
}

}  // namespace bertperf
