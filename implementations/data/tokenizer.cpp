// The BERT WordPiece tokenizer (see tokenizer.h): Unicode lookups, the vocabulary hash, the
// BasicTokenizer pass and greedy WordPiece.
#include "data/tokenizer.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <fstream>
#include <map>
#include <unordered_map>
#include <sstream>

#include "core/errors.h"
#include "core/files.h"
#include "data/unicode_tables.h"

namespace bertperf {
namespace {

namespace u = unicode;

// ---- Unicode lookups ----------------------------------------------------------------------------

constexpr char32_t kMaxCodePoint = 0x110000;
constexpr int32_t kLowerIsSpecial = INT32_MIN;  // str.lower() gives more than one character

// Two-stage tables (256-code-point blocks, identical blocks shared) expanded once from the
// generated range tables: constant-time lookups in about 100 KB instead of 4 MB per table.
template <typename T>
struct TwoStage {
  std::vector<uint16_t> stage1;  // cp >> 8 -> block number
  std::vector<T> blocks;

  explicit TwoStage(const std::vector<T>& flat) {
    // Most blocks repeat an earlier one (all zero, or a whole run of letters): find those by a
    // content hash, confirmed by comparison.
    std::unordered_multimap<uint64_t, uint16_t> seen;
    for (size_t b = 0; b < flat.size() / 256; ++b) {
      const T* block = flat.data() + b * 256;
      uint64_t h = 0xcbf29ce484222325ULL;
      for (size_t i = 0; i < 256; ++i) h = (h ^ static_cast<uint64_t>(block[i])) * 0x100000001b3ULL;
      int found = -1;
      for (auto [it, end] = seen.equal_range(h); it != end; ++it)
        if (std::equal(block, block + 256, blocks.data() + size_t(it->second) * 256)) found = it->second;
      if (found < 0) {
        found = static_cast<int>(blocks.size() / 256);
        seen.emplace(h, static_cast<uint16_t>(found));
        blocks.insert(blocks.end(), block, block + 256);
      }
      stage1.push_back(static_cast<uint16_t>(found));
    }
  }
  T operator[](char32_t cp) const {
    return cp < kMaxCodePoint ? blocks[size_t(stage1[cp >> 8]) * 256 + (cp & 255)] : T{};
  }
};

std::vector<uint16_t> flat_props() {
  std::vector<uint16_t> flat(kMaxCodePoint, 0);
  for (size_t i = 0; i < u::kPropRangeCount; ++i)
    for (char32_t cp = u::kPropRanges[i].first; cp <= u::kPropRanges[i].last; ++cp)
      flat[cp] = u::kPropRanges[i].props;
  return flat;
}

std::vector<int32_t> flat_lower() {
  std::vector<int32_t> flat(kMaxCodePoint, 0);
  for (size_t i = 0; i < u::kLowerRunCount; ++i) {
    const u::LowerRun& run = u::kLowerRuns[i];
    for (char32_t cp = run.first; cp <= run.last; cp += run.stride) flat[cp] = run.delta;
  }
  for (size_t i = 0; i < u::kLowerSpecialCount; ++i) flat[u::kLowerSpecial[i].cp] = kLowerIsSpecial;
  return flat;
}

struct UnicodeTables {
  TwoStage<uint16_t> props{flat_props()};
  TwoStage<int32_t> lower_delta{flat_lower()};
  uint16_t ascii_props[128];

