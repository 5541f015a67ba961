#!/usr/bin/env python3
"""Produces the golden data of tests/golden/create_data/ by running the official MLPerf BERT
generator (mlcommons/training, retired_benchmarks/bert/cleanup_scripts/create_pretraining_data.py
and tokenization.py) on our small corpus. The reference code is NOT part of this repository: fetch
those two files into a folder of your choice and pass it as --reference-dir.

    git clone https://github.com/mlcommons/training /tmp/mlc
    python3 scripts/make_create_data_golden.py \
        --reference-dir /tmp/mlc/retired_benchmarks/bert/cleanup_scripts

The reference imports TensorFlow only for flags, logging, file reading and the TFRecord writer. This
script stands in for those with tiny shims (file reading keeps TF's semantics: split on '\\n' only,
UTF-8) and calls the reference's own create_training_instances() with a fresh
random.Random(seed) per input file, exactly as the MLPerf recipe runs one generator process per
text part. The TFRecord writer is skipped: its only logic, padding and tokens-to-ids, is recorded
directly. The first rng.shuffle the reference makes is of the documents in input order; a Random
subclass records that list so the C++ test can also check instance creation on its own, apart
from the tokenizer.

Writes (sorted keys, one instance per line so diffs stay readable):
  vocab.txt                    a small WordPiece vocab built from the corpus (deterministic)
  documents_<corpus>.json      the reference's tokenized documents, ids, before the shuffle
  instances_<config>.json      per config and corpus file: the instances in output order
  eval_picks.json              pick_eval_samples' indices int(i * (N / K)) where they differ from i*N//K
"""
import argparse
import collections
import copy
import json
import os
import random
import sys
import types

GOLDEN = os.path.join("tests", "golden", "create_data")
CORPORA = ["corpus_a.txt", "corpus_b.txt"]
CONFIGS = {
    # name: max_seq_length, max_predictions_per_seq, masked_lm_prob, short_seq_prob, dupe_factor, seed
    "mlperf": (512, 76, 0.15, 0.1, 10, 12345),
    "seq128": (128, 20, 0.15, 0.1, 5, 12345),
    "seq32": (32, 5, 0.2, 0.5, 3, 7),
}


def install_shims():
    """Minimal stand-ins for the parts of TensorFlow, absl and six the reference touches."""
    class GFile:
        # TF's GFile.readline: lines end at '\n' only; text is UTF-8.
        def __init__(self, path, mode="r"):
            with open(path, "rb") as f:
                self._lines = f.read().split(b"\n")
            self._lines = [l + b"\n" for l in self._lines[:-1]] + ([self._lines[-1]] if self._lines[-1] else [])
            self._i = 0

        def readline(self):
            if self._i >= len(self._lines):
                return ""
            self._i += 1
            return self._lines[self._i - 1].decode("utf-8")

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    class Flags:
        def __init__(self):
            self.__dict__["_values"] = {}

        def __getattr__(self, name):
            return self._values[name]

    flags = types.SimpleNamespace(FLAGS=Flags())
    for kind in ["string", "bool", "integer", "float"]:
        setattr(flags, "DEFINE_" + kind,
                lambda name, default, help, _f=flags: _f.FLAGS._values.__setitem__(name, default))
    flags.mark_flag_as_required = lambda name: None

    # The TFRecord writer's protobuf layer, reduced to plain containers: the reference's own writer
    # code (padding, token-to-id conversion, feature assembly) still runs, only serialization is free.
    class ValueList:
        def __init__(self, value):
            self.value = value

    class Feature:
        def __init__(self, int64_list=None, float_list=None):
            self.int64_list = int64_list or ValueList([])
            self.float_list = float_list or ValueList([])

    class Example:
        def __init__(self, features):
            self.features = features

        def SerializeToString(self):
            return b""

    class RecordWriter:
        def __init__(self, path):
            self.count = 0

        def write(self, record):
            self.count += 1

        def close(self):
            pass

    tf = types.ModuleType("tensorflow")
    tf.train = types.SimpleNamespace(Example=Example, Features=lambda feature: feature, Feature=Feature,
                                     Int64List=ValueList, FloatList=ValueList)
    tf.python_io = types.SimpleNamespace(TFRecordWriter=RecordWriter)
    tf.flags = flags
    tf.gfile = types.SimpleNamespace(GFile=GFile, Glob=lambda p: [p])
    tf.logging = types.SimpleNamespace(info=lambda *a: None, set_verbosity=lambda *a: None, INFO=0)
    compat = types.ModuleType("tensorflow.compat")
    v1 = types.ModuleType("tensorflow.compat.v1")
    v1.gfile = tf.gfile
    compat.v1 = v1
    tf.compat = compat
    absl = types.ModuleType("absl")
    absl.flags = flags
    sys.modules.update({"tensorflow": tf, "tensorflow.compat": compat, "tensorflow.compat.v1": v1,
                        "absl": absl, "absl.flags": flags})
    if "six" not in sys.modules:
        try:
            import six  # noqa: F401
        except ImportError:
            sys.modules["six"] = types.SimpleNamespace(PY2=False, PY3=True)


