#!/usr/bin/env python3
"""Generates implementations/data/unicode_tables.cpp: the Unicode data the BERT tokenizer needs.

Usage:  python scripts/gen_unicode_tables.py [--out implementations/data/unicode_tables.cpp]

The reference tokenizer (bert-reference.md 3.5) is Python code, so "correct" means "what this
Python's unicodedata and str methods say". Everything is derived from them, never from a
hand-maintained list, and the Unicode version is written into the generated file's header:
regenerate with the Python whose behaviour the golden files were made with.

Tables (all sorted by code point, compact ranges):
  - properties: per code point a bit set (see unicode_tables.h) of: dropped by _clean_text,
    mapped to " " by _clean_text, Python whitespace (str.split), punctuation, category Mn,
    CJK ideograph range, Cased / Case_Ignorable (for the final-sigma rule of str.lower()),
    has a canonical decomposition, has a non-zero canonical combining class;
  - lowercase: runs of code points mapped by a constant delta (every `stride`-th one), plus the
    few code points whose str.lower() is longer than one character;
  - NFD: the full canonical decomposition of each decomposable code point (Hangul syllables are
    left to the algorithm in the C++ code);
  - canonical combining classes, for the canonical reordering step of NFD.
"""

import argparse
import sys
import unicodedata

MAX_CP = 0x110000
SURROGATES = range(0xD800, 0xE000)

# Bit values; must equal the enum in implementations/data/unicode_tables.h.
DROP, CLEAN_SPACE, PY_SPACE, PUNCT, MN, CJK, CASED, CASE_IGNORABLE, DECOMP, NONZERO_CCC = (
    1 << i for i in range(10))

# The ideograph blocks the reference surrounds with spaces (bert-reference.md 3.5, step 2).
CJK_RANGES = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
              (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]


def is_cjk(cp):
    return any(lo <= cp <= hi for lo, hi in CJK_RANGES)


def sigma_is_final(text, sigma_index):
    return text.lower()[sigma_index] == "\u03c2"


def case_flags(ch):
    """Cased and Case_Ignorable, as CPython's str.lower() sees them.

    unicodedata does not expose these two properties, so they are read off the behaviour they
    exist for: the final-sigma rule. "xΣ" gives ς iff x is cased and not case-ignorable;
    "AxΣ" gives ς iff x is case-ignorable or cased. A case-ignorable character is always skipped
    by the rule, so whether it is also cased never matters and is reported as not cased.
    """
    if ch == "\u03a3":
        return CASED
    # lower() of a single character may be longer than one character: index from the end.
    cased_only = sigma_is_final(ch + "\u03a3", -1)
    ignorable_or_cased = sigma_is_final("A" + ch + "\u03a3", -1)
    if cased_only:
        return CASED
    if ignorable_or_cased:
        return CASE_IGNORABLE
    return 0


def properties(cp):
    ch = chr(cp)
    cat = unicodedata.category(ch)
    flags = 0
    control = ch not in "\t\n\r" and cat in ("Cc", "Cf")
    if cp == 0 or cp == 0xFFFD or control:
        flags |= DROP
    if ch in " \t\n\r" or cat == "Zs":
        flags |= CLEAN_SPACE
    if ch.isspace():
        flags |= PY_SPACE
    if (33 <= cp <= 47) or (58 <= cp <= 64) or (91 <= cp <= 96) or (123 <= cp <= 126) \
            or cat.startswith("P"):
        flags |= PUNCT
    if cat == "Mn":
        flags |= MN
    if is_cjk(cp):
        flags |= CJK
    flags |= case_flags(ch)
    if decomposition(cp) is not None:
        flags |= DECOMP
    if unicodedata.combining(ch):
        flags |= NONZERO_CCC
    return flags


def decomposition(cp):
    """Full NFD of one code point, or None when it is its own NFD (Hangul excluded)."""
    if 0xAC00 <= cp <= 0xD7A3:
        return None
    nfd = unicodedata.normalize("NFD", chr(cp))
    return None if nfd == chr(cp) else [ord(c) for c in nfd]


def ranges(values):
    """(first, last, value) runs of equal non-zero values over all code points."""
    out = []
    for cp, v in enumerate(values):
        if v and out and out[-1][1] == cp - 1 and out[-1][2] == v:
            out[-1][1] = cp
        elif v:
            out.append([cp, cp, v])
    return out