  UnicodeTables() {
    for (char32_t c = 0; c < 128; ++c) ascii_props[c] = props[c];
  }
};

const UnicodeTables& tables() {
  static const UnicodeTables t;
  return t;
}

const u::Expansion* find_expansion(const u::Expansion* rows, size_t count, char32_t cp) {
  const u::Expansion* end = rows + count;
  const u::Expansion* it =
      std::lower_bound(rows, end, cp, [](const u::Expansion& e, char32_t c) { return e.cp < c; });
  return it != end && it->cp == cp ? it : nullptr;
}

uint8_t combining_class(char32_t cp) {
  const u::CccRange* end = u::kCccRanges + u::kCccRangeCount;
  const u::CccRange* it = std::upper_bound(
      u::kCccRanges, end, cp, [](char32_t c, const u::CccRange& r) { return c < r.first; });
  if (it == u::kCccRanges) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

// Hangul syllables decompose by formula rather than by table (Unicode 3.12).
constexpr char32_t kHangulFirst = 0xAC00, kHangulLast = 0xD7A3;

void append_nfd(char32_t cp, uint16_t props, std::vector<char32_t>& out) {
  if (cp >= kHangulFirst && cp <= kHangulLast) {
    const char32_t s = cp - kHangulFirst;
    out.push_back(0x1100 + s / 588);
    out.push_back(0x1161 + (s % 588) / 28);
    if (s % 28) out.push_back(0x11A7 + s % 28);
    return;
  }
  if (props & u::DECOMPOSES) {
    if (const u::Expansion* e = find_expansion(u::kDecompositions, u::kDecompositionCount, cp)) {
      out.insert(out.end(), u::kDecompositionPool + e->offset,
                 u::kDecompositionPool + e->offset + e->length);
      return;
    }
  }
  out.push_back(cp);
}

// The canonical ordering step of NFD: each run of non-starters is stably sorted by combining class.
void canonical_order(std::vector<char32_t>& text, const UnicodeTables& t) {
  for (size_t i = 0; i < text.size();) {
    if (!(t.props[text[i]] & u::NONZERO_CCC)) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && (t.props[text[end]] & u::NONZERO_CCC)) ++end;
    if (end - i > 1)
      std::stable_sort(text.begin() + i, text.begin() + end, [](char32_t a, char32_t b) {
        return combining_class(a) < combining_class(b);
      });
    i = end;
  }
}

// Python's final-sigma rule for U+03A3 at `i` of the token: lowercase to ς when a cased letter
// precedes it and none follows (case-ignorable characters skipped both ways).
bool is_final_sigma(const char32_t* token, size_t length, size_t i, const UnicodeTables& t) {
  size_t j = i;
  uint16_t p = 0;
  while (j > 0 && ((p = t.props[token[j - 1]]) & u::CASE_IGNORABLE)) --j;
  if (j == 0 || !(p & u::CASED)) return false;
  for (j = i + 1; j < length; ++j) {
    p = t.props[token[j]];
    if (!(p & u::CASE_IGNORABLE)) return !(p & u::CASED);
  }
  return true;
}

// Length of the well-formed UTF-8 sequence at `p` (its value in `cp`), or 0 when the lead byte
// starts no well-formed sequence: then Python's "ignore" drops it and resumes at the next byte
// (continuation bytes are never valid leads, so dropping byte by byte drops the same bytes).
inline size_t utf8_sequence(const uint8_t* p, size_t avail, char32_t& cp) {
  const uint8_t b = p[0];
  auto cont = [&](size_t k) { return k < avail && (p[k] & 0xC0) == 0x80; };
  if (b < 0x80) {
    cp = b;
    return 1;
  }
  if (b >= 0xC2 && b <= 0xDF) {
    if (!cont(1)) return 0;
    cp = (char32_t(b & 0x1F) << 6) | (p[1] & 0x3F);
    return 2;
  }
  if (b >= 0xE0 && b <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (b == 0xE0 && p[1] < 0xA0) return 0;  // overlong
    if (b == 0xED && p[1] > 0x9F) return 0;  // surrogate
    cp = (char32_t(b & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    return 3;
  }
  if (b >= 0xF0 && b <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (b == 0xF0 && p[1] < 0x90) return 0;  // overlong
    if (b == 0xF4 && p[1] > 0x8F) return 0;  // above U+10FFFF
    cp = (char32_t(b & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) | (char32_t(p[2] & 0x3F) << 6) |
         (p[3] & 0x3F);
    return 4;
  }
  return 0;
}

// Candidate pieces up to this many bytes get their hash from the one-pass prefix hashes; longer
// ones (only in vocabularies with very long entries: the standard one's longest is 18 bytes) are
// hashed on their own.
constexpr size_t kMaxPieceBytes = 64;

bool is_ascii(std::string_view text) {
  const char* p = text.data();
  size_t n = text.size();
  uint64_t high = 0;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    high |= v;
  }
  for (; n > 0; --n, ++p) high |= static_cast<uint8_t>(*p);
  return (high & 0x8080808080808080ULL) == 0;
}

inline bool is_continuation_byte(char c) { return (static_cast<uint8_t>(c) & 0xC0) == 0x80; }

// Per-thread buffers, reused from line to line so that tokenizing allocates nothing once warm.
struct Scratch {
  std::vector<char32_t> cleaned;
  std::vector<char32_t> lowered;
  std::vector<char32_t> normalized;
  std::string word;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Python str.strip(): drops leading and trailing characters for which str.isspace() holds.
std::string strip_python(std::string_view line) {
  std::vector<char32_t> cps;
  decode_utf8(line, cps);
  const UnicodeTables& t = tables();
  size_t b = 0, e = cps.size();
  while (b < e && (t.props[cps[b]] & u::PY_SPACE)) ++b;
  while (e > b && (t.props[cps[e - 1]] & u::PY_SPACE)) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) append_utf8(cps[i], out);
  return out;
}

}  // namespace

// ---- UTF-8 ----------------------------------------------------------------------------------

size_t decode_utf8(std::string_view bytes, std::vector<char32_t>& out) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(bytes.data());
  size_t dropped = 0;
  for (size_t i = 0; i < bytes.size();) {
    char32_t cp;
    const size_t len = utf8_sequence(p + i, bytes.size() - i, cp);
    if (len == 0) {
      ++dropped;
      ++i;
      continue;
    }
    out.push_back(cp);
    i += len;
  }
  return dropped;
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// ---- Vocabulary -------------------------------------------------------------------------------

Vocab Vocab::from_tokens(const std::vector<std::string>& tokens) {
  Vocab v;
  std::map<std::string_view, int32_t> seen;
  v.tokens_.reserve(tokens.size());
  for (const std::string& t : tokens)
    if (seen.emplace(t, 0).second) v.tokens_.push_back(t);
  v.source_ = "<memory>";
  return v;
}

Vocab Vocab::load(const std::string& path) {
  const std::string text = read_file(path, "a vocabulary file");
  std::vector<std::string> tokens;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    tokens.push_back(strip_python(std::string_view(text).substr(pos, nl - pos)));
    pos = nl + 1;
  }
  if (tokens.empty()) throw_input(path, "the vocabulary file is empty");
  Vocab v = from_tokens(tokens);
  v.source_ = path;
  return v;
}

// ---- The vocabulary index -----------------------------------------------------------------------

// Open addressing over string_views into one pool. Two tables: whole vocab entries, looked up for
// the first piece of a word, and the entries that start with "##", keyed without it, for the
// later pieces, so that no "##" string is ever built.
//
// The hash is FNV-1a over the bytes, finished by a mixer. FNV-1a is a left-to-right fold, so
// WordPiece gets the hashes of all candidate pieces starting at one position in a single pass
// (HashState) instead of rehashing each candidate.
class StringTable {
 public:
  static constexpr uint64_t kSeed = 0xcbf29ce484222325ULL;
  static uint64_t step(uint64_t state, char c) {
    return (state ^ static_cast<uint8_t>(c)) * 0x100000001b3ULL;
  }
  static uint64_t finish(uint64_t state) {
    state ^= state >> 33;
    state *= 0xff51afd7ed558ccdULL;
    state ^= state >> 33;
    return state;
  }
  static uint64_t hash(std::string_view key) {
    uint64_t state = kSeed;
    for (char c : key) state = step(state, c);
    return finish(state);
  }

