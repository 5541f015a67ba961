"""Result sets (one ``results/<system>/<benchmark>/`` directory each) and their MLPerf score.

A tree given on the command line may be a benchmark directory holding
``result_*.txt``, a system directory, a ``results/`` directory, a submitter's
root (``<org>/results/<system>/bert/``) or anything above those; every
directory below it that holds ``result_*.txt`` files is one result set.

The score is the official result summarizer's (logging spec section 4.2):
time to train of every converged run in minutes; at most one run may fail
(otherwise there is no score); sort, drop the fastest, drop the slowest unless
a failed run already plays the slowest, average the rest; multiply by the RCP
scaling factor.  Samples to converge is the olympic mean the summarizer
reports beside the score: failed runs count as infinitely slow and are
trimmed first.

The RCP scaling factor is the ``scaling_factor`` of ``scaling.json`` beside
the logs, as the summarizer reads it.  Where that file is absent, a
closed-division set gets the factor the package checker would write there
(section 3.5: RCP mean / submission mean when the RCP check passes with a
submission that converged faster than the reference), computed by the
checker's RCP module, so that a fresh result tree shows the score it will be
given.  The RCP check reads samples from ``train_samples`` when the logs carry
no per-eval sample counts (the package checker's ``--rcp-bert-train-samples``).
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

from ..check import rcp
from . import ReportInputError
from .runs import TARGET_ACCURACY, RunResult, read_run

# The summarizer tolerates one failed run among BERT's ten (four for unet3d, not ours).
MAX_DROPPED_RUNS = 1


def olympic_mean(values: Sequence[float], dropped: int = 0) -> Optional[float]:
    """The summarizer's olympic average of converged values, given how many runs failed.

    Returns None when more than MAX_DROPPED_RUNS failed or nothing is left to average.
    """
    if dropped > MAX_DROPPED_RUNS:
        return None
    ordered = sorted(values)
    kept = ordered[MAX_DROPPED_RUNS:len(ordered) - (MAX_DROPPED_RUNS - dropped)]
    return sum(kept) / len(kept) if kept else None


def _run_order(path: str):
    match = re.search(r"result_(\d+)\.txt$", path)
    return (int(match.group(1)) if match else math.inf, path)


@dataclass
class ResultSet:
    """One system's runs of one benchmark, as found in one tree."""

    bench_dir: str
    benchmark: str
    system: str
    submitter: Optional[str]
    tree: str
    runs: List[RunResult] = field(default_factory=list)
    division: Optional[str] = None
    accelerators: Optional[int] = None
    scaling_factor: float = 1.0
    scaling_source: str = "none"
    rcp_verdict: Optional[str] = None
    rcp_message: Optional[str] = None
    label: str = ""

    @property
    def identity(self) -> str:
        """Same identity in two trees means the same system: a regression can be flagged.

        It comes from the system description, never from where a tree happens to be stored,
        so a result tree and its copy elsewhere are the same system.
        """
        return f"{self.submitter}/{self.system}" if self.submitter else self.system

    @property
    def converged_runs(self) -> List[RunResult]:
        return [r for r in self.runs if r.converged]

    @property
    def dropped(self) -> int:
        return len(self.runs) - len(self.converged_runs)

    @property
    def times_min(self) -> List[float]:
        return [r.time_to_train_min for r in self.converged_runs]

    @property
    def olympic_min(self) -> Optional[float]:
        return olympic_mean(self.times_min, self.dropped)

    @property
    def score_min(self) -> Optional[float]:
        olympic = self.olympic_min
        return None if olympic is None else olympic * self.scaling_factor

    @property
    def samples_to_converge(self) -> Optional[float]:
        # The RCP reader's view: only run_stop's status decides; the others count as infinite.
        values = [r.samples_to_converge if r.status == "success" and r.samples_to_converge is not None
                  else math.inf for r in self.runs]
        failed = sum(1 for v in values if v == math.inf)
        return olympic_mean([v for v in values if v != math.inf], failed)

    @property
    def global_batch_size(self) -> Optional[int]:
        sizes = {r.global_batch_size for r in self.runs if r.global_batch_size is not None}
        return sizes.pop() if len(sizes) == 1 else None

    def mean_of(self, attribute: str) -> Optional[float]:
        """Mean of a per-run value (a throughput, the time waiting for data) over the converged runs that have it."""
        values = [getattr(r, attribute) for r in self.converged_runs]
        values = [v for v in values if v is not None]
        return sum(values) / len(values) if values else None

    def per_accelerator(self, value: Optional[float]) -> Optional[float]:
        if value is None or not self.accelerators:
            return None
        return value / self.accelerators

    @property
    def score_note(self) -> str:
        notes = []
        if self.dropped > MAX_DROPPED_RUNS:
            notes.append(f"no score: {self.dropped} of {len(self.runs)} runs did not converge or failed "
                         "compliance (at most 1 may)")
        # Runs that converged but fail compliance, grouped by reason: the summarizer drops them too.
        by_reason: dict = {}
        for run in self.runs:
            if run.compliance and run.status == "success" and run.reached_target:
                by_reason.setdefault(run.failure, []).append(run.name)
        for reason, names in by_reason.items():
            notes.append(f"dropped {', '.join(names)}: {reason}")
        if self.rcp_verdict == "fail":
            notes.append(f"RCP check failed: {self.rcp_message}")
        return "; ".join(notes)


