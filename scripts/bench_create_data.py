#!/usr/bin/env python3
"""Side-by-side: `bertperf data` against the official MLPerf generator (mlcommons/training,
retired_benchmarks/bert/cleanup_scripts/create_pretraining_data.py) on the same text, vocabulary
and flags. Reports wall time and text throughput of each, the speed-up per core (both run on one
thread), and whether the outputs are identical instance for instance.

The reference is not part of this repository: fetch create_pretraining_data.py and tokenization.py
into a folder and pass it as --reference-dir. It runs in this process through the same small
TensorFlow shims as scripts/make_create_data_golden.py: its writer code runs (padding, token-to-id
conversion, feature assembly) but protobuf serialization and file output are stubbed out, so the
reference is timed without its output cost and ours with its HDF5 write.

    .venv/bin/python scripts/bench_create_data.py --reference-dir /tmp/mlc/retired_benchmarks/bert/cleanup_scripts \\
        --bertperf build/bin/bertperf --vocab data/vocab/vocab.txt data/corpus/devil.txt
"""
import argparse
import json
import resource
import os
import subprocess
import sys
import tempfile
import time

import h5py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_create_data_golden as golden  # noqa: E402  (the TensorFlow shims)


def run_reference(args, path):
    golden.install_shims()
    sys.path.insert(0, args.reference_dir)
    import create_pretraining_data as cpd
    import random
    import tokenization
    start, cpu_start = time.perf_counter(), time.process_time()
    tokenizer = tokenization.FullTokenizer(vocab_file=args.vocab, do_lower_case=True)
    instances = cpd.create_training_instances([path], tokenizer, args.max_seq_length, args.dupe_factor,
                                              args.short_seq_prob, args.masked_lm_prob, args.max_predictions,
                                              random.Random(args.seed))
    cpd.write_instance_to_example_files(instances, tokenizer, args.max_seq_length, args.max_predictions, [os.devnull])
    seconds = (time.perf_counter() - start, time.process_time() - cpu_start)
    rows = [(tokenizer.convert_tokens_to_ids(i.tokens), list(i.segment_ids), list(i.masked_lm_positions),
             tokenizer.convert_tokens_to_ids(i.masked_lm_labels), int(i.is_random_next)) for i in instances]
    return seconds, rows


def run_ours(args, path, out_dir):
    cmd = [args.bertperf, "data", "--vocab", args.vocab, "--out", out_dir, "--threads", "1",
           "--seed", str(args.seed), "--dupe-factor", str(args.dupe_factor),
           "--max-seq-length", str(args.max_seq_length), "--max-predictions", str(args.max_predictions),
           "--masked-lm-prob", str(args.masked_lm_prob), "--short-seq-prob", str(args.short_seq_prob), path]
    best = None
    for _ in range(args.repeat):
        start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        seconds = (time.perf_counter() - start, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        best = seconds if best is None else min(best, seconds, key=lambda t: t[1])
    with h5py.File(os.path.join(out_dir, os.path.basename(path) + ".hdf5"), "r") as f:
        ids, seg, pos, lab = (f[k][:] for k in ["input_ids", "segment_ids", "masked_lm_positions", "masked_lm_ids"])
        nsp = f["next_sentence_labels"][:]
        rows = [(ids[i].tolist(), seg[i].tolist(), pos[i].tolist(), lab[i].tolist(), int(nsp[i])) for i in range(len(nsp))]
    return best, rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("texts", nargs="+", help="text files in the reference format")
    p.add_argument("--reference-dir", required=True)
    p.add_argument("--bertperf", default="build/bin/bertperf")
    p.add_argument("--vocab", required=True)
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument("--dupe-factor", type=int, default=10)
    p.add_argument("--max-seq-length", type=int, default=512)
    p.add_argument("--max-predictions", type=int, default=76)
    p.add_argument("--masked-lm-prob", type=float, default=0.15)
    p.add_argument("--short-seq-prob", type=float, default=0.1)
    p.add_argument("--repeat", type=int, default=3, help="runs of ours; the best is reported")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()

    # CPU seconds (user + sys) are the per-core measure and do not depend on what else the machine
    # runs; wall seconds are shown as well.
    results = []
    print("%-14s %7s %10s %21s %21s %9s %9s" % ("text", "MB", "instances", "reference cpu/wall s",
                                                "bertperf cpu/wall s", "x / core", "identical"))
    for path in args.texts:
        mb = os.path.getsize(path) / 1e6
        with tempfile.TemporaryDirectory() as out_dir:
            ours_s, ours = run_ours(args, path, out_dir)
        ref_s, ref = run_reference(args, path)
        same = ours == ref
        r = {"text": os.path.basename(path), "mb": mb, "instances": len(ref),
             "reference_wall_s": ref_s[0], "reference_cpu_s": ref_s[1], "bertperf_wall_s": ours_s[0],
             "bertperf_cpu_s": ours_s[1], "speedup_per_core": ref_s[1] / ours_s[1], "identical": same,
             "reference_mb_per_cpu_s": mb / ref_s[1], "bertperf_mb_per_cpu_s": mb / ours_s[1]}
        results.append(r)
        print("%-14s %7.2f %10d %10.2f/%-10.2f %10.3f/%-10.3f %9.1f %9s" % (
            r["text"], mb, len(ref), ref_s[1], ref_s[0], ours_s[1], ours_s[0], r["speedup_per_core"], "yes" if same else "NO"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"flags": {k: v for k, v in vars(args).items() if k not in ("texts", "json")}, "results": results}, f, indent=1)
    return 0 if all(r["identical"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
