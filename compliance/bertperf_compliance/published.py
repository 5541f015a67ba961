"""The published MLPerf Training BERT results as the scaling model's data set.

Reads MLPerf result trees (the mlcommons ``training_results_vX.Y`` repositories, or
any directory laid out like them: ``<org>/systems/<system>.json`` beside
``<org>/results/<system>/bert/result_*.txt``) and writes one row per closed-division
system whose BERT logs are there: what its system description says (nodes,
accelerators, networking) and what its logs measure (global batch, samples, time,
eval cadence, start-up). ``bertperf predict --validate`` predicts every row from
the others.

What a row holds (times in seconds unless named minutes; medians are over the runs):

* ``id`` (``<round> <org> <system>``), ``round``, ``tree`` (the folder of the logs,
  relative to the round roots' parent), and from the system description
  ``status``, ``accelerator`` (accelerator_model_name), ``nodes``,
  ``accelerators_per_node``, ``host_processor`` (host_processor_model_name),
  ``host_processors_per_node``, ``host_processor_core_count``,
  ``host_processor_frequency``, ``host_networking``, ``host_networking_topology``,
  ``accelerator_interconnect``, ``framework``, copied as written (the host
  processor is the device of a CPU-only system, 0 accelerators a node);
* ``runs``, ``converged`` (run_stop success and the target reached),
  ``global_batch``, ``gradient_accumulation`` (null where not logged);
* ``olympic_minutes``: the result summarizer's olympic mean of run_stop - run_start
  over the converged runs, before RCP scaling (null when more than one run failed);
  ``scaling_factor``: ``scaling.json``'s, 1 where there is none;
* ``mean_samples``: the mean samples to converge of the converged runs (of every run
  when none converged), each as the RCP checker reads it: the ``epoch_num`` of the
  last ``eval_accuracy`` before ``run_stop``, or where the evals carry no sample
  count, the ``train_samples`` value (report/runs.py). Some submitters log
  ``train_samples`` before training as a planned budget (Habana, Google's TPU v4
  results, tinycorp), so it is not read first;
* ``eval_interval``: median spacing of consecutive evals in samples (from the evals'
  sample counts, or train_samples over the number of evals where the log has none);
  ``evals``: mean number of evals a run; ``first_eval_samples``: median samples at
  the first eval;
* ``startup_s``: time from run_start to the first eval less what the first eval's
  samples take at the run's steady pace (median seconds per sample of the later
  eval intervals, which include one eval each): the start-up cost inside the
  timed region; null with fewer than three evals;
* ``eval_s``: mean eval_start..eval_stop where the logs have them, else null;
  ``interval_samples_per_s``: median steady interval rate; ``init_s``: untimed
  init_start..init_stop;
* ``same_runs_as``: the id of an earlier row that holds some of the same runs (a
  result copied into a later round: same seed and run_start), else null.

Usage: python -m bertperf_compliance.published ROOT... --out FILE
  ROOT is one round (its name ends in vX.Y, e.g. training_results_v2.1) or a
  directory of rounds (v2.0/, v2.1/, ...).
  --check FILE  instead of writing, compare FILE's rows with the trees' (exit 1 if any differs)
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import statistics
import sys
from typing import Dict, List, Optional, Sequence

from .report import ReportInputError
from .report.runs import RunResult, read_run
from .report.systems import olympic_mean

ROUND_NAME = re.compile(r"(?:^|_)(v\d+\.\d+)$")
BENCHMARK = "bert"


def _round_key(name: str):
    return tuple(int(x) for x in name[1:].split("."))


def round_roots(roots: Sequence[str]) -> List[tuple]:
    """(round, directory) for each round below the given roots, oldest round first."""
    found = []
    for root in roots:
        root = os.path.normpath(root)
        if not os.path.isdir(root):
            raise ReportInputError(f"{root}: not a directory")
        match = ROUND_NAME.search(os.path.basename(root))
        if match:
            found.append((match.group(1), root))
            continue
        children = [(m.group(1), os.path.join(root, c)) for c in sorted(os.listdir(root))
                    if (m := ROUND_NAME.search(c)) and os.path.isdir(os.path.join(root, c))]
        if not children:
            raise ReportInputError(f"{root}: neither a round (a name ending in vX.Y) nor a directory of rounds")
        found.extend(children)
    return sorted(found, key=lambda r: (_round_key(r[0]), r[1]))


def _text(desc: dict, key: str) -> str:
    value = desc.get(key, "")
    return value.strip() if isinstance(value, str) else str(value)


def _count(desc: dict, key: str, where: str) -> int:
    try:
        return int(str(desc.get(key, "")).strip())
    except ValueError:
        raise ReportInputError(f"{where}: {key} {desc.get(key)!r} is not a whole number") from None


def _median(values) -> Optional[float]:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _rounded(value: Optional[float], digits: int) -> Optional[float]:
    return None if value is None else round(float(value), digits)


def _startup_s(run: RunResult) -> Optional[float]:
    """First-interval time beyond what its samples take at the run's steady pace."""
    points = run.evals
    if run.run_start_ms is None or len(points) < 3 or any(p.samples is None for p in points):
        return None
    paces = []
    for a, b in zip(points[1:], points[2:]):
        if b.samples > a.samples:
            paces.append((b.time_ms - a.time_ms) / 1000.0 / (b.samples - a.samples))
    if not paces:
        return None
    return (points[0].time_ms - run.run_start_ms) / 1000.0 - points[0].samples * statistics.median(paces)