def _read_json_object(path: str) -> Optional[dict]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _accelerator_count(desc: dict) -> Optional[int]:
    # The summarizer's accelerators_count: per node times nodes.
    try:
        return int(desc["accelerators_per_node"]) * int(desc["number_of_nodes"])
    except (KeyError, TypeError, ValueError):
        return None


def _read_scaling(bench_dir: str) -> Optional[float]:
    path = os.path.join(bench_dir, "scaling.json")
    if not os.path.isfile(path):
        return None
    data = _read_json_object(path)
    factor = data.get("scaling_factor") if data else None
    if isinstance(factor, bool) or not isinstance(factor, (int, float)):
        raise ReportInputError(f"{path}: expected a JSON object with a numeric scaling_factor")
    return float(factor)


def _make_set(bench_dir: str, tree: str, target: float, ruleset: Optional[str] = None) -> ResultSet:
    bench_dir = os.path.abspath(bench_dir)
    system_dir = os.path.dirname(bench_dir)
    results_dir = os.path.dirname(system_dir)
    result_set = ResultSet(
        bench_dir=bench_dir,
        benchmark=os.path.basename(bench_dir),
        system=os.path.basename(system_dir),
        submitter=None,
        tree=tree,
    )
    # MLPerf layout: <org>/results/<system>/<benchmark>/ beside <org>/systems/<system>.json.
    if os.path.basename(results_dir) == "results":
        desc_path = os.path.join(os.path.dirname(results_dir), "systems", result_set.system + ".json")
        desc = _read_json_object(desc_path)
        if desc:
            submitter = desc.get("submitter")
            result_set.submitter = submitter if isinstance(submitter, str) and submitter else None
            result_set.division = desc.get("division")
            result_set.accelerators = _accelerator_count(desc)
    files = sorted(glob.glob(os.path.join(glob.escape(bench_dir), "result_*.txt")), key=_run_order)
    result_set.runs = [read_run(f, target, ruleset) for f in files]
    _apply_scaling(result_set, ruleset)
    return result_set


def _apply_scaling(result_set: ResultSet, ruleset: Optional[str] = None) -> None:
    rcp_factor = 1.0
    if result_set.division == "closed":
        use_train_samples = any(r.samples_source == "train_samples" for r in result_set.runs)
        verdict = rcp.check_directory(result_set.bench_dir, use_train_samples=use_train_samples,
                                      ruleset=ruleset or rcp.DEFAULT_RULESET)
        result_set.rcp_verdict = "pass" if verdict.passed else "fail"
        result_set.rcp_message = verdict.message
        if verdict.passed:
            rcp_factor = verdict.norm_factor
    file_factor = _read_scaling(result_set.bench_dir)
    if file_factor is not None:
        result_set.scaling_factor, result_set.scaling_source = file_factor, "scaling.json"
    elif rcp_factor > 1.0:
        result_set.scaling_factor, result_set.scaling_source = rcp_factor, "RCP"


def find_result_sets(trees: Sequence[str], target: float = TARGET_ACCURACY,
                     ruleset: Optional[str] = None) -> List[ResultSet]:
    """Every result set below the given trees, in argument order, with unique labels. With a
    ruleset, runs that fail its compliance check are dropped, as the official summarizer does."""
    sets: List[ResultSet] = []
    for tree in trees:
        if not os.path.exists(tree):
            raise ReportInputError(f"{tree}: no such file or directory")
        if not os.path.isdir(tree):
            raise ReportInputError(f"{tree}: not a directory; give a result tree "
                                   "(results/<system>/bert/ or a submission root)")
        found = []
        for dirpath, dirnames, filenames in os.walk(tree):
            dirnames.sort()
            if any(re.fullmatch(r"result_.*\.txt", f) for f in filenames):
                found.append(_make_set(dirpath, tree, target, ruleset))
        if not found:
            raise ReportInputError(f"{tree}: no result_*.txt logs below it "
                                   "(expected <org>/results/<system>/bert/result_*.txt)")
        sets.extend(found)
    _assign_labels(sets)
    return sets


def _assign_labels(sets: List[ResultSet]) -> None:
    """A set is labelled by its system; when several sets hold the same system (a rerun beside its
    baseline), each says where it came from: the tree given on the command line, and within a tree
    the folder of its logs. Only the same folder given twice is told apart by position."""
    counts: dict = {}
    for s in sets:
        counts[s.identity] = counts.get(s.identity, 0) + 1
    for s in sets:
        s.label = s.identity
        if counts[s.identity] == 1:
            continue
        tree = os.path.normpath(s.tree)
        folders = {o.bench_dir for o in sets if o.identity == s.identity and os.path.normpath(o.tree) == tree}
        where = tree if len(folders) == 1 else os.path.join(tree, os.path.relpath(s.bench_dir, os.path.abspath(tree)))
        s.label = f"{s.identity} ({where})"
    seen: dict = {}
    totals: dict = {}
    for s in sets:
        totals[s.label] = totals.get(s.label, 0) + 1
    for s in sets:
        if totals[s.label] > 1:
            seen[s.label] = seen.get(s.label, 0) + 1
            s.label = f"{s.label} #{seen[s.label]}"