def lower_runs(singles):
    """Groups {cp: delta} into (first, last, delta, stride) runs with stride 1 or 2."""
    runs = []
    for cp in sorted(singles):
        d = singles[cp]
        if runs:
            first, last, delta, stride = runs[-1]
            if delta == d:
                if stride == 0 and cp - last in (1, 2):
                    runs[-1] = [first, cp, d, cp - last]
                    continue
                if stride and cp - last == stride:
                    runs[-1][1] = cp
                    continue
        runs.append([cp, cp, d, 0])
    return [(f, l, d, s or 1) for f, l, d, s in runs]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="implementations/data/unicode_tables.cpp")
    args = parser.parse_args()

    code_points = [cp for cp in range(MAX_CP) if cp not in SURROGATES]
    props = [0] * MAX_CP
    ccc = [0] * MAX_CP
    singles, specials, decomps = {}, {}, {}
    for cp in code_points:
        ch = chr(cp)
        props[cp] = properties(cp)
        ccc[cp] = unicodedata.combining(ch)
        low = ch.lower()
        if low != ch:
            if len(low) == 1:
                singles[cp] = ord(low) - cp
            else:
                specials[cp] = [ord(c) for c in low]
        d = decomposition(cp)
        if d is not None:
            decomps[cp] = d

    prop_ranges = ranges(props)
    ccc_ranges = ranges(ccc)
    runs = lower_runs(singles)
    pool = []
    decomp_rows = []
    for cp in sorted(decomps):
        decomp_rows.append((cp, len(pool), len(decomps[cp])))
        pool.extend(decomps[cp])
    special_pool = []
    special_rows = []
    for cp in sorted(specials):
        special_rows.append((cp, len(special_pool), len(specials[cp])))
        special_pool.extend(specials[cp])

    def rows(items, fmt, per_line):
        text = [fmt(x) for x in items]
        lines = [" ".join(text[i:i + per_line]) for i in range(0, len(text), per_line)]
        return "\n".join("    " + line for line in lines)

    hexs = lambda v: f"0x{v:X}"
    out = f"""// GENERATED by scripts/gen_unicode_tables.py from Python {sys.version.split()[0]}'s unicodedata
// (Unicode {unicodedata.unidata_version}) and str.lower(). Do not edit; regenerate.
// The Unicode tables of the BERT tokenizer: properties, lowercase mappings, NFD decompositions and
// canonical combining classes (see unicode_tables.h). The MLPerf reference ran Python 3.7
// (Unicode 11.0.0); the differences matter only for characters assigned after 11.0.
#include "data/unicode_tables.h"

namespace bertperf::unicode {{

const char kUnicodeVersion[] = "{unicodedata.unidata_version}";

const PropRange kPropRanges[] = {{
{rows(prop_ranges, lambda r: f"{{{hexs(r[0])}, {hexs(r[1])}, {r[2]}}},", 6)}
}};
const size_t kPropRangeCount = sizeof(kPropRanges) / sizeof(kPropRanges[0]);

const LowerRun kLowerRuns[] = {{
{rows(runs, lambda r: f"{{{hexs(r[0])}, {hexs(r[1])}, {r[2]}, {r[3]}}},", 5)}
}};
const size_t kLowerRunCount = sizeof(kLowerRuns) / sizeof(kLowerRuns[0]);

const Expansion kLowerSpecial[] = {{
{rows(special_rows, lambda r: f"{{{hexs(r[0])}, {r[1]}, {r[2]}}},", 6)}
}};
const size_t kLowerSpecialCount = sizeof(kLowerSpecial) / sizeof(kLowerSpecial[0]);
const char32_t kLowerSpecialPool[] = {{
{rows(special_pool, lambda v: f"{hexs(v)},", 12)}
}};

const Expansion kDecompositions[] = {{
{rows(decomp_rows, lambda r: f"{{{hexs(r[0])}, {r[1]}, {r[2]}}},", 6)}
}};
const size_t kDecompositionCount = sizeof(kDecompositions) / sizeof(kDecompositions[0]);
const char32_t kDecompositionPool[] = {{
{rows(pool, lambda v: f"{hexs(v)},", 12)}
}};

const CccRange kCccRanges[] = {{
{rows(ccc_ranges, lambda r: f"{{{hexs(r[0])}, {hexs(r[1])}, {r[2]}}},", 6)}
}};
const size_t kCccRangeCount = sizeof(kCccRanges) / sizeof(kCccRanges[0]);

}}  // namespace bertperf::unicode
"""
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(out)
    print(f"{args.out}: Unicode {unicodedata.unidata_version}, {len(prop_ranges)} property ranges, "
          f"{len(runs)} lowercase runs, {len(special_rows)} multi-character lowercasings, "
          f"{len(decomp_rows)} decompositions, {len(ccc_ranges)} combining-class ranges")


if __name__ == "__main__":
    main()
