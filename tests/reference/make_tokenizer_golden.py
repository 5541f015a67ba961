#!/usr/bin/env python3
"""Writes tests/golden/tokenizer_golden.tsv: WordPiece ids of hand-written hard lines, seeded random
lines and real corpus lines, computed by HuggingFace's Python BertTokenizer set up as the MLPerf
reference tokenizer (bert-reference.md 3.5).

Usage (the reference venv of requirements-reference.txt; not needed to build or test):

    scripts/setup.sh --reference                                       # makes .venv-ref
    .venv/bin/python scripts/prepare_corpus.py --out data/corpus      # corpus + vocab
    .venv-ref/bin/python tests/reference/make_tokenizer_golden.py

Settings: do_lower_case=True, tokenize_chinese_chars=True, strip_accents=None (strip when
lowercasing), max_input_chars_per_word=200 (HuggingFace's default is 100; the reference's is 200).
Special tokens in the text are not kept whole: the BasicTokenizer runs without never_split, as the
reference does. HuggingFace differs from the reference in two places, both switched back here:
  - its _is_control treats every category C* (also Co, Cn, Cs) as control; the reference only
    Cc and Cf;
  - it NFC-normalizes the text before splitting; the reference does not. (With lowercasing and
    accent stripping the two agree on all lines here; the script counts any line where they differ.)

The file is one record per line: the text, a tab, the ids separated by spaces. In the text, "\\"
stands for a backslash and "\\xHH" for the byte HH: used for control bytes, bytes that are not
UTF-8, a leading "#" (lines starting with "#" are comments) and tab, newline and carriage return.
"""

import argparse
import hashlib
import os
import random
import sys
import unicodedata as real_unicodedata

try:  # transformers 5.x keeps the Python tokenizer under this name
    from transformers.models.bert import tokenization_bert_legacy as hf_bert
    HfBertTokenizer = hf_bert.BertTokenizerLegacy
except ImportError:  # transformers 4.x
    from transformers.models.bert import tokenization_bert as hf_bert
    HfBertTokenizer = hf_bert.BertTokenizer
import transformers

CORPUS_FILES = ["gcide", "wn", "foldoc", "jargon", "devil", "fortunes"]
LINES_PER_SOURCE = 1800
RANDOM_LINES = 1500  # of each kind: random characters from many scripts; random bytes

# Code point ranges the random lines draw from: ASCII most often, then blocks with case mappings,
# decompositions, combining marks, CJK, Hangul, format characters, supplementary planes.
RANDOM_BLOCKS = [(0x20, 0x7E)] * 4 + [
    (0x0, 0x1F), (0x80, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x52F), (0x590, 0x6FF),
    (0x900, 0x97F), (0xE00, 0xE7F), (0x10A0, 0x10FF), (0x13A0, 0x13FF), (0x1C80, 0x1CBF),
    (0x1E00, 0x1FFF), (0x2000, 0x206F), (0x2100, 0x218F), (0x2460, 0x24FF), (0x3000, 0x30FF),
    (0x3400, 0x4DBF), (0x4E00, 0x4FFF), (0xA640, 0xA7FF), (0xAC00, 0xD7A3), (0xE000, 0xE0FF),
    (0xF900, 0xFAFF), (0xFB00, 0xFB4F), (0xFE00, 0xFFFF), (0x10400, 0x1044F), (0x1D100, 0x1D1FF),
    (0x1F100, 0x1F9FF), (0x20000, 0x2A6DF), (0x2F800, 0x2FA1F), (0xE0000, 0xE007F),
]


def random_lines(seed):
    """Deterministic random text: RANDOM_LINES lines of characters, then of raw bytes."""
    rng = random.Random(seed)
    lines = []
    for _ in range(RANDOM_LINES):
        chars = []
        for _ in range(rng.randint(1, 40)):
            lo, hi = rng.choice(RANDOM_BLOCKS)
            cp = rng.randint(lo, hi)
            chars.append(" " if 0xD800 <= cp <= 0xDFFF or cp in (10, 13) else chr(cp))
            if rng.random() < 0.2:
                chars.append(" ")
        lines.append("".join(chars).encode("utf-8"))
    for _ in range(RANDOM_LINES):
        raw = bytearray()
        for _ in range(rng.randint(1, 30)):
            r = rng.random()
            if r < 0.5:
                raw.append(rng.randint(0x20, 0x7E))
            elif r < 0.8:
                raw.append(rng.randint(0x80, 0xFF))
            else:  # a well-formed or surrogate-encoding multi-byte sequence
                raw += chr(rng.randint(0x80, 0x10FFFF)).encode("utf-8", "surrogatepass")
        lines.append(bytes(raw).replace(b"\n", b" ").replace(b"\r", b" "))
    return lines

