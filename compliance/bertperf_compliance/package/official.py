"""The official MLCommons tools on a submitter tree, as its ``verify_for_v<N>_training.sh`` runs
them: the package checker, the result summarizer and the repository checker (logging spec
section 5.1), each in a fresh working directory (they write logs and ``summary.json`` into it).

Each returns an :class:`OfficialVerdict`: passed, the lines worth showing, and the full output.
The package and repository checkers always exit 0: their verdict is a final log line.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

TIMEOUT_S = 1800


@dataclass
class OfficialVerdict:
    name: str
    passed: bool
    lines: List[str] = field(default_factory=list)  # errors, or the verdict line
    output: str = ""
    rows: List[Dict[str, Any]] = field(default_factory=list)  # the summarizer's score rows


def installed_version() -> Optional[str]:
    """The version of the installed mlperf-logging package, None when it is not installed."""
    try:
        return importlib.metadata.version("mlperf-logging")
    except importlib.metadata.PackageNotFoundError:
        return None


def summarizer_available() -> bool:
    """The summarizer also needs pandas and PyYAML."""
    try:
        import pandas  # noqa: F401
        import yaml  # noqa: F401
    except ImportError:
        return False
    return True


def _run(module: str, args: List[str], workdir: str) -> str:
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=workdir, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    return proc.stdout + proc.stderr + (f"\n(exit status {proc.returncode})" if proc.returncode else "")


def _problems(output: str) -> List[str]:
    lines = output.splitlines()
    found = [line.strip() for line in lines if line.startswith(("ERROR", "CRITICAL")) or "** CRITICAL" in line]
    if any(line.startswith("Traceback") for line in lines):
        # The tool stopped: its exception is the last line of the traceback.
        last = [line for line in lines if line.strip() and not line.startswith("(exit status")]
        found.append("stopped with " + (last[-1].strip() if last else "a traceback"))
    return found


def package_checker(folder: str, ruleset: str, workdir: str) -> OfficialVerdict:
    out = _run("mlperf_logging.package_checker",
               [folder, "training", ruleset, "--log_output", os.path.join(workdir, "package_checker.log")], workdir)
    passed = "PACKAGE CHECKER FOUND NO ERRORS, SUCCESS" in out
    lines = _problems(out) if not passed else ["PACKAGE CHECKER FOUND NO ERRORS, SUCCESS !"]
    return OfficialVerdict("official package checker", passed, lines or out.strip().splitlines()[-3:], out)


def repo_checker(folder: str, ruleset: str, workdir: str) -> OfficialVerdict:
    out = _run("mlperf_logging.repo_checker",
               [folder, "training", ruleset, "--log_output", os.path.join(workdir, "repo_checker.log")], workdir)
    passed = "ALL CHECKS PASSED" in out
    lines = _problems(out) if not passed else ["ALL CHECKS PASSED."]
    return OfficialVerdict("official repository checker", passed, lines or out.strip().splitlines()[-3:], out)


def result_summarizer(folder: str, ruleset: str, workdir: str) -> OfficialVerdict:
    """Passes when every system gets a score row; the rows are the summary table's."""
    csv = os.path.join(workdir, "summary.csv")
    out = _run("mlperf_logging.result_summarizer", [folder, "training", ruleset, "--csv", csv], workdir)
    rows: List[Dict[str, Any]] = []
    try:
        with open(os.path.join(workdir, "summary.json")) as handle:
            rows = json.load(handle)
    except (OSError, ValueError):
        pass
    scored = bool(rows) and all(row.get("bert") is not None for row in rows)
    problems = _problems(out)
    passed = scored and not problems
    if not rows:
        problems = problems or out.strip().splitlines()[-3:]
    elif not scored:
        problems.append("a system has no BERT score (more than one run failed)")
    return OfficialVerdict("official result summarizer", passed, problems, out, rows)
