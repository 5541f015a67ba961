"""The report's tables and their four output formats: terminal text, Markdown, CSV and JSON.

Three tables: *systems* (one row per result set: score and averages),
*runs* (one row per log) and *comparisons* (ratios against the baseline and
between repeats of a system).  Every table is built once as rows of raw values
(None where a log lacks what a value needs); text and Markdown format those
values for people, CSV and JSON keep them as numbers for programs.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from .. import __version__
from .compare import Comparison
from .runs import TARGET_ACCURACY
from .systems import ResultSet

TABLE_NAMES = ("systems", "runs", "comparisons")


@dataclass(frozen=True)
class Column:
    """A table column: the header people read, the key programs read, how to show a value."""

    header: str
    key: str
    show: Callable[[Any], str] = str


def _fixed(digits: int) -> Callable[[Any], str]:
    return lambda v: f"{v:.{digits}f}"


def _grouped(v: Any) -> str:
    return f"{v:,.0f}"


SYSTEM_COLUMNS = [
    Column("set", "label"),
    Column("division", "division"),
    Column("acc", "accelerators"),
    Column("GBS", "global_batch_size"),
    Column("runs", "runs"),
    Column("converged", "converged_runs"),
    Column("olympic min", "olympic_min", _fixed(4)),
    Column("RCP", "rcp"),
    Column("scaling", "scaling_factor", _fixed(4)),
    Column("scaling from", "scaling_source"),
    Column("score min", "score_min", _fixed(4)),
    Column("samples to converge", "samples_to_converge", _grouped),
    Column("eff samples/s", "throughput_effective", _grouped),
    Column("steady samples/s", "throughput_steady", _grouped),
    Column("train-only samples/s", "throughput_train_only", _grouped),
    Column("eff /acc", "throughput_effective_per_acc", _fixed(1)),
    Column("data wait s", "data_wait_s", _fixed(2)),
    Column("note", "note"),
]

RUN_COLUMNS = [
    Column("set", "label"),
    Column("run", "run"),
    Column("seed", "seed"),
    Column("status", "status"),
    Column("final acc", "final_accuracy", _fixed(4)),
    Column("evals", "evals"),
    Column("time to train min", "time_to_train_min", _fixed(4)),
    Column("samples", "samples_to_converge", _grouped),
    Column("samples from", "samples_source"),
    Column("eff samples/s", "throughput_effective", _grouped),
    Column("steady samples/s", "throughput_steady", _grouped),
    Column("train-only samples/s", "throughput_train_only", _grouped),
    Column("data wait s", "data_wait_s", _fixed(2)),
    Column("data wait %", "data_wait_share", lambda v: f"{100 * v:.1f}"),
    Column("counted", "counted"),
]

COMPARISON_COLUMNS = [
    Column("baseline", "baseline"),
    Column("compared", "candidate"),
    Column("time ratio", "time_ratio", _fixed(4)),
    Column("CI low", "time_ci_low", _fixed(4)),
    Column("CI high", "time_ci_high", _fixed(4)),
    Column("time", "time_verdict"),
    Column("throughput ratio", "throughput_ratio", _fixed(4)),
    Column("CI low", "throughput_ci_low", _fixed(4)),
    Column("CI high", "throughput_ci_high", _fixed(4)),
    Column("throughput", "throughput_verdict"),
    Column("regression", "regression", lambda v: "REGRESSION" if v else "no"),
]


def system_rows(sets: Sequence[ResultSet]) -> List[Dict[str, Any]]:
    rows = []
    for s in sets:
        effective = s.mean_of("throughput_effective")
        rows.append({
            "label": s.label,
            "tree": s.tree,
            "path": s.bench_dir,
            "submitter": s.submitter,
            "system": s.system,
            "benchmark": s.benchmark,
            "division": s.division,
            "accelerators": s.accelerators,
            "global_batch_size": s.global_batch_size,
            "runs": len(s.runs),
            "converged_runs": len(s.converged_runs),
            "olympic_min": s.olympic_min,
            "rcp": s.rcp_verdict,
            "rcp_message": s.rcp_message,
            "scaling_factor": s.scaling_factor,
            "scaling_source": s.scaling_source,
            "score_min": s.score_min,
            "samples_to_converge": s.samples_to_converge,
            "throughput_effective": effective,
            "throughput_steady": s.mean_of("throughput_steady"),
            "throughput_train_only": s.mean_of("throughput_train_only"),
            "throughput_effective_per_acc": s.per_accelerator(effective),
            "data_wait_s": s.mean_of("data_wait_s"),
            "note": s.score_note,
        })
    return rows


def run_rows(sets: Sequence[ResultSet], with_curves: bool = False) -> List[Dict[str, Any]]:
    rows = []
    for s in sets:
        for r in s.runs:
            row = {
                "label": s.label,
                "run": r.name,
                "path": r.path,
                "seed": r.seed,
                "status": r.status,
                "final_accuracy": r.final_accuracy,
                "evals": len(r.evals),
                "time_to_train_min": r.time_to_train_min,
                "samples_to_converge": r.samples_to_converge,
                "samples_source": r.samples_source,
                "throughput_effective": r.throughput_effective,
                "throughput_steady": r.throughput_steady,
                "throughput_train_only": r.throughput_train_only,
                "data_wait_s": r.data_wait_s,
                "data_wait_share": r.data_wait_share,
                "counted": "yes" if r.converged else f"no: {r.failure}",
            }
            if with_curves:
                row["eval_samples_inferred"] = r.eval_samples_inferred
                row["eval_curve"] = [[p.samples, p.accuracy] for p in r.evals]
                row["interval_samples_per_s"] = r.interval_rates
            rows.append(row)
    return rows


def comparison_rows(comparisons: Sequence[Comparison]) -> List[Dict[str, Any]]:
    rows = []
    for c in comparisons:
        row = {"baseline": c.baseline, "candidate": c.candidate, "same_system": c.same_system,
               "confidence": c.confidence}
        for name, ratio in (("time", c.time), ("throughput", c.throughput)):
            row.update({f"{name}_ratio": ratio.value, f"{name}_ci_low": ratio.ci_low,
                        f"{name}_ci_high": ratio.ci_high, f"{name}_verdict": ratio.verdict})
        row["regression"] = c.regression
        row["regression_in"] = " and ".join(c.regression_in)
        rows.append(row)
    return rows


TITLES = {
    "systems": "Systems (score = olympic mean of time to train, minutes, times the RCP scaling factor)",
    "runs": "Runs",
    "comparisons": "Comparisons (time ratio = compared / baseline score, above 1 is slower; "
                   "throughput ratio = compared / baseline effective samples/s, below 1 is slower; "
                   "bootstrap CIs over runs)",
}
COLUMNS = {"systems": SYSTEM_COLUMNS, "runs": RUN_COLUMNS, "comparisons": COMPARISON_COLUMNS}


def _cell(column: Column, value: Any) -> str:
    return "-" if value is None else column.show(value)


def _text_table(title: str, columns: List[Column], rows: List[Dict[str, Any]]) -> str:
    cells = [[c.header for c in columns]] + [[_cell(c, row.get(c.key)) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    numeric = [all(_looks_numeric(line[i]) for line in cells[1:]) and len(cells) > 1
               for i in range(len(columns))]
    out = [title]
    for n, line in enumerate(cells):
        out.append("  ".join(v.rjust(w) if numeric[i] else v.ljust(w)
                             for i, (v, w) in enumerate(zip(line, widths))).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def _looks_numeric(text: str) -> bool:
    return text == "-" or text.replace(",", "").replace(".", "", 1).replace("/", "", 1).lstrip("-").isdigit()


def _markdown_table(title: str, columns: List[Column], rows: List[Dict[str, Any]]) -> str:
    def esc(text: str) -> str:
        return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")

    out = [f"### {title}", "", "| " + " | ".join(esc(c.header) for c in columns) + " |",
           "|" + "|".join("---" for _ in columns) + "|"]
    for row in rows:
        out.append("| " + " | ".join(esc(_cell(c, row.get(c.key))) for c in columns) + " |")
    return "\n".join(out)


def build_tables(sets: Sequence[ResultSet], comparisons: Sequence[Comparison],
                 with_curves: bool = False) -> Dict[str, List[Dict[str, Any]]]:
    return {
        "systems": system_rows(sets),
        "runs": run_rows(sets, with_curves),
        "comparisons": comparison_rows(comparisons),
    }


def _finite(value: Any) -> Any:
    """The value with every NaN or infinity (from odd timestamps) replaced by None, for strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def render(fmt: str, sets: Sequence[ResultSet], comparisons: Sequence[Comparison],
           table: Optional[str] = None, target: float = TARGET_ACCURACY) -> str:
    """The report as text in the given format; `table` limits it to one table (CSV needs one)."""
    if fmt == "json":
        names = [table] if table else list(TABLE_NAMES)
        tables = build_tables(sets, comparisons, with_curves=True)
        doc = {"tool": "bertperf-report", "version": __version__, "target_accuracy": target}
        doc.update({n: _finite(tables[n]) for n in names})
        return json.dumps(doc, indent=2, allow_nan=False) + "\n"
    names = [table] if table else [n for n in TABLE_NAMES if n != "comparisons" or comparisons]
    tables = build_tables(sets, comparisons)
    if fmt == "csv":
        name = table or "systems"
        rows = tables[name]
        keys = list(rows[0].keys()) if rows else [c.key for c in COLUMNS[name]]
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=keys, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
        return buffer.getvalue()
    make = _markdown_table if fmt == "markdown" else _text_table
    parts = [make(TITLES[n], COLUMNS[n], tables[n]) for n in names]
    return "\n\n".join(parts) + "\n"