def build_vocab(tokenization, paths):
    """Special tokens, frequent words whole, every other word through '##' pieces; a few characters
    are left out on purpose so that some words become [UNK]."""
    basic = tokenization.BasicTokenizer(do_lower_case=True)
    counts = collections.Counter()
    chars = set()
    for p in paths:
        with open(p, encoding="utf-8") as f:
            for line in f:
                for w in basic.tokenize(line):
                    counts[w] += 1
                    chars.update(w)
    missing = {"q", "ö", "京"}
    words = sorted(w for w, c in counts.items() if c >= 2 and not (set(w) & missing))
    pieces = sorted(c for c in chars if c not in missing)
    suffixes = ["##s", "##ed", "##ing", "##er", "##ly", "##tion", "##al"]
    vocab = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    seen = set(vocab)
    for t in words + pieces + ["##" + c for c in pieces] + suffixes:
        if t not in seen:
            seen.add(t)
            vocab.append(t)
    return vocab


class RecordingRandom(random.Random):
    """random.Random that keeps a copy of the first list it shuffles (the documents)."""

    def shuffle(self, x, *args, **kwargs):
        if not hasattr(self, "first_shuffled"):
            self.first_shuffled = copy.deepcopy(x)
        return super().shuffle(x, *args, **kwargs)


def dump_lines(path, head, rows):
    with open(path + ".tmp", "w") as f:
        f.write("{\n" + "".join('"%s": %s,\n' % (k, json.dumps(v)) for k, v in head.items()))
        f.write('"rows": [\n' + ",\n".join(json.dumps(r, separators=(",", ":")) for r in rows) + "\n]}\n")
    os.replace(path + ".tmp", path)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference-dir", required=True)
    args = parser.parse_args()
    install_shims()
    sys.path.insert(0, args.reference_dir)
    import create_pretraining_data as cpd
    import tokenization

    corpus_paths = [os.path.join(GOLDEN, c) for c in CORPORA]
    vocab_path = os.path.join(GOLDEN, "vocab.txt")
    with open(vocab_path, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in build_vocab(tokenization, corpus_paths)))
    tokenizer = tokenization.FullTokenizer(vocab_file=vocab_path, do_lower_case=True)

    for name, (seq, preds, mlm_prob, short_prob, dupe, seed) in CONFIGS.items():
        files = {}
        for corpus, path in zip(CORPORA, corpus_paths):
            rng = RecordingRandom(seed)
            instances = cpd.create_training_instances([path], tokenizer, seq, dupe, short_prob, mlm_prob, preds, rng)
            rows = []
            for inst in instances:
                ids = tokenizer.convert_tokens_to_ids(inst.tokens)
                n_a = inst.segment_ids.count(0)
                assert inst.segment_ids == [0] * n_a + [1] * (len(ids) - n_a)
                rows.append([ids, n_a, list(inst.masked_lm_positions),
                             tokenizer.convert_tokens_to_ids(inst.masked_lm_labels), int(inst.is_random_next)])
            files[corpus] = rows
            docs = [[tokenizer.convert_tokens_to_ids(s) for s in d] for d in rng.first_shuffled]
            dump_lines(os.path.join(GOLDEN, "documents_%s.json" % corpus[:-4]), {"corpus": corpus}, docs)
        for corpus, rows in files.items():
            dump_lines(os.path.join(GOLDEN, "instances_%s_%s.json" % (name, corpus[:-4])),
                       {"corpus": corpus, "max_seq_length": seq, "max_predictions_per_seq": preds,
                        "masked_lm_prob": mlm_prob, "short_seq_prob": short_prob, "dupe_factor": dupe,
                        "random_seed": seed, "vocab_size": len(tokenizer.vocab),
                        "row_format": "[input_ids, segment_0_count, masked_lm_positions, masked_lm_ids, next_sentence_label]"},
                       rows)

    # pick_eval_samples: sample i <- int(i * pick_ratio), pick_ratio = N / K in floating point.
    picks = {}
    # The last two are counts where the float product differs from exact arithmetic at one i.
    for n, k in [(10000, 10000), (10001, 10000), (12345, 10000), (19999, 10000), (3315287, 10000),
                 (312345677, 10000), (7, 10), (333, 100), (387383855, 10000), (101934798, 10000)]:
        ratio = n / k
        picks["%d/%d" % (n, k)] = [[i, int(i * ratio)] for i in range(k) if int(i * ratio) != i * n // k]
    with open(os.path.join(GOLDEN, "eval_picks.json"), "w") as f:
        json.dump(picks, f, sort_keys=True)
        f.write("\n")
    print("golden data written to", GOLDEN)


if __name__ == "__main__":
    main()