HARD_LINES = [
    # accents and Latin letters without decompositions
    "Café Müller, naïve résumé; Ångström — Øresund Łódź Straße Œuvre ÆSIR ðorn Þing",
    "Tiếng Việt có dấu: Người ta nói rằng ấy là điều đẹp.",
    "a\u0323\u0302 q\u0302\u0323 \u1e69 \u1e0b\u0323 e\u0301\u0301 A\u030a \u212b \u212a",
    # CJK ideographs, extension B, compatibility ideographs; kana and Hangul are not spaced
    "中文字符测试，日本語のテキスト、한국어 텍스트입니다.",
    "𠀀𠀁𪜀 豈更車 \U0002f800\U0002fa1d ぱぴぷ パピプ ｶﾞ",
    "\u1100\u1161\u11a8 \uac00\ud7a3 \u3131\u314f",
    # punctuation and symbols
    "Hello,world!!! (test) [x] {y} <z> a/b\\c \"quoted\" 'single' «guillemets» ‹one› „German“",
    "en–dash em—dash … ellipsis ¡hola! ¿qué? 「日本」 『二』 ※ § ¶ † ‡ • · ‧ ‥",
    "$5.00 50% 3.14159 1,000,000 2026-12-02 12:00 +1 (555) 010-9999 #hashtag @user ~tilde `tick` ^caret |pipe",
    "https://example.com/a?b=c&d=e#frag user@example.org C++ C# F# .NET node.js",
    "∑ x² ≠ ∞ ≮ =\u0338 √2 ∂f/∂x ± × ÷ ° ′ ″ ‰ € £ ¥ ₩ ₹ ¢",
    "[CLS] [SEP] [MASK] [UNK] [PAD] [unused0] ##ing ## #",
    # control characters, format characters, odd whitespace
    "tab\there\x0bvt\x0cff\x1cfs\x1dgs\x85nel\u200bzwsp\u200czwnj\u200dzwj\ufeffbom\u00adshy\x7fdel",
    "line\u2028separator paragraph\u2029separator",
    "a\x00b\ufffdc\x01d\x1be[0m",
    "\u00a0nbsp\u2003emsp\u3000ideographic\u202fnarrow\u205fmath\u1680ogham\u2009thin",
    "\u200e\u200fleft-right marks\u202a\u202eembedding\u2066isolate\u2069",
    "private\ue000use \U000f0000plane unassigned\u0378here \u0e3a\u0e3b",
    "",
    "   \t  ",
    # Greek and final sigma
    "ΟΔΥΣΣΕΥΣ Σίσυφος ΣΑΣ. ΣΣ Σ ΑΣ' ΑΣ\u0301 ΑΣ\u0345 Ἀριστοτέλης ΜΆΪΟΣ ΑΣ.Β ΑΣ-Β",
    "ὈΔΥΣΣΕΎΣ ᾼ ᾈ ῼ ΐ ΰ",
    # Turkish dotted and dotless I, other special casings
    "İSTANBUL İzmir ıiIİ DİYARBAKIR i̇stanbul",
    "Ǆemal ǅ ǆ Ǉ ǈ ǉ Ǳ ǲ ǳ ẞ ß ŉ ǰ",
    # scripts with case outside Latin and Greek
    "Привет, мир! ЁЖИК Ѐ Ѝ ҐРУНТ Ӏ",
    "ᏣᎳᎩ ᎠᏍᎦᏯ ᲐᲑᲒ Ⴀ 𐐀𐐁 𐓀 𖹀 𞤀 Ⅻ Ⓐ Ｚ",
    "ＡＢＣ１２３！？ ｱｲｳ ﬁnance ﬂow ﬀ ǲ ㎏",
    # right-to-left and Indic scripts with Mn marks
    "مرحبا بالعالم، كيف حالك؟ ٱلْعَرَبِيَّة",
    "שָׁלוֹם עוֹלָם",
    "नमस्ते दुनिया। हिन्दी क्षत्रिय",
    "สวัสดีครับ ภาษาไทย",
    "ᐊᐃᓐᓇ ᚠᚢᚦ ᠮᠣᠩᠭᠣᠯ",
    # emoji: presentation selectors, ZWJ sequences, skin tones, flags, keycaps
    "I ❤️ 🍕 and 👨‍👩‍👧 👍🏽 🇺🇸 🏳️‍🌈 1️⃣ ©️ ™ 😀😃",
    # long words around the 200-character limit, counted in characters after accent stripping
    "a" * 199 + " " + "b" * 200 + " " + "c" * 201,
    "supercalifragilisticexpialidocious" * 6,
    "é" * 200 + " " + "é" * 201 + " " + "e\u0301" * 150,
    "x" * 250 + "." + "y" * 10,
    "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
    # a long line
    " ".join(["The quick brown fox jumps over the lazy dog."] * 120),
]

