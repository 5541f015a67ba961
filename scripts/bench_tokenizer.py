#!/usr/bin/env python3
"""Side by side: HuggingFace tokenizers' BertWordPieceTokenizer vs `bertperf tokenize` on the same
text, with the same number of threads. Prints MB/s and lines/s of each and their ratio.

Usage (HuggingFace tokenizers from requirements-reference.txt: scripts/setup.sh --reference):

    .venv-ref/bin/python scripts/bench_tokenizer.py --bertperf build/bin/bertperf \\
        [--input FILE] [--vocab data/vocab/vocab.txt] [--threads 1] [--repeat 3]

The input defaults to all of data/corpus/*.txt (scripts/prepare_corpus.py), concatenated. Both sides
are timed on tokenization alone, best of --repeat runs: HuggingFace from the list of lines in memory
to its ids (encode_batch_fast where the installed version has it, else encode_batch, without
special tokens); bertperf from its own report (file reading and output excluded). Both use the
standard settings: lower-casing, accent stripping, CJK spacing, text cleaning.

Also reports how many lines give identical ids. HuggingFace's fast tokenizer is not the reference:
it cuts words at 100 characters rather than 200, drops every category-C character rather than only
Cc/Cf, and NFC-normalizes, so a few lines may differ.
"""

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile
import time


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bertperf", default="build/bin/bertperf", help="the bertperf executable")
    parser.add_argument("--input", help="text file (default: data/corpus/*.txt concatenated)")
    parser.add_argument("--vocab", default="data/vocab/vocab.txt")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--check-lines", type=int, default=20000,
                        help="lines compared id for id (from the start of the input)")
    return parser.parse_args()


def main():
    args = parse_args()
    # Rayon reads its thread count once, when the pool starts: set it before tokenizers loads.
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if args.threads > 1 else "false"
    import tokenizers
    from tokenizers import BertWordPieceTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        path = args.input
        if path is None:
            files = sorted(glob.glob("data/corpus/*.txt"))
            if not files:
                sys.exit("bench_tokenizer: no data/corpus/*.txt; run scripts/prepare_corpus.py")
            path = os.path.join(tmp, "corpus.txt")
            with open(path, "wb") as out:
                for f in files:
                    with open(f, "rb") as src:
                        out.write(src.read())
        with open(path, "rb") as f:
            data = f.read()
        lines = data.decode("utf-8", errors="ignore").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        size = len(data)
        print(f"input: {path}: {size} bytes, {len(lines)} lines; threads: {args.threads}")

        hf = BertWordPieceTokenizer(args.vocab, lowercase=True, strip_accents=None, clean_text=True,
                                    handle_chinese_chars=True)
        # encode_batch_fast (tokenizers >= 0.21) skips offset tracking; the wrapper class does not
        # expose it, the Tokenizer inside does.
        inner = getattr(hf, "_tokenizer", hf)
        encode = getattr(inner, "encode_batch_fast", None) or hf.encode_batch
        hf_times, hf_cpu = [], []
        for _ in range(args.repeat):
            start, cpu_start = time.perf_counter(), time.process_time()
            encodings = encode(lines, add_special_tokens=False)
            hf_times.append(time.perf_counter() - start)
            hf_cpu.append(time.process_time() - cpu_start)
        hf_tokens = sum(len(e.ids) for e in encodings)

        ours_times, ours_cpu = [], []
        report = re.compile(r"tokenize: \d+ lines, \d+ bytes, (\d+) tokens, ([0-9.e+-]+) s, "
                            r"([0-9.e+-]+) cpu-s")
        for _ in range(args.repeat):
            run = subprocess.run([args.bertperf, "tokenize", "--vocab", args.vocab, "--input", path,
                                  "--count", "--threads", str(args.threads)],
                                 capture_output=True, text=True, check=True)
            m = report.search(run.stderr)
            if not m:
                sys.exit(f"bench_tokenizer: unexpected bertperf output:\n{run.stderr}")
            ours_tokens, seconds = int(m.group(1)), float(m.group(2))
            ours_times.append(seconds)
            ours_cpu.append(float(m.group(3)))

        check = min(args.check_lines, len(lines))
        sample = os.path.join(tmp, "sample.txt")
        with open(sample, "w", encoding="utf-8", newline="\n") as f:
            f.write("\n".join(lines[:check]) + "\n")
        run = subprocess.run([args.bertperf, "tokenize", "--vocab", args.vocab, "--input", sample,
                              "--ids"], capture_output=True, text=True, check=True)
        ours_ids = [list(map(int, row.split())) for row in run.stdout.split("\n")[:check]]
        same = sum(1 for a, b in zip(ours_ids, encodings[:check]) if a == b.ids)

    hf_best, ours_best = min(hf_times), min(ours_times)
    hf_cpu_best, ours_cpu_best = min(hf_cpu), min(ours_cpu)
    print(f"{'tokenizer':44s} {'wall s':>8s} {'MB/s':>8s} {'lines/s':>10s} {'cpu s':>8s} "
          f"{'MB/cpu-s':>8s} {'tokens':>10s}")
    rows = [(f"HF tokenizers {tokenizers.__version__} BertWordPieceTokenizer", hf_best, hf_cpu_best,
             hf_tokens),
            ("bertperf tokenize", ours_best, ours_cpu_best, ours_tokens)]
    for name, wall, cpu, tokens in rows:
        print(f"{name:44s} {wall:8.3f} {size / wall / 1e6:8.2f} {len(lines) / wall:10.0f} "
              f"{cpu:8.3f} {size / cpu / 1e6:8.2f} {tokens:10d}")
    print(f"speed ratio bertperf / HF: {hf_best / ours_best:.2f}x wall, {hf_cpu_best / ours_cpu_best:.2f}x "
          f"CPU time (best of {args.repeat}, {args.threads} thread(s))")
    print(f"identical ids on {same} of the first {check} lines")


if __name__ == "__main__":
    main()
