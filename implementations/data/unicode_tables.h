// The Unicode data the BERT tokenizer needs, as compact sorted tables generated from Python's
// unicodedata by scripts/gen_unicode_tables.py into unicode_tables.cpp. The tokenizer expands
// them once into constant-time lookup tables (tokenizer.cpp); nothing else should read them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace bertperf::unicode {

// Property bits of one code point; the generator writes the same values.
enum Prop : uint16_t {
  DROP = 1 << 0,            // removed by _clean_text: NUL, U+FFFD, Cc/Cf except \t \n \r
  CLEAN_SPACE = 1 << 1,      // replaced by " " in _clean_text: " " \t \n \r and Zs
  PY_SPACE = 1 << 2,         // str.isspace(): where str.split() splits
  PUNCT = 1 << 3,           // split off as its own token: ASCII symbol ranges or category P*
  MN = 1 << 4,              // category Mn: dropped by accent stripping
  CJK = 1 << 5,             // in the reference's CJK ideograph ranges: surrounded by spaces
  CASED = 1 << 6,           // Cased (and not Case_Ignorable), for the final-sigma rule
  CASE_IGNORABLE = 1 << 7,   // Case_Ignorable, skipped by the final-sigma rule
  DECOMPOSES = 1 << 8,      // has a canonical decomposition (Hangul syllables excluded)
  NONZERO_CCC = 1 << 9,      // canonical combining class > 0: reordered by NFD
};

struct PropRange {
  char32_t first, last;
  uint16_t props;
};

// Code points first, first+stride, ... up to last lowercase to cp + delta.
struct LowerRun {
  char32_t first, last;
  int32_t delta;
  int32_t stride;
};

// A code point expanding to pool[offset .. offset+length).
struct Expansion {
  char32_t cp;
  uint32_t offset;
  uint32_t length;
};

struct CccRange {
  char32_t first, last;
  uint8_t ccc;
};

extern const char kUnicodeVersion[];
extern const PropRange kPropRanges[];
extern const size_t kPropRangeCount;
extern const LowerRun kLowerRuns[];
extern const size_t kLowerRunCount;
extern const Expansion kLowerSpecial[];
extern const size_t kLowerSpecialCount;
extern const char32_t kLowerSpecialPool[];
extern const Expansion kDecompositions[];
extern const size_t kDecompositionCount;
extern const char32_t kDecompositionPool[];
extern const CccRange kCccRanges[];
extern const size_t kCccRangeCount;

}  // namespace bertperf::unicode
