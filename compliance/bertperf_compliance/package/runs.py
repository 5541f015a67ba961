"""What packaging reads from a result tree: its systems, their runs, and what each run logged
about its origin (the ``bertperf_*`` lines of harness/provenance.h) and its configuration (the
header lines a config's dry run logs)."""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ..mllog_parse import Record, parse_file

BENCHMARK = "bert"
# Lines a run logs that are not the config's: the seed is drawn per run, the rest say where it came from.
NOT_FROM_CONFIG = ("seed", "bertperf_commit", "bertperf_config", "bertperf_library_versions")


@dataclass
class Run:
    """One ``result_<i>.txt``."""

    path: str
    records: List[Record] = field(default_factory=list)
    parse_error: Optional[str] = None  # "LINE: message" of the first unparsable MLLOG line
    commit: Optional[str] = None       # None: the log predates provenance lines
    commit_line: Optional[int] = None
    dirty: Optional[bool] = None
    config: Optional[str] = None
    versions: Dict[str, str] = field(default_factory=dict)
    seeds: List[Any] = field(default_factory=list)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    def first(self, key: str) -> Optional[Record]:
        return next((r for r in self.records if r.key == key), None)


@dataclass
class SystemRuns:
    """``results/<system>/bert/`` of one tree with its ``systems/<system>.json``."""

    tree: str
    system: str
    description: str   # systems/<system>.json
    directory: str     # results/<system>/bert
    runs: List[Run] = field(default_factory=list)
    others: List[str] = field(default_factory=list)  # files beside the runs


def _run_index(path: str):
    match = re.search(r"result_(\d+)\.txt$", path)
    return (int(match.group(1)) if match else 1 << 30, path)


def read_run(path: str) -> Run:
    run = Run(path)
    parsed = parse_file(path)
    run.records = parsed.records
    if parsed.errors:
        first = parsed.errors[0]
        run.parse_error = f"{first.line}: {first.message}"
    for rec in parsed.records:
        if rec.key == "bertperf_commit" and run.commit is None:
            run.commit = rec.value if isinstance(rec.value, str) else str(rec.value)
            run.commit_line = rec.line
            dirty = rec.metadata.get("dirty")
            run.dirty = dirty if isinstance(dirty, bool) else True
        elif rec.key == "bertperf_config" and run.config is None and isinstance(rec.value, str):
            run.config = rec.value
        elif rec.key == "bertperf_library_versions" and isinstance(rec.value, dict):
            run.versions = {str(k): str(v) for k, v in rec.value.items()}
        elif rec.key == "seed":
            run.seeds.append(rec.value)
    return run


def read_tree(tree: str) -> List[SystemRuns]:
    """Every ``results/<system>/bert`` of a tree written by ``bertperf run``, in name order."""
    found = []
    for directory in sorted(glob.glob(os.path.join(tree, "results", "*", BENCHMARK))):
        if not os.path.isdir(directory):
            continue
        system = os.path.basename(os.path.dirname(directory))
        runs = sorted(glob.glob(os.path.join(directory, "result_*.txt")), key=_run_index)
        others = sorted(p for p in glob.glob(os.path.join(directory, "*")) if p not in runs)
        found.append(SystemRuns(tree, system, os.path.join(tree, "systems", system + ".json"), directory,
                                [read_run(p) for p in runs], others))
    return found


def config_lines(records: List[Record]) -> Dict[str, Record]:
    """The first record of every key a config's dry run logs (submission fields and hyperparameters)."""
    out: Dict[str, Record] = {}
    for rec in records:
        if rec.key not in NOT_FROM_CONFIG and rec.key not in out:
            out[rec.key] = rec
    return out