  void build(const std::vector<std::pair<std::string_view, int32_t>>& entries) {
    size_t capacity = 16;
    while (capacity < entries.size() * 2) capacity *= 2;
    mask_ = capacity - 1;
    slots_.assign(capacity, Slot{});
    filter_.assign(kFilterBits / 64, 0);
    for (const auto& [key, id] : entries) {
      max_len_ = std::max(max_len_, key.size());
      const uint64_t h = hash(key);
      for (uint64_t bit : {filter_bit(h, 20), filter_bit(h, 42)}) filter_[bit / 64] |= uint64_t(1) << (bit % 64);
      size_t i = h & mask_;
      while (slots_[i].id >= 0) i = (i + 1) & mask_;
      slots_[i] = Slot{static_cast<uint32_t>(h >> 32), id, static_cast<uint32_t>(pool_.size()),
                       static_cast<uint32_t>(key.size())};
      pool_.append(key);
    }
  }
  // `h` must be hash(key).
  int32_t find(std::string_view key, uint64_t h) const {
    // Most WordPiece lookups miss (longest candidates are tried first); the filter answers most
    // of those from 64 KB that stay in cache, instead of a probe into the 1 MB slot array.
    for (uint64_t bit : {filter_bit(h, 20), filter_bit(h, 42)})
      if (!(filter_[bit / 64] >> (bit % 64) & 1)) return -1;
    const uint32_t tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.tag == tag && s.length == key.size() && equal(pool_.data() + s.offset, key)) return s.id;
    }
  }
  int32_t find(std::string_view key) const { return find(key, hash(key)); }
  size_t max_len() const { return max_len_; }

