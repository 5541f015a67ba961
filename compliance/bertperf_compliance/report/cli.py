"""Command line of ``bertperf-report``: result trees in, tables and plots out.

Exit status: 0 on success; 1 with --fail-on-regression when a regression was
flagged; 2 for bad input (a missing tree, a malformed log, bad options), which
is reported as one line on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from . import ReportInputError
from .compare import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, DEFAULT_SEED, compare_all
from .render import TABLE_NAMES, render
from .runs import TARGET_ACCURACY
from .systems import find_result_sets
from ..check.rules import RULESETS

PROG = "bertperf-report"


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # One line, like every other input error of this tool.
        self.exit(2, f"{PROG}: error: {message} (see {PROG} --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="Score MLPerf BERT result trees the way the official result summarizer does, "
                    "and report throughput, comparisons with confidence intervals, tables and plots.",
    )
    p.add_argument("trees", nargs="+", metavar="TREE",
                   help="a result tree: <org>/results/<system>/bert/, a submission root <org>/, "
                        "or any directory above them")
    p.add_argument("--format", choices=("table", "markdown", "csv", "json"), default="table",
                   help="output format (default: table; csv writes one table, see --table)")
    p.add_argument("--table", choices=TABLE_NAMES,
                   help="only this table (default: all; for csv: systems)")
    p.add_argument("--output", "-o", metavar="FILE", help="write the report here instead of stdout")
    p.add_argument("--plots", metavar="DIR", help="also write PNG plots into DIR")
    p.add_argument("--baseline", metavar="SET", default="1",
                   help="the set the others are compared with: its position in the systems table "
                        "(1 = first row, the default) or its label")
    p.add_argument("--ruleset", choices=RULESETS, metavar="VERSION",
                   help="drop runs whose log fails this ruleset's compliance check, as the official "
                        f"result summarizer does, and say why ({', '.join(RULESETS)}; default: no check)")
    p.add_argument("--target", type=float, default=TARGET_ACCURACY,
                   help=f"eval accuracy a run must reach (default {TARGET_ACCURACY})")
    p.add_argument("--confidence", type=float, default=DEFAULT_CONFIDENCE,
                   help=f"confidence level of the ratio intervals (default {DEFAULT_CONFIDENCE})")
    p.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES,
                   help=f"bootstrap resamples (default {DEFAULT_RESAMPLES})")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED,
                   help=f"bootstrap seed (default {DEFAULT_SEED})")
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit with status 1 when a system is slower than its earlier result beyond noise")
    return p


def _baseline_index(choice: str, labels: List[str]) -> int:
    if choice.isdigit() and 1 <= int(choice) <= len(labels):
        return int(choice) - 1
    if choice in labels:
        return labels.index(choice)
    raise ReportInputError(f"--baseline {choice!r}: not a set number (1..{len(labels)}) "
                           f"nor a label ({', '.join(labels)})")


def run(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    if not 0.0 < args.confidence < 1.0:
        raise ReportInputError(f"--confidence {args.confidence}: must lie strictly between 0 and 1")
    if args.resamples < 100:
        raise ReportInputError(f"--resamples {args.resamples}: use at least 100")
    sets = find_result_sets(args.trees, args.target, args.ruleset)
    baseline = _baseline_index(args.baseline, [s.label for s in sets])
    comparisons = compare_all(sets, baseline, args.seed, args.resamples, args.confidence)
    text = render(args.format, sets, comparisons, args.table, args.target)
    # Plots first: a plot directory that cannot be written fails before any report is printed.
    if args.plots:
        from .plots import write_plots  # matplotlib is slow to import; only when asked
        for path in write_plots(sets, args.plots, args.target):
            print(f"{PROG}: wrote {path}", file=sys.stderr)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            raise ReportInputError(f"{args.output}: cannot write: {exc.strerror or exc}") from None
    else:
        sys.stdout.write(text)
    if args.fail_on_regression and any(c.regression for c in comparisons):
        return 1
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    try:
        return run(argv)
    except ReportInputError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `bertperf-report ... | head` is normal use, not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