def _eval_interval(runs: List[RunResult]) -> Optional[float]:
    gaps = []
    for run in runs:
        samples = [p.samples for p in run.evals if p.samples is not None]
        gaps.extend(b - a for a, b in zip(samples, samples[1:]))
    return _median(gaps)


def system_row(round_name: str, round_dir: str, bench_dir: str) -> Optional[dict]:
    """The row of one <org>/results/<system>/bert folder; None for an open-division system."""
    system_dir = os.path.dirname(bench_dir)
    org_dir = os.path.dirname(os.path.dirname(system_dir))
    org, system = os.path.basename(org_dir), os.path.basename(system_dir)
    desc_path = os.path.join(org_dir, "systems", system + ".json")
    try:
        with open(desc_path, encoding="utf-8") as handle:
            desc = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ReportInputError(f"{desc_path}: cannot read the system description: {exc}") from None
    if not isinstance(desc, dict):
        raise ReportInputError(f"{desc_path}: not a JSON object")
    if _text(desc, "division") != "closed":
        return None
    files = sorted(glob.glob(os.path.join(glob.escape(bench_dir), "result_*.txt")))
    runs = [read_run(f) for f in files]
    batches = {r.global_batch_size for r in runs}
    if len(batches) != 1 or None in batches:
        raise ReportInputError(f"{bench_dir}: the runs log global batch sizes {sorted(map(str, batches))}")
    converged = [r for r in runs if r.converged]
    counted = converged or runs
    samples = [r.samples_to_converge for r in counted if r.samples_to_converge is not None]
    accumulation = {r.gradient_accumulation_steps for r in runs} - {None}
    scaling = os.path.join(bench_dir, "scaling.json")
    factor = 1.0
    if os.path.isfile(scaling):
        with open(scaling, encoding="utf-8") as handle:
            factor = float(json.load(handle)["scaling_factor"])
    evals_s = [r.eval_time_ms / 1000.0 / r.eval_count for r in runs if r.eval_count]
    return {
        "id": f"{round_name} {org} {system}",
        "round": round_name,
        "tree": "/".join([round_name, os.path.relpath(bench_dir, round_dir).replace(os.sep, "/")]),
        "status": _text(desc, "status"),
        "accelerator": _text(desc, "accelerator_model_name"),
        "nodes": _count(desc, "number_of_nodes", desc_path),
        "accelerators_per_node": _count(desc, "accelerators_per_node", desc_path),
        "host_processor": _text(desc, "host_processor_model_name"),
        "host_processors_per_node": _text(desc, "host_processors_per_node"),
        "host_processor_core_count": _text(desc, "host_processor_core_count"),
        "host_processor_frequency": _text(desc, "host_processor_frequency"),
        "host_networking": _text(desc, "host_networking"),
        "host_networking_topology": _text(desc, "host_networking_topology"),
        "accelerator_interconnect": _text(desc, "accelerator_interconnect"),
        "framework": _text(desc, "framework"),
        "runs": len(runs),
        "converged": len(converged),
        "global_batch": int(batches.pop()),
        "gradient_accumulation": accumulation.pop() if len(accumulation) == 1 else None,
        "olympic_minutes": _rounded(olympic_mean([r.time_to_train_min for r in converged],
                                                 len(runs) - len(converged)), 6),
        "scaling_factor": factor,
        "mean_samples": _rounded(sum(samples) / len(samples), 1) if samples else None,
        "eval_interval": _rounded(_eval_interval(runs), 1),
        "evals": _rounded(sum(len(r.evals) for r in runs) / len(runs), 2),
        "first_eval_samples": _rounded(_median(r.evals[0].samples for r in runs if r.evals), 1),
        "startup_s": _rounded(_median(_startup_s(r) for r in runs), 3),
        "eval_s": _rounded(_median(evals_s), 3),
        "interval_samples_per_s": _rounded(_median(r.throughput_steady for r in runs), 1),
        "init_s": _rounded(_median(r.init_s for r in runs), 3),
        "same_runs_as": None,
        "_fingerprint": {(r.seed, r.run_start_ms) for r in runs if r.run_start_ms is not None},
    }


