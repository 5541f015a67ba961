"""The PyTorch-style read path of one rank, the peer of `bertperf bench-data`.

What it implements
------------------
The data loading that the MLPerf reference's PyTorch port and NVIDIA's BERT implementation use: the rank's shard is
read whole with h5py into numpy arrays, a Dataset turns one row into padded tensors (packed rows: up to 3 sequences
in 512 tokens, their lengths, masked-LM positions and labels padded to a fixed count, next-sentence labels), and a
DataLoader with a RandomSampler batches them into pinned memory (pin_memory=True) on the calling process
(num_workers=0, so the time is one core's; --workers N for N loader processes). Rank r of N reads shards
r, r + N, ... as NVIDIA's reader does ((f * world + r) mod files), and deals nothing: the peer has no balanced batches.

Prints one JSON line in bench-data's shape: samples (sequences) per second, per CPU second of this process and its
workers, and the shard bytes read per step (the files it opened, whole).

Run from the repository root with the reference environment (scripts/setup.sh --reference), beside bench-data
(scripts/bench_data.py runs both):
  .venv-ref/bin/python scripts/bench_data_peer.py --ranks 512 --batch 28 --steps 200 data/bench_data
"""

import argparse
import json
import os
import resource
import sys
import time

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler

KEYS = ("input_ids", "segment_ids", "packed_input_len", "masked_lm_positions", "masked_lm_ids",
        "packed_masked_lm_len", "next_sentence_labels")


class PackedShard(Dataset):
    """One packed shard in memory, as NVIDIA's pretraining_dataset keeps a shard (every dataset read whole)."""

    def __init__(self, path, seq_len, predictions, max_sequences):
        with h5py.File(path, "r") as f:
            self.data = {key: f[key][:] for key in KEYS}
        self.seq_len, self.predictions, self.max_sequences = seq_len, predictions, max_sequences

    def __len__(self):
        return len(self.data["input_ids"])

    def __getitem__(self, i):
        d = self.data
        ids = np.zeros(self.seq_len, dtype=np.int64)
        seg = np.zeros(self.seq_len, dtype=np.int64)
        row = d["input_ids"][i]
        ids[: len(row)] = row
        seg[: len(row)] = d["segment_ids"][i]
        lens = np.zeros(self.max_sequences, dtype=np.int64)
        lens[: len(d["packed_input_len"][i])] = d["packed_input_len"][i]
        positions = np.zeros(self.predictions, dtype=np.int64)
        labels = np.zeros(self.predictions, dtype=np.int64)
        p = d["masked_lm_positions"][i][: self.predictions]
        positions[: len(p)] = p
        labels[: len(p)] = d["masked_lm_ids"][i][: self.predictions]
        nsp = np.zeros(self.max_sequences, dtype=np.int64)
        nsp[: len(d["next_sentence_labels"][i])] = d["next_sentence_labels"][i]
        return [torch.from_numpy(a) for a in (ids, seg, lens, positions, labels, nsp)]


def cpu_seconds():
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def shards(inputs):
    files = []
    for path in inputs:
        if os.path.isdir(path):
            files += sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".hdf5"))
        else:
            files.append(path)
    if not files:
        sys.exit("bench_data_peer: no shards")
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shards", nargs="+", help="packed shards, or folders of them")
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--batch", type=int, default=28, help="packed rows per batch")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--predictions", type=int, default=80, help="masked-LM slots per packed row")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    files = shards(args.shards)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    wall0, cpu0 = time.perf_counter(), cpu_seconds()
    samples = steps = shard_bytes = 0
    f = 0
    while steps < args.steps:
        path = files[(f * args.ranks + args.rank) % len(files)]
        f += 1
        shard = PackedShard(path, args.seq_len, args.predictions, 3)
        shard_bytes += os.path.getsize(path)
        loader = DataLoader(shard, sampler=RandomSampler(shard), batch_size=args.batch, drop_last=True,
                            num_workers=args.workers, pin_memory=torch.cuda.is_available())
        for batch in loader:
            samples += int((batch[2] > 0).sum())  # sequences: the rows' nonzero lengths
            steps += 1
            if steps == args.steps:
                break
    wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
    print(json.dumps({"bench": "pytorch_data", "files": len(files), "ranks": args.ranks, "rank": args.rank,
                      "balanced": False, "batch": args.batch, "seq_len": args.seq_len, "steps": steps,
                      "samples": samples, "workers": args.workers, "pinned": torch.cuda.is_available(),
                      "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "samples_per_s": round(samples / wall, 1),
                      "samples_per_s_per_core": round(samples / cpu, 1),
                      "shard_bytes_per_step": round(shard_bytes / steps)}))


if __name__ == "__main__":
    main()
