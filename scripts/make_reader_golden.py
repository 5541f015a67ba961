#!/usr/bin/env python3
"""Writes tests/golden/reader/: small shards in the three MLPerf BERT HDF5 layouts, written with
h5py using the exact keys, dtypes and shapes of NVIDIA's files, and expected.json, the batches a
reader must produce from them, computed here from the batch contract (implementations/data/batch.h) and the
batch layout and shuffle scheme documented in implementations/data/reader.h, independently of the C++ code.

    python3 scripts/make_reader_golden.py      (from the repository root; needs numpy and h5py)
"""
import json
import os
import random

import h5py
import numpy as np

OUT = os.path.join("tests", "golden", "reader")
S, P, VOCAB, N = 64, 8, 100, 13
BATCH_ROWS = 4
PACKED_P = 20  # prediction slots per packed row in the expected batches
MAX_SEQS_PER_ROW = 3  # sequences per packed row: the reader's default max_sequences_per_row
CLS = 101 % VOCAB  # every sequence starts with it
MASK64 = (1 << 64) - 1


def make_sequences():
    rng = np.random.RandomState(2024)
    seqs = []
    for _ in range(N):
        n = int(rng.randint(5, 31))
        n_a = int(rng.randint(3, n - 1))
        ids = [CLS] + [int(x) for x in rng.randint(1, VOCAB, n - 2)] + [2]
        seg = [0] * n_a + [1] * (n - n_a)
        k = int(rng.randint(1, min(P, n - 1) + 1))
        pos = sorted(int(x) for x in rng.choice(np.arange(1, n), k, replace=False))
        lab = [int(x) for x in rng.randint(1, VOCAB, k)]
        seqs.append({"ids": ids, "seg": seg, "pos": pos, "lab": lab, "nsp": int(rng.randint(0, 2))})
    return seqs


def packing(seqs):
    """Consecutive sequences, up to MAX_SEQS_PER_ROW per row, while the tokens fit S (any grouping is valid data)."""
    rows, cur, used = [], [], 0
    for i, s in enumerate(seqs):
        if cur and (len(cur) == MAX_SEQS_PER_ROW or used + len(s["ids"]) > S or sum(len(seqs[j]["pos"]) for j in cur) + len(s["pos"]) > PACKED_P):
            rows.append(cur)
            cur, used = [], 0
        cur.append(i)
        used += len(s["ids"])
    rows.append(cur)
    return rows


def write_fixed(path, seqs):
    def padded(key, width):
        return np.array([s[key] + [0] * (width - len(s[key])) for s in seqs])
    with h5py.File(path, "w") as f:
        f.create_dataset("input_ids", data=padded("ids", S), dtype="i2")
        f.create_dataset("input_mask", data=np.array([[1] * len(s["ids"]) + [0] * (S - len(s["ids"])) for s in seqs]), dtype="i1")
        f.create_dataset("segment_ids", data=padded("seg", S), dtype="i1")
        f.create_dataset("masked_lm_positions", data=padded("pos", P), dtype="i2")
        f.create_dataset("masked_lm_ids", data=padded("lab", P), dtype="i2")
        f.create_dataset("next_sentence_labels", data=np.array([s["nsp"] for s in seqs]), dtype="i1")


def vlen(f, key, rows, dtype):
    d = f.create_dataset(key, (len(rows),), dtype=h5py.vlen_dtype(np.dtype(dtype)))
    for i, r in enumerate(rows):
        d[i] = np.array(r, dtype=dtype)


def write_varlength(path, seqs):
    with h5py.File(path, "w") as f:
        vlen(f, "input_ids", [s["ids"] for s in seqs], "int16")
        vlen(f, "segment_ids", [s["seg"] for s in seqs], "int8")
        vlen(f, "masked_lm_positions", [s["pos"] for s in seqs], "int16")
        vlen(f, "masked_lm_ids", [s["lab"] for s in seqs], "int16")
        f.create_dataset("next_sentence_labels", data=np.array([s["nsp"] for s in seqs]), dtype="i1")


