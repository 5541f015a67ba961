"""What the package says to people: the score table as the MLPerf Training results page lays it
out, and the README of the implementation folder (how to rebuild, test and rerun)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from ..report.systems import find_result_sets

# The results page's columns for one row (its per-benchmark columns reduced to BERT).
PAGE_COLUMNS = (
    ("submitter", "Submitter"), ("system", "System"), ("number_of_nodes", "Nodes"),
    ("host_processor_model_name", "Processor"), ("host_processors_count", "# processors"),
    ("accelerator_model_name", "Accelerator"), ("accelerators_count", "# accelerators"),
    ("framework", "Software"), ("bert", "BERT (minutes)"), ("notes", "Notes"),
)
DIVISION_ORDER = ("closed", "open")


def _cell(key: str, value: Any) -> str:
    if value is None or value == "":
        return "-" if key == "bert" else ""
    if key == "bert":
        return f"{float(value):.3f}"
    return str(value).replace("|", "/")


def results_page(rows: Sequence[Dict[str, Any]]) -> str:
    """Markdown: one table per division and availability, closed first, as the results page."""
    groups: Dict[Any, List[Dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row.get("division", ""), row.get("availability", "")), []).append(row)
    order = sorted(groups, key=lambda k: (DIVISION_ORDER.index(k[0]) if k[0] in DIVISION_ORDER else 9, str(k[1])))
    out = []
    for division, availability in order:
        out.append(f"{str(division).capitalize()} division, {availability}")
        out.append("")
        out.append("| " + " | ".join(title for _, title in PAGE_COLUMNS) + " |")
        out.append("|" + "|".join(" --- " for _ in PAGE_COLUMNS) + "|")
        for row in sorted(groups[(division, availability)], key=lambda r: (str(r.get("system")),)):
            out.append("| " + " | ".join(_cell(key, row.get(key)) for key, _ in PAGE_COLUMNS) + " |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def rows_from_reporter(org_dir: str, targets: Dict[str, float], ruleset: str) -> List[Dict[str, Any]]:
    """The summarizer's row for each system, from bertperf-report's score (its figures equal the
    summarizer's, tests/python/test_mini_results.py), where the official summarizer is not installed."""
    rows = []
    for system, target in sorted(targets.items()):
        with open(os.path.join(org_dir, "systems", system + ".json")) as handle:
            desc = json.load(handle)
        sets = find_result_sets([os.path.join(org_dir, "results", system)], target, ruleset)
        score = sets[0].score_min if sets else None

        def count(name: str) -> Optional[int]:
            try:
                return int(desc[name]) * int(desc["number_of_nodes"])
            except (KeyError, TypeError, ValueError):
                return None

        rows.append({
            "division": desc.get("division"), "availability": desc.get("status"),
            "submitter": desc.get("submitter"), "system": desc.get("system_name"),
            "number_of_nodes": desc.get("number_of_nodes"),
            "host_processor_model_name": desc.get("host_processor_model_name"),
            "host_processors_count": count("host_processors_per_node"),
            "accelerator_model_name": desc.get("accelerator_model_name"),
            "accelerators_count": count("accelerators_per_node"), "framework": desc.get("framework"),
            "notes": ";".join(s for s in (desc.get("hw_notes"), desc.get("sw_notes")) if s), "bert": score,
        })
    return rows


@dataclass
class SystemEntry:
    """One system of the package, for the README."""

    system: str
    config: str                      # path inside code/
    config_doc: Dict[str, Any]
    division: str
    runs: int
    versions: Dict[str, str] = field(default_factory=dict)
    benchmark_doc: Dict[str, Any] = field(default_factory=dict)


def _rerun(entry: SystemEntry, ruleset: str, rcp_reference: Optional[str]) -> List[str]:
    data = entry.config_doc.get("data", {}) if isinstance(entry.config_doc.get("data"), dict) else {}
    ranks = (entry.config_doc.get("batch") or {}).get("ranks", 1)
    lines = [f"### {entry.system}", ""]
    lines.append(f"Config `{entry.config}` (benchmark `{entry.config_doc.get('benchmark')}`, "
                 f"{ranks} rank{'s' if ranks != 1 else ''}). Its data, relative to the config's folder:")
    lines.append("")
    for path in data.get("train_files", []):
        lines.append(f"- training shards `{path}`")
    if data.get("eval_file"):
        lines.append(f"- eval set `{data['eval_file']}`")
    if entry.config_doc.get("init_checkpoint"):
        lines.append(f"- initial checkpoint `{entry.config_doc['init_checkpoint']}` "
                     "(`bertperf convert-checkpoint` makes it from the phase-1 TF1 checkpoint)")
    lines.append("")
    if entry.config_doc.get("benchmark") == "mini":
        lines.append("`scripts/mini.sh` makes this data from the text corpus, runs the result set, checks "
                     "it and packages it, in one command. By hand:")
    else:
        lines.append("`bertperf data` makes MLPerf HDF5 shards from text (`--help`); for the MLPerf benchmark, "
                     "point the config at the official dataset. Then:")
    lines.append("")
    check = f".venv/bin/bertperf-check --ruleset {ruleset}"
    if rcp_reference:
        check += f" --rcp-reference {rcp_reference}"
    report = f".venv/bin/bertperf-report rerun/{entry.system} --ruleset {ruleset}"
    if "target_accuracy" in entry.benchmark_doc:
        report += f" --target {entry.benchmark_doc['target_accuracy']}"
    lines += [
        f"    build/bin/bertperf run --config {entry.config} --out rerun/{entry.system}",
        f"    {check} rerun/{entry.system}",
        f"    {report}",
        "",
    ]
    if ranks != 1:
        lines.append(f"`bertperf run` starts each run through `mpirun -np {ranks}`; under Slurm, "
                     f"`sbatch scripts/bertperf.sbatch {entry.system}` runs each as a job step.")
        lines.append("")
    return lines


def readme(org: str, impl: str, commit: str, provenance: str, left_out: Sequence[str],
           entries: Sequence[SystemEntry], ruleset: str, page: str, checks: Sequence[str],
           rcp_reference: Optional[str]) -> str:
    """The implementation folder's README.md: what the code is, how to rebuild, test and rerun."""
    lines = [
        f"# BERT, implementation `{impl}` of {org}",
        "",
        f"`code/` is the source of bertperf at commit `{commit}`, the commit that built every run of "
        f"{org}'s BERT results in this submission: `git archive {commit}`"
        + (f", without {', '.join(f'`{n}`' for n in left_out)} (the MLCommons repository checker refuses "
           "names that start with a dot)" if left_out else "")
        + ". Its `cmake/archive_commit.txt` names the commit, so a build of this folder logs it "
          "(`bertperf --version`, and the `bertperf_commit` line of every run).",
        "",
        provenance,
        "",
        "## Systems",
        "",
        "| system | config (in `code/`) | division | runs | libraries the runs logged |",
        "| --- | --- | --- | --- | --- |",
    ]
    for e in entries:
        libs = "; ".join(f"{k}: {v}" for k, v in e.versions.items()) or "(not logged)"
        lines.append(f"| {e.system} | `{e.config}` | {e.division} | {e.runs} | {libs} |")
    lines += [
        "",
        f"The score, as the MLPerf Training results page shows it (ruleset {ruleset}; minutes, the olympic "
        "mean of the runs' times to train):",
        "",
        page.rstrip(),
        "",
        "## Rebuild and test",
        "",
        "On Debian 12 (the setup script installs what is missing: compilers, CMake, OpenBLAS, HDF5, Open MPI, "
        "the pinned Python tools; CUDA, cuDNN and NCCL are used where installed):",
        "",
        "    cd code",
        "    scripts/setup.sh     # Debian packages, .venv, the text corpus and vocabulary in data/",
        "    scripts/build.sh     # build/ in Release",
        "    scripts/test.sh      # every test (GPU tests say \"skipped\" without a GPU)",
        "    build/bin/bertperf --version   # names the commit above",
        "",
        "## Rerun",
        "",
        "From `code/`, after the build. Each command prints `--help`; the config documents every field "
        "(`implementations/harness/train_config.h`).",
        "",
    ]
    for e in entries:
        lines += _rerun(e, ruleset, rcp_reference)
    lines += ["## Checks this package passed", ""]
    lines += [f"- {c}" for c in checks]
    lines.append("")
    return "\n".join(lines)
