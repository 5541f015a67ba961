// The BERT WordPiece tokenizer, exact to the MLPerf reference's FullTokenizer
// (bert-reference.md 3.5): BasicTokenizer (clean text, CJK spacing, whitespace split, Python
// str.lower(), accent stripping by NFD minus Mn, punctuation split), then greedy
// longest-match-first WordPiece with "##" continuations, the 200-character word limit and
// whole-word [UNK]. Input is UTF-8 bytes; invalid sequences are skipped as Python's
// decode("utf-8", "ignore") skips them, which is how the reference reads its text.
//
// Built for throughput: one pass per line over reusable per-thread buffers, an ASCII fast path,
// and an open-addressing hash of string_views for the vocabulary. A FullTokenizer is immutable
// after construction and safe to share between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace bertperf {

// A WordPiece vocabulary: token -> id, id -> token.
class Vocab {
 public:
  // Reads a vocab.txt as the reference does: one token per line after Python strip(); a repeated
  // token keeps its first id and takes no new one. Invalid UTF-8 is dropped as the reference
  // drops it. A missing or unreadable file is an InputError naming it.
  static Vocab load(const std::string& path);
  // The same from tokens already in memory (tests, tools); ids are positions after de-duplication.
  static Vocab from_tokens(const std::vector<std::string>& tokens);

  size_t size() const { return tokens_.size(); }
  const std::string& token(int32_t id) const { return tokens_.at(static_cast<size_t>(id)); }
  // The id of `token`, or -1.
  int32_t find(std::string_view token) const;
  const std::string& source() const { return source_; }

 private:
  friend class FullTokenizer;
  std::vector<std::string> tokens_;
  std::string source_;  // file name, for messages
};

struct TokenizerOptions {
  bool do_lower_case = true;             // lower-case and strip accents (the MLPerf setting)
  int max_input_chars_per_word = 200;    // longer words become [UNK] (the reference's value)
  std::string unk_token = "[UNK]";
};

class FullTokenizer {
 public:
  // The vocabulary must contain the unknown token; otherwise an InputError names the file.
  explicit FullTokenizer(Vocab vocab, TokenizerOptions options = {});
  ~FullTokenizer();
  FullTokenizer(FullTokenizer&&) noexcept;
  FullTokenizer& operator=(FullTokenizer&&) noexcept;

  // Appends the WordPiece ids of `text` to `ids`; returns how many invalid UTF-8 bytes it skipped.
  size_t encode(std::string_view text, std::vector<int32_t>& ids) const;
  std::vector<int32_t> encode(std::string_view text) const;
  // The WordPiece tokens of `text`, as strings.
  std::vector<std::string> tokenize(std::string_view text) const;
  // BasicTokenizer alone: the words WordPiece would see, as UTF-8 strings.
  std::vector<std::string> basic_tokenize(std::string_view text) const;

  const Vocab& vocab() const { return vocab_; }
  int32_t unk_id() const { return unk_id_; }

 private:
  struct Index;  // the hash of vocab entries, split into word-initial and "##" continuations
  template <typename Sink>
  size_t run_basic(std::string_view text, Sink&& sink) const;
  void wordpiece(std::string_view word, size_t chars, std::vector<int32_t>& ids) const;

  Vocab vocab_;
  TokenizerOptions options_;
  int32_t unk_id_ = -1;
  std::unique_ptr<Index> index_;
};

// Decodes UTF-8 as Python's decode("utf-8", "ignore"): every byte that does not belong to a
// well-formed sequence (overlong forms, surrogates and values above U+10FFFF included) is
// dropped. Returns the number of bytes dropped.
size_t decode_utf8(std::string_view bytes, std::vector<char32_t>& out);
void append_utf8(char32_t cp, std::string& out);

}  // namespace bertperf