# Lines that are not valid UTF-8: the reference reads with errors="ignore".
HARD_BYTE_LINES = [
    b"bad \xff\xfe bytes \xc3\x28 \xe2\x82 ok",
    b"overlong \xc0\xaf \xe0\x80\xaf surrogate \xed\xa0\x80 too big \xf4\x90\x80\x80 \xf8\x88\x80\x80\x80",
    b"truncated at end \xe2\x82",
    b"caf\xc3\xa9 caf\xe9 na\xefve",
    b"\xe2\x82\xe2\x82\xac euro",
]


def reference_is_control(char):
    """The reference's control test: categories Cc and Cf, except tab, newline, carriage return."""
    if char in "\t\n\r":
        return False
    return real_unicodedata.category(char) in ("Cc", "Cf")


class WithoutNfc:
    """unicodedata with NFC switched off, as the reference never applies it."""
    enabled = True

    def __getattr__(self, name):
        return getattr(real_unicodedata, name)

    def normalize(self, form, text):
        if form == "NFC" and self.enabled:
            return text
        return real_unicodedata.normalize(form, text)


def escape(raw):
    out = []
    for i, ch in enumerate(raw.decode("utf-8", errors="surrogateescape")):
        cp = ord(ch)
        if 0xDC80 <= cp <= 0xDCFF:
            out.append(f"\\x{cp - 0xDC00:02X}")
        elif ch == "\\":
            out.append("\\\\")
        elif cp < 0x20 or cp == 0x7F or (i == 0 and ch == "#"):
            out.append(f"\\x{cp:02X}")
        else:
            out.append(ch)
    return "".join(out)


def corpus_lines(corpus_dir):
    for name in CORPUS_FILES:
        path = os.path.join(corpus_dir, f"{name}.txt")
        with open(path, "rb") as f:
            lines = [line.rstrip(b"\n") for line in f if line.strip()]
        step = max(1, len(lines) // LINES_PER_SOURCE)
        yield from lines[::step][:LINES_PER_SOURCE]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="data/corpus")
    parser.add_argument("--vocab", default="data/vocab/vocab.txt")
    parser.add_argument("--out", default="tests/golden/tokenizer_golden.tsv")
    args = parser.parse_args()

    nfc_switch = WithoutNfc()
    hf_bert._is_control = reference_is_control
    hf_bert.unicodedata = nfc_switch
    tokenizer = HfBertTokenizer(args.vocab, do_lower_case=True, tokenize_chinese_chars=True,
                                strip_accents=None)
    tokenizer.wordpiece_tokenizer.max_input_chars_per_word = 200
    basic, wordpiece = tokenizer.basic_tokenizer, tokenizer.wordpiece_tokenizer

    def encode(text):
        pieces = [p for word in basic.tokenize(text) for p in wordpiece.tokenize(word)]
        return tokenizer.convert_tokens_to_ids(pieces)

    with open(args.vocab, "rb") as f:
        vocab_md5 = hashlib.md5(f.read()).hexdigest()
    hard = [line.encode("utf-8") for line in HARD_LINES] + HARD_BYTE_LINES
    randoms = random_lines(seed=12345)
    corpus = list(corpus_lines(args.corpus))
    records = hard + randoms + corpus

    nfc_differs = 0
    with open(args.out, "w", encoding="utf-8", newline="\n") as out:
        out.write(f"# Written by tests/reference/make_tokenizer_golden.py with transformers "
                  f"{transformers.__version__}, Python {sys.version.split()[0]} (Unicode "
                  f"{real_unicodedata.unidata_version}); vocab md5 {vocab_md5}.\n")
        out.write(f"# {len(hard)} hand-written lines, {len(randoms)} random lines (characters, "
                  f"then bytes), then {len(corpus)} lines of data/corpus ({LINES_PER_SOURCE} "
                  f"evenly spaced from each source).\n")
        for raw in records:
            text = raw.decode("utf-8", errors="ignore")
            ids = encode(text)
            nfc_switch.enabled = False
            if encode(text) != ids:
                nfc_differs += 1
            nfc_switch.enabled = True
            out.write(escape(raw) + "\t" + " ".join(map(str, ids)) + "\n")
    size = os.path.getsize(args.out)
    print(f"{args.out}: {len(records)} lines, {size} bytes; HuggingFace's NFC step would change "
          f"{nfc_differs} of them")


if __name__ == "__main__":
    main()