def extract(roots: Sequence[str], warn=None) -> List[dict]:
    """Every closed-division BERT system with logs below the roots, oldest round first."""
    rows: List[dict] = []
    for round_name, round_dir in round_roots(roots):
        pattern = os.path.join(glob.escape(round_dir), "*", "results", "*", BENCHMARK)
        for bench_dir in sorted(glob.glob(pattern)):
            if not glob.glob(os.path.join(glob.escape(bench_dir), "result_*.txt")):
                if warn:
                    warn(f"{bench_dir}: no result_*.txt logs; left out")
                continue
            row = system_row(round_name, round_dir, bench_dir)
            if row is not None:
                rows.append(row)
    owner: Dict[tuple, str] = {}
    for row in rows:
        fingerprint = row.pop("_fingerprint")
        earlier = sorted({owner[f] for f in fingerprint if f in owner})
        row["same_runs_as"] = earlier[0] if earlier else None
        for f in fingerprint:
            owner.setdefault(f, row["same_runs_as"] or row["id"])
    return rows


NOTES = [
    "Derived from the published MLPerf Training result trees (mlcommons/training_results_v1.1 ... v5.0) by "
    "python -m bertperf_compliance.published; every closed-division BERT system with logs. The field meanings are "
    "in compliance/bertperf_compliance/published.py. Numbers read from the logs and the system descriptions; "
    "no log is copied here.",
]


def document(rows: List[dict]) -> dict:
    return {"notes": NOTES, "systems": rows}


def dump(doc: dict) -> str:
    # One system a line: diffs stay readable.
    lines = ",\n".join("  " + json.dumps(row, ensure_ascii=False) for row in doc["systems"])
    return '{\n "notes": ' + json.dumps(doc["notes"], ensure_ascii=False) + ',\n "systems": [\n' + lines + "\n ]\n}\n"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bertperf_compliance.published",
                                     description="Derive the scaling model's data set from MLPerf result trees.")
    parser.add_argument("roots", nargs="+", metavar="ROOT")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--out", metavar="FILE", help="write the data set here")
    group.add_argument("--check", metavar="FILE", help="compare FILE's rows for these trees with the trees")
    args = parser.parse_args(argv)
    try:
        rows = extract(args.roots, warn=lambda m: print(f"published: note: {m}", file=sys.stderr))
        if args.out:
            tmp = args.out + ".tmp"
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.write(dump(document(rows)))
            os.replace(tmp, args.out)
            print(f"published: {len(rows)} systems -> {args.out}", file=sys.stderr)
            return 0
        with open(args.check, encoding="utf-8") as handle:
            committed = {r["id"]: r for r in json.load(handle)["systems"]}
        bad = [r["id"] for r in rows if committed.get(r["id"]) != r]
        for row_id in bad:
            print(f"published: {row_id}: differs from {args.check}", file=sys.stderr)
        return 1 if bad else 0
    except ReportInputError as exc:
        print(f"published: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
