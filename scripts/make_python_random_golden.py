#!/usr/bin/env python3
"""Writes tests/golden/python_random/vectors.json: outputs of CPython's random.Random that the C++
port (implementations/data/python_random.h) must reproduce bit for bit.

Run from the repository root with any CPython >= 3.2 (the generator and the methods used here have
not changed since):  python3 scripts/make_python_random_golden.py
Floats are stored with float.hex() so they compare exactly.
"""
import json
import os
import random
import sys

SEEDS = [0, 12345, 2**32 - 1, 2**32 + 5, 2**64 - 1]


def per_seed(seed):
    out = {"seed": seed}
    r = random.Random(seed)
    out["u32"] = [r.getrandbits(32) for _ in range(1300)]  # crosses two state twists
    r = random.Random(seed)
    out["random"] = [r.random().hex() for _ in range(100)]
    r = random.Random(seed)
    out["getrandbits"] = [[k, r.getrandbits(k)] for k in list(range(1, 65))]
    r = random.Random(seed)
    out["randint"] = []
    for a, b in [(2, 509), (0, 30521), (0, 0), (1, 1), (0, 1), (-5, 5), (0, 2**33), (7, 2**62 + 11)] * 5:
        out["randint"].append([a, b, r.randint(a, b)])
    r = random.Random(seed)
    out["shuffle"] = []
    for n in list(range(0, 25)) + [100]:
        x = list(range(n))
        r.shuffle(x)
        out["shuffle"].append(x)
    # The generator's mix: random() thresholds, randint over short ranges, shuffles, in one stream.
    r = random.Random(seed)
    mixed = []
    for step in range(1000):
        op = step % 5
        if op == 0:
            mixed.append(["random", r.random().hex()])
        elif op == 1:
            mixed.append(["randint", 0, step, r.randint(0, step)])
        elif op == 2:
            x = list(range(step % 13))
            r.shuffle(x)
            mixed.append(["shuffle", x])
        elif op == 3:
            mixed.append(["randint", 1, 30522, r.randint(1, 30522)])
        else:
            mixed.append(["random", r.random().hex()])
    out["mixed"] = mixed
    return out


def main():
    rounds = [0.5, 1.5, 2.5, -0.5, -1.5, 4.5, 3.4999999999999996, 2.675, 1e300, -7.5, 0.0, 1e-300]
    rounds += [n * 0.15 for n in range(0, 520)]  # the generator's num_to_predict products
    doc = {
        "python": sys.version.split()[0],
        "seeds": [per_seed(s) for s in SEEDS],
        "round": [[x.hex(), float(round(x)).hex()] for x in rounds],
    }
    path = os.path.join("tests", "golden", "python_random", "vectors.json")
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    os.replace(path + ".tmp", path)
    print("wrote", path)


if __name__ == "__main__":
    main()