 private:
  struct Slot {
    uint32_t tag = 0;  // high half of the hash
    int32_t id = -1;
    uint32_t offset = 0, length = 0;
  };
  // Pieces are short: a plain loop beats a call to memcmp.
  static bool equal(const char* stored, std::string_view key) {
    for (size_t i = 0; i < key.size(); ++i)
      if (stored[i] != key[i]) return false;
    return true;
  }
  static constexpr uint64_t kFilterBits = uint64_t(1) << 19;
  static uint64_t filter_bit(uint64_t h, int shift) { return (h >> shift) & (kFilterBits - 1); }
  std::vector<Slot> slots_;
  std::vector<uint64_t> filter_;  // a two-hash Bloom filter of the keys
  std::string pool_;
  size_t mask_ = 0;
  size_t max_len_ = 0;
};

struct FullTokenizer::Index {
  StringTable initial;       // every vocab entry
  StringTable continuation;  // "##x" entries, keyed by x
};

FullTokenizer::FullTokenizer(Vocab vocab, TokenizerOptions options)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  unk_id_ = vocab_.find(options_.unk_token);
  if (unk_id_ < 0)
    throw_input(vocab_.source(), cat("the vocabulary has no unknown token '", options_.unk_token, "'"));
  std::vector<std::pair<std::string_view, int32_t>> initial, continuation;
  for (size_t id = 0; id < vocab_.tokens_.size(); ++id) {
    std::string_view t = vocab_.tokens_[id];
    initial.emplace_back(t, static_cast<int32_t>(id));
    if (t.size() > 2 && t.substr(0, 2) == "##") continuation.emplace_back(t.substr(2), static_cast<int32_t>(id));
  }
  index_ = std::make_unique<Index>();
  index_->initial.build(initial);
  index_->continuation.build(continuation);
  tables();  // build the Unicode lookups now, not inside the first timed call
}

// Out of line, where Index is complete.
FullTokenizer::~FullTokenizer() = default;
FullTokenizer::FullTokenizer(FullTokenizer&&) noexcept = default;
FullTokenizer& FullTokenizer::operator=(FullTokenizer&&) noexcept = default;

