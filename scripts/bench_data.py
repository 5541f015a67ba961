"""Side-by-side benchmark of the training read path: `bertperf bench-data` against the PyTorch-style peer.

What it implements
------------------
Makes packed shards at the size of the MLPerf phase-2 shards with `bertperf data` (the corpus of scripts/setup.sh at
sequence length 512 and 76 predictions, packed up to 3 sequences a row; 4320 shards hold the 156.7M phase-2
sequences, about 36,300 each, 18,100 packed rows), once, into data/bench_data/. The corpus's documents are short
(dictionary entries, about 70 tokens); they are joined --join at a time (8) so that a packed row holds about two
sequences and 500 tokens, as the MLPerf packed data's rows hold 2.00 sequences and 508 tokens. Then times one rank's read path at
1, 64 and 512 simulated ranks (balanced global batches of ranks x --batch packed rows, shuffled, into pinned memory)
and the peer (scripts/bench_data_peer.py, from .venv-ref: h5py into numpy, a DataLoader) at the same batch,
alternating the two for --rounds rounds and keeping each one's best, and prints a Markdown table: samples per second
per core (the best round's, and the worst, median and best of the rounds: their spread), the ratio to the peer, and the
bytes read per rank and step beside the rank's own share (the values of its rows) and the length index's. With --json
each row's record (its best round's) carries the rates of every round, in the order run, and their spread.

Run from the repository root after scripts/build.sh and scripts/setup.sh --reference, on a quiet machine:
  .venv/bin/python scripts/bench_data.py
  .venv/bin/python scripts/bench_data.py --ranks 1 64 512 --batch 28 --steps 400 --rounds 3 --json
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARD_SEQUENCES = 156_726_829 // 4320  # the MLPerf phase-2 data in NVIDIA's 4320 shards


def joined_documents(path, join, out):
    """The text file `path` with every `join` consecutive documents (blank-line separated) made one."""
    with open(path, encoding="utf-8", errors="replace") as f:
        documents = [d for d in f.read().split("\n\n") if d.strip()]
    with open(out, "w", encoding="utf-8") as f:
        for i in range(0, len(documents), join):
            f.write("\n".join(d.strip("\n") for d in documents[i:i + join]) + "\n\n")
    return out


def make_shards(bertperf, out, shards, dupe_factor, join):
    if glob.glob(os.path.join(out, "*.hdf5")):
        return
    tmp = out + ".tmp"
    subprocess.run(["rm", "-rf", tmp], check=True)
    os.makedirs(tmp + ".text")
    corpus = [joined_documents(os.path.join(ROOT, "data/corpus", n), join, os.path.join(tmp + ".text", n))
              for n in ("gcide.txt", "wn.txt", "foldoc.txt", "jargon.txt", "fortunes.txt")]
    print(f"making {shards} packed shards in {out} (once)", file=sys.stderr)
    subprocess.run([bertperf, "data", "--vocab", os.path.join(ROOT, "data/vocab/vocab.txt"), "--out", tmp,
                    "--layout", "packed", "--max-seq-length", "512", "--max-predictions", "76",
                    "--dupe-factor", str(dupe_factor), "--shards", str(shards)] + corpus, check=True)
    subprocess.run(["rm", "-rf", tmp + ".text"], check=True)
    os.rename(tmp, out)


def record(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")][-1]


def spread(rates):
    """The rounds' samples/s per core: each, in the order run, and their worst, median and best."""
    return {"rounds": rates, "min": min(rates), "median": statistics.median(rates), "max": max(rates)}


def spread_cell(s):
    return f"{s['min']:,.0f} / {s['median']:,.0f} / {s['max']:,.0f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 64, 512])
    ap.add_argument("--batch", type=int, default=28, help="packed rows per rank and step (about 56 sequences)")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--shards", type=int, default=24, help="shards to make (each about the size of a phase-2 shard)")
    ap.add_argument("--dupe-factor", type=int, default=10,
                    help="passes over the corpus: 10 and 24 shards give about 36,800 sequences a shard")
    ap.add_argument("--join", type=int, default=8, help="corpus documents joined into one")
    ap.add_argument("--data", default=os.path.join(ROOT, "data/bench_data"))
    ap.add_argument("--bertperf", default=os.path.join(ROOT, "build/bin/bertperf"))
    ap.add_argument("--python-ref", default=os.path.join(ROOT, ".venv-ref/bin/python"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    make_shards(args.bertperf, args.data, args.shards, args.dupe_factor, args.join)

    best, rates = {}, {}
    for _ in range(args.rounds):
        runs = [(("bertperf", ranks), [args.bertperf, "bench-data", "--ranks", str(ranks), "--batch", str(args.batch),
                                       "--steps", str(args.steps), args.data]) for ranks in args.ranks]
        runs.append(("peer", [args.python_ref, os.path.join(ROOT, "scripts/bench_data_peer.py"), "--ranks",
                              str(max(args.ranks)), "--batch", str(args.batch), "--steps", str(args.steps), args.data]))
        for key, cmd in runs:
            r = record(cmd)
            rates.setdefault(key, []).append(r["samples_per_s_per_core"])
            if key not in best or r["samples_per_s_per_core"] > best[key]["samples_per_s_per_core"]:
                best[key] = r
    for key, r in best.items():
        r["spread"] = spread(rates[key])

    peer = best["peer"]
    one = best[("bertperf", args.ranks[0])]
    print(f"Shards: {peer['files']} packed, a phase-2 shard holds about {SHARD_SEQUENCES:,} sequences; "
          f"{args.batch} packed rows of 512 a rank and step, {one['samples'] / one['steps'] / args.batch:.2f} "
          f"sequences and {one['tokens_per_step'] / args.batch:.0f} tokens a row (MLPerf phase 2: 2.00 and 508).\n")
    print(f"| read path | ranks | samples/s per core | rounds: worst / median / best ({args.rounds}) | vs peer | "
          "shard bytes/step | own share | ratio | index bytes/step | index read at open |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for ranks in args.ranks:
        r = best[("bertperf", ranks)]
        print(f"| bertperf bench-data, balanced | {ranks} | {r['samples_per_s_per_core']:,.0f} | "
              f"{spread_cell(r['spread'])} | {r['samples_per_s_per_core'] / peer['samples_per_s_per_core']:.1f}x | "
              f"{r['shard_bytes_per_step']:,.0f} | {r['value_bytes_per_step']:,.0f} | "
              f"{r['shard_bytes_per_step'] / max(r['value_bytes_per_step'], 1):.2f} | "
              f"{r['index_bytes_per_step']:,.0f} | {r['index_open_bytes']:,} |")
    print(f"| PyTorch peer (h5py, DataLoader), own shards | {peer['ranks']} | "
          f"{peer['samples_per_s_per_core']:,.0f} | {spread_cell(peer['spread'])} | 1.0x | "
          f"{peer['shard_bytes_per_step']:,.0f} | | | | |")
    if args.json:
        print(json.dumps({"bertperf": [best[("bertperf", r)] for r in args.ranks], "peer": peer}, indent=1))


if __name__ == "__main__":
    main()