def write_packed(path, seqs, rows):
    cols = {k: [] for k in ["ids", "seg", "len", "pos", "lab", "mlen", "nsp"]}
    for row in rows:
        ids, seg, lens, pos, lab, mlens, nsp, start = [], [], [], [], [], [], [], 0
        for i in row:
            s = seqs[i]
            ids += s["ids"]
            seg += s["seg"]
            lens.append(len(s["ids"]))
            pos += [p + start for p in s["pos"]]  # offset by the sequence's start in the row
            lab += s["lab"]
            mlens.append(len(s["pos"]))
            nsp.append(s["nsp"])
            start += len(s["ids"])
        for k, v in zip(["ids", "seg", "len", "pos", "lab", "mlen", "nsp"], [ids, seg, lens, pos, lab, mlens, nsp]):
            cols[k].append(v)
    with h5py.File(path, "w") as f:
        vlen(f, "input_ids", cols["ids"], "int16")
        vlen(f, "segment_ids", cols["seg"], "int8")
        vlen(f, "packed_input_len", cols["len"], "int16")
        vlen(f, "masked_lm_positions", cols["pos"], "int16")
        vlen(f, "masked_lm_ids", cols["lab"], "int16")
        vlen(f, "packed_masked_lm_len", cols["mlen"], "int16")
        vlen(f, "next_sentence_labels", cols["nsp"], "int8")


def batch(seqs, rows, slots, packed):
    """One Batch per data/batch.h and the batch layout of reader.h from rows (lists of sequence indices): the
    rows' sequences end to end, each row's real predictions followed by its empty slots (weight 0, label 0, at
    the row's first token), then filler up to the capacity of BATCH_ROWS rows."""
    cap = {"tokens": BATCH_ROWS * S, "sequences": BATCH_ROWS * (MAX_SEQS_PER_ROW if packed else 1),
           "predictions": BATCH_ROWS * slots, "max_seqlen": S}
    ids, seg, posid, cu, nsp, mpos, mlab, mw = [], [], [], [0], [], [], [], []
    for row in rows:
        first = len(ids)
        for i in row:
            s = seqs[i]
            mpos += [len(ids) + p for p in s["pos"]]
            mlab += s["lab"]
            mw += [1.0] * len(s["pos"])
            ids += s["ids"]
            seg += s["seg"]
            posid += list(range(len(s["ids"])))
            cu.append(len(ids))
            nsp.append(s["nsp"])
        empty = slots - sum(len(seqs[i]["pos"]) for i in row)
        mpos += [first] * empty
        mlab += [0] * empty
        mw += [0.0] * empty
    b = {"capacity": cap, "tokens": len(ids), "sequences": len(nsp), "predictions": len(mpos)}

    def fill(v, n, x):
        return v + [x] * (n - len(v))
    b.update(input_ids=fill(ids, cap["tokens"], 0), segment_ids=fill(seg, cap["tokens"], 0),
             position_ids=fill(posid, cap["tokens"], 0), cu_seqlens=fill(cu, cap["sequences"] + 1, len(ids)),
             nsp_labels=fill(nsp, cap["sequences"], 0), mlm_positions=fill(mpos, cap["predictions"], 0),
             mlm_labels=fill(mlab, cap["predictions"], 0), mlm_weights=fill(mw, cap["predictions"], 0.0))
    return b


def batches(seqs, rows, slots, packed, drop_last):
    out = [batch(seqs, rows[i:i + BATCH_ROWS], slots, packed) for i in range(0, len(rows), BATCH_ROWS)]
    if drop_last and len(rows) % BATCH_ROWS:
        out.pop()
    return out


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def main():
    os.makedirs(OUT, exist_ok=True)
    seqs = make_sequences()
    rows = packing(seqs)
    write_fixed(os.path.join(OUT, "fixed.hdf5"), seqs)
    write_varlength(os.path.join(OUT, "varlength.hdf5"), seqs)
    write_packed(os.path.join(OUT, "packed.hdf5"), seqs, rows)

    single = [[i] for i in range(N)]
    expected = {
        "seq_len": S, "max_predictions": P, "vocab_size": VOCAB, "batch_rows": BATCH_ROWS,
        "packed_max_predictions": PACKED_P, "max_sequences_per_row": MAX_SEQS_PER_ROW,
        "cls_id": CLS,
        # Eval mode (no shuffle, one pass, last batch kept): every layout gives these.
        "eval_unpacked": batches(seqs, single, P, False, False),
        "eval_packed": batches(seqs, rows, PACKED_P, True, False),
        # Training mode, one file, one rank, seed 7, drop_last: epochs 0 and 1 (reader.h scheme).
        "train_seed": 7,
        "train_unpacked": [],
        "train_packed": [],
    }
    for epoch in range(2):
        key = splitmix64((7 + epoch) & MASK64)
        order = list(range(N))  # one file: the shard order is just [0]; its rows use key + 0 + 1
        random.Random(splitmix64((key + 1) & MASK64)).shuffle(order)
        expected["train_unpacked"] += batches(seqs, [[i] for i in order], P, False, True)
        prow = list(range(len(rows)))
        random.Random(splitmix64((key + 1) & MASK64)).shuffle(prow)
        expected["train_packed"] += batches(seqs, [rows[i] for i in prow], PACKED_P, True, True)
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
