"""A result set against reference runs of another implementation of the same recipe.

Reads an MLPerf result directory (results/<system>/bert/result_*.txt, or a tree above it) and a
reference file written by scripts/pytorch_mini_recipe.py --out, and prints a Markdown table of both:
runs at the target, samples to converge, time to train (olympic mean over the runs, a run that
missed the target counting as the slowest, as MLPerf scores it), effective throughput, the ratios,
and the verdict of the RCP test against the reference (bertperf-check --rcp-reference).

The ratio only means something when both sides ran on the same machine, side by side.

    .venv/bin/python scripts/compare_reference.py --reference benchmarks/bert/mini/reference/pytorch_cpu_2c.json \
        --target 0.085 results/mini_cpu_2c
"""

import argparse
import glob
import json
import math
import os
import sys

from bertperf_compliance.check import rcp
from bertperf_compliance.report.runs import read_run


def olympic(values):
    """MLPerf's olympic mean: drop the fastest and the slowest; None when more than one is missing."""
    if sum(1 for v in values if v is None) > 1 or len(values) < 3:
        return None
    return rcp.olympic_mean([math.inf if v is None else v for v in values])


def fmt(value, digits=3):
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.{digits}g}"


def spread(values):
    done = [v for v in values if v is not None]
    return f"{fmt(min(done), 4)} to {fmt(max(done), 4)}" if done else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reference", required=True, help="the reference runs (pytorch_mini_recipe.py --out)")
    ap.add_argument("--target", type=float, required=True, help="the benchmark's target accuracy")
    ap.add_argument("results", help="a result directory or a tree above results/<system>/bert/")
    args = ap.parse_args()

    logs = sorted(glob.glob(os.path.join(args.results, "**", "result_*.txt"), recursive=True))
    if not logs:
        sys.exit(f"{args.results}: no result_*.txt files")
    if len({os.path.dirname(p) for p in logs}) != 1:
        sys.exit(f"{args.results}: result files in more than one directory; name one results/<system>/bert/")
    try:
        record = rcp.read_reference(args.reference)
    except rcp.RcpReferenceError as exc:
        sys.exit(str(exc))
    with open(args.reference) as f:
        ref = json.load(f)

    ours = [read_run(p, args.target) for p in logs]
    our_samples = [r.samples_to_converge if r.converged else None for r in ours]
    our_minutes = [r.time_to_train_min if r.converged else None for r in ours]
    our_rate = [r.throughput_effective for r in ours if r.throughput_effective]
    their_samples = [r["samples_to_converge"] for r in ref["runs"]]
    their_minutes = [r["time_to_train_s"] / 60 if r["samples_to_converge"] is not None else None
                     for r in ref["runs"]]
    their_rate = [r["steps"] * ref["global_batch_size"] / r["time_to_train_s"] for r in ref["runs"]]

    t_ours, t_theirs = olympic(our_minutes), olympic(their_minutes)
    s_ours, s_theirs = olympic(our_samples), olympic(their_samples)
    r_ours, r_theirs = sum(our_rate) / len(our_rate), sum(their_rate) / len(their_rate)
    ratio = lambda a, b: f"**{b / a:.2f}x**" if a and b else "-"

    print(f"| | bertperf ({len(ours)} runs) | PyTorch reference ({len(ref['runs'])} runs, torch "
          f"{ref.get('torch', '?')}) | PyTorch / bertperf |")
    print("| --- | --- | --- | --- |")
    print(f"| runs reaching {args.target} | {sum(v is not None for v in our_samples)} | "
          f"{sum(v is not None for v in their_samples)} | |")
    print(f"| samples to converge, olympic mean (range) | {fmt(s_ours)} ({spread(our_samples)}) | "
          f"{fmt(s_theirs)} ({spread(their_samples)}) | {ratio(s_ours, s_theirs)} |")
    print(f"| time to train, min, olympic mean (range) | {fmt(t_ours)} ({spread(our_minutes)}) | "
          f"{fmt(t_theirs)} ({spread(their_minutes)}) | {ratio(t_ours, t_theirs)} |")
    print(f"| effective throughput, samples/s (evals included) | {r_ours:.1f} | {r_theirs:.1f} | "
          f"{ratio(1 / r_ours, 1 / r_theirs)} |")

    result = rcp.check_directory(os.path.dirname(logs[0]), reference=record)
    print()
    print(f"RCP test against the reference: {'pass' if result.passed else 'FAIL'} ({result.message}; "
          f"olympic mean {fmt(result.submission_mean)} samples, reference mean {fmt(record.mean)}, "
          f"{result.detail})")
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