int32_t Vocab::find(std::string_view token) const {
  // Used outside the hot path only (special tokens, tests); the tokenizer has its own index.
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (tokens_[i] == token) return static_cast<int32_t>(i);
  return -1;
}

// ---- BasicTokenizer ---------------------------------------------------------------------------

// Runs the BasicTokenizer over `text` and calls sink(word, characters_in_word) for each output
// word, in order. Returns the number of invalid UTF-8 bytes dropped.
template <typename Sink>
size_t FullTokenizer::run_basic(std::string_view text, Sink&& sink) const {
  const UnicodeTables& t = tables();
  Scratch& s = scratch();

  std::string& word = s.word;
  word.clear();
  size_t word_chars = 0;
  auto flush = [&] {
    if (!word.empty()) sink(std::string_view(word), word_chars);
    word.clear();
    word_chars = 0;
  };

  // Most lines are pure ASCII: then every step is a byte-table lookup, with no decoding and no
  // intermediate buffer. Dropped characters vanish without splitting the word around them.
  if (is_ascii(text)) {
    for (char c : text) {
      const uint16_t props = t.ascii_props[static_cast<uint8_t>(c)];
      if (props & u::DROP) continue;
      if (props & u::CLEAN_SPACE) {
        flush();
      } else if (props & u::PUNCT) {
        flush();
        word.push_back(c);
        word_chars = 1;
        flush();
      } else {
        if (options_.do_lower_case && c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
        word.push_back(c);
        ++word_chars;
      }
    }
    flush();
    return 0;
  }

  // _clean_text and _tokenize_chinese_chars, fused with decoding.
  std::vector<char32_t>& cleaned = s.cleaned;
  cleaned.clear();
  size_t dropped = 0;
  const uint8_t* p = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0; i < text.size();) {
    char32_t cp;
    uint16_t props;
    if (p[i] < 0x80) {
      cp = p[i++];
      props = t.ascii_props[cp];
    } else {
      const size_t len = utf8_sequence(p + i, text.size() - i, cp);
      if (len == 0) {
        ++dropped;
        ++i;
        continue;
      }
      i += len;
      props = t.props[cp];
    }
    if (props & u::DROP) continue;
    if (props & u::CLEAN_SPACE) {
      cleaned.push_back(U' ');
    } else if (props & u::CJK) {
      cleaned.push_back(U' ');
      cleaned.push_back(cp);
      cleaned.push_back(U' ');
    } else {
      cleaned.push_back(cp);
    }
  }

  // str.split(), then per token: lower, strip accents, split on punctuation.
  const size_t n = cleaned.size();
  for (size_t k = 0; k < n;) {
    while (k < n && (t.props[cleaned[k]] & u::PY_SPACE)) ++k;
    const size_t begin = k;
    bool ascii = true;
    while (k < n && !(t.props[cleaned[k]] & u::PY_SPACE)) {
      ascii &= cleaned[k] < 0x80;
      ++k;
    }
    if (begin == k) break;

    if (ascii) {
      for (size_t j = begin; j < k; ++j) {
        char c = static_cast<char>(cleaned[j]);
        if (t.ascii_props[static_cast<uint8_t>(c)] & u::PUNCT) {
          flush();
          word.push_back(c);
          word_chars = 1;
          flush();
          continue;
        }
        if (options_.do_lower_case && c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
        word.push_back(c);
        ++word_chars;
      }
      flush();
      continue;
    }

    const char32_t* token = cleaned.data() + begin;
    const size_t length = k - begin;
    const char32_t* chars = token;
    size_t count = length;
    if (options_.do_lower_case) {
      std::vector<char32_t>& lowered = s.lowered;
      lowered.clear();
      for (size_t j = 0; j < length; ++j) {
        const char32_t cp = token[j];
        if (cp == 0x3A3) {
          lowered.push_back(is_final_sigma(token, length, j, t) ? 0x3C2 : 0x3C3);
          continue;
        }
        const int32_t delta = t.lower_delta[cp];
        if (delta == kLowerIsSpecial) {
          const u::Expansion* e = find_expansion(u::kLowerSpecial, u::kLowerSpecialCount, cp);
          lowered.insert(lowered.end(), u::kLowerSpecialPool + e->offset,
                         u::kLowerSpecialPool + e->offset + e->length);
        } else {
          lowered.push_back(static_cast<char32_t>(static_cast<int32_t>(cp) + delta));
        }
      }
      // Accent stripping: NFD, then drop nonspacing marks.
      std::vector<char32_t>& normalized = s.normalized;
      normalized.clear();
      for (char32_t cp : lowered) append_nfd(cp, t.props[cp], normalized);
      canonical_order(normalized, t);
      size_t kept = 0;
      for (char32_t cp : normalized)
        if (!(t.props[cp] & u::MN)) normalized[kept++] = cp;
      normalized.resize(kept);
      chars = normalized.data();
      count = normalized.size();
    }
    for (size_t j = 0; j < count; ++j) {
      const char32_t cp = chars[j];
      if (t.props[cp] & u::PUNCT) {
        flush();
        append_utf8(cp, word);
        word_chars = 1;
        flush();
        continue;
      }
      append_utf8(cp, word);
      ++word_chars;
    }
    flush();
  }
  return dropped;
}

// ---- WordPiece --------------------------------------------------------------------------------

void FullTokenizer::wordpiece(std::string_view word, size_t chars, std::vector<int32_t>& ids) const {
  if (chars > static_cast<size_t>(options_.max_input_chars_per_word)) {
    ids.push_back(unk_id_);
    return;
  }
  const size_t n = word.size();
  const size_t first_piece = ids.size();
  uint64_t prefix_hash[kMaxPieceBytes + 1];
  for (size_t start = 0; start < n;) {
    const StringTable& table = start == 0 ? index_->initial : index_->continuation;
    // No entry is longer than max_len bytes, so longer candidates need no lookup.
    const size_t limit = std::min(n - start, table.max_len());
    uint64_t state = StringTable::kSeed;
    for (size_t len = 0; len < std::min(limit, kMaxPieceBytes); ++len)
      prefix_hash[len + 1] = state = StringTable::step(state, word[start + len]);
    size_t end = start + limit;
    while (end > start && end < n && is_continuation_byte(word[end])) --end;
    int32_t id = -1;
    while (end > start) {
      const std::string_view piece = word.substr(start, end - start);
      id = table.find(piece, piece.size() <= kMaxPieceBytes ? StringTable::finish(prefix_hash[piece.size()])
                                                            : StringTable::hash(piece));
      if (id >= 0) break;
      do --end;
      while (end > start && is_continuation_byte(word[end]));
    }
    if (id < 0) {
      ids.resize(first_piece);
      ids.push_back(unk_id_);
      return;
    }
    ids.push_back(id);
    start = end;
  }
}

// ---- Entry points -----------------------------------------------------------------------------

size_t FullTokenizer::encode(std::string_view text, std::vector<int32_t>& ids) const {
  return run_basic(text, [&](std::string_view word, size_t chars) { wordpiece(word, chars, ids); });
}

std::vector<int32_t> FullTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  encode(text, ids);
  return ids;
}

std::vector<std::string> FullTokenizer::tokenize(std::string_view text) const {
  std::vector<std::string> out;
  for (int32_t id : encode(text)) out.push_back(vocab_.token(id));
  return out;
}

std::vector<std::string> FullTokenizer::basic_tokenize(std::string_view text) const {
  std::vector<std::string> out;
  run_basic(text, [&](std::string_view word, size_t) { out.emplace_back(word); });
  return out;
}

}  // namespace bertperf
