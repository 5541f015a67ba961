"""Command line of ``bertperf-check``: BERT compliance of logs, directories and submission trees.

    bertperf-check [--ruleset 5.0.0] [--json] [--werror] [--quiet]
                   [--rcp-bypass] [--rcp-bert-train-samples] [--seed-checker-bypass]
                   [--rcp-reference FILE] PATH [PATH ...]

Each PATH is one of

* a log file: the compliance rules of the ruleset;
* a benchmark directory holding ``result_*.txt``: compliance of each run, run
  count, seeds and RCP (seeds and RCP in the closed division only), as the
  official package checker judges one benchmark directory;
* a submission tree (``systems/`` and ``results/``): everything the official
  package checker does for BERT, including the system descriptions;
* a directory holding submission trees (searched two levels deep).

Exit status: 0 when every input passes, 1 when any fails, 2 on a usage error
(unknown option or ruleset, a path that does not exist, an unusable RCP reference).

``--rcp-reference FILE`` replaces the BERT RCP data with reference runs of one's
own (``rcp.read_reference`` describes the file) and checks every benchmark
directory against it, in any division: an olympic mean of the runs'
samples-to-converge significantly below the reference's fails, as in MLPerf;
one significantly above it is a warning. This is how a benchmark without
official RCP data (the mini benchmark) is checked against another
implementation.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from typing import Any, Dict, List, Optional

from .. import __version__
from . import rcp, rules
from .engine import LogResult, check_log
from .package import CheckResult, check_benchmark_dir, check_package

EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
DEFAULT_RULESET = "5.0.0"
RETIRED = ("5.1.0", "6.0.0", "6.1.0")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse exits 2 too; keep one format for all usage errors
        self.print_usage(sys.stderr)
        print(f"bertperf-check: usage error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="bertperf-check",
                description="Check MLPerf BERT logs, result directories and submission trees "
                            "with the official compliance, RCP, seed and package rules.")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="log file, result directory, submission tree, or folder of trees")
    p.add_argument("--ruleset", default=DEFAULT_RULESET,
                   help=f"MLPerf Training ruleset: {', '.join(rules.RULESETS)} (default {DEFAULT_RULESET})")
    p.add_argument("--usage", default="training", choices=["training"],
                   help="accepted for command-line compatibility with the official checker")
    p.add_argument("--json", action="store_true", help="print one JSON document for machines")
    p.add_argument("--werror", action="store_true", help="treat warnings (tolerated duplicates) as errors")
    p.add_argument("--quiet", action="store_true", help="print only failures and the summary")
    p.add_argument("--rcp-bypass", action="store_true",
                   help="accept a failed RCP comparison (it then needs review)")
    p.add_argument("--rcp-bert-train-samples", action="store_true",
                   help="take samples-to-converge from train_samples instead of eval_accuracy epoch_num")
    p.add_argument("--seed-checker-bypass", action="store_true", help="skip the seed check")
    p.add_argument("--rcp-reference", metavar="FILE",
                   help="check convergence against these reference runs instead of the BERT RCPs "
                        "(any division; slower than the reference is a warning)")
    p.add_argument("--version", action="version", version=f"bertperf-check {__version__}")
    return p


def _is_tree(path: str) -> bool:
    return os.path.isdir(os.path.join(path, "systems")) and os.path.isdir(os.path.join(path, "results"))


def _find_trees(path: str) -> List[str]:
    found = []
    for depth in ("*", "*/*"):
        found += [p for p in sorted(glob.glob(os.path.join(path, depth))) if os.path.isdir(p) and _is_tree(p)]
    return found


def _division_of(logs: List[LogResult]) -> bool:
    # A bare result directory has no system description; the runs say which division.
    divisions = [log.division for log in logs if log.division is not None]
    return (divisions[0] if divisions else "closed") == "closed"


def _check_path(path: str, args) -> Dict[str, Any]:
    opts = dict(werror=args.werror, rcp_bypass=args.rcp_bypass,
                rcp_train_samples=args.rcp_bert_train_samples, seed_bypass=args.seed_checker_bypass,
                rcp_reference=args.rcp_record)
    if os.path.isdir(path):
        if _is_tree(path):
            res = check_package(path, args.ruleset, **opts)
            return {"kind": "tree", "path": path, "result": res}
        if glob.glob(os.path.join(path, "result_*.txt")):
            probe = [check_log(f, args.ruleset) for f in sorted(glob.glob(os.path.join(path, "result_*.txt")))[:1]]
            res = check_benchmark_dir(path, args.ruleset, _division_of(probe), **opts)
            return {"kind": "directory", "path": path, "result": res}
        trees = _find_trees(path)
        if trees:
            children = [check_package(t, args.ruleset, **opts) for t in trees]
            res = CheckResult(path, all(c.passed for c in children), children=children,
                              official_crash=any(c.official_crash for c in children))
            return {"kind": "trees", "path": path, "result": res}
        res = CheckResult(path, False)
        from .engine import Finding
        res.findings.append(Finding("error", "no result_*.txt files, submission tree or log here",
                                    path, f"{args.ruleset}/input:empty-directory",
                                    fix="pass a log file, a results/<system>/bert directory or a "
                                        "submission tree"))
        return {"kind": "directory", "path": path, "result": res}
    return {"kind": "log", "path": path, "result": check_log(path, args.ruleset, werror=args.werror)}


def _verdict(item) -> bool:
    return bool(item["result"].passed)


def _grouped(findings, quiet: bool):
    """Identical findings from several runs (same rule, message and fix) printed once."""
    groups: Dict[Any, List[Any]] = {}
    for f in findings:
        if quiet and f.severity != "error":
            continue
        groups.setdefault((f.severity, f.rule, f.key, f.message, f.fix, f.line), []).append(f)
    for members in groups.values():
        first = members[0]
        text = first.render()
        if len(members) > 1:
            names = [os.path.basename(m.file) for m in members]
            shown = ", ".join(names[:10]) + (" ..." if len(names) > 10 else "")
            text += f"\n    also in {len(members) - 1} more file(s); all: {shown}"
        yield text


def _print_result(res, args, out, indent="  ") -> None:
    if isinstance(res, LogResult):
        for text in _grouped(res.findings, args.quiet):
            print(indent + text.replace("\n", "\n" + indent), file=out)
        return
    for text in _grouped(res.all_findings(), args.quiet):
        print(indent + text.replace("\n", "\n" + indent), file=out)
    for sub in _walk(res):
        if sub.logs:
            n_ok = sum(log.passed for log in sub.logs)
            line = f"{indent}{sub.name}: {n_ok} of {len(sub.logs)} runs comply"
            if sub.rcp is not None:
                r = sub.rcp
                line += f"; RCP {'pass' if r.passed else 'FAIL'} ({r.message}"
                if args.rcp_record is not None and r.submission_mean is not None:
                    line += (f"; olympic mean {r.submission_mean:,.0f} samples, reference mean "
                             f"{r.record.mean:,.0f}, {r.detail}")
                elif r.record is not None and r.submission_mean is not None:
                    line += (f"; olympic mean {r.submission_mean:.1f} samples, minimum "
                             f"{r.record.min_mean:.1f}, reference mean {r.record.mean:.1f}")
                    if r.passed and r.norm_factor > 1:
                        line += f"; score scaling factor {r.norm_factor:.4f}"
                line += ")"
            seeds = [c for c in sub.children if c.name == "seeds"]
            if seeds:
                line += f"; seeds {'pass' if seeds[0].passed else 'FAIL'}"
            print(line, file=out)


def _print_text(items, args, out) -> None:
    n_pass = 0
    for item in items:
        res = item["result"]
        n_pass += bool(res.passed)
        print(f"{'PASS' if res.passed else 'FAIL'} {item['path']} ({item['kind']}, ruleset {args.ruleset})",
              file=out)
        if item["kind"] == "trees":
            for child in res.children:
                print(f"  {'PASS' if child.passed else 'FAIL'} {child.name} (tree)", file=out)
                _print_result(child, args, out, "    ")
        else:
            _print_result(res, args, out)
    print(f"{n_pass} of {len(items)} input(s) passed", file=out)


def _walk(res: CheckResult):
    yield res
    for child in res.children:
        yield from _walk(child)


def _strict(obj):
    """Strict JSON: non-finite numbers become strings, unknown objects their repr."""
    if isinstance(obj, dict):
        return {str(k): _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    if isinstance(obj, float) and (obj != obj or obj in (float("inf"), float("-inf"))):
        return repr(obj)
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return repr(obj)


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    if args.ruleset not in rules.RULESETS:
        why = (" BERT was retired after ruleset 5.0.0." if args.ruleset in RETIRED else "")
        print(f"bertperf-check: usage error: unknown ruleset {args.ruleset!r}; choose one of "
              f"{', '.join(rules.RULESETS)}.{why}", file=sys.stderr)
        return EXIT_USAGE
    missing = [p for p in args.paths if not os.path.exists(p)]
    if missing:
        print(f"bertperf-check: usage error: no such file or directory: {', '.join(missing)}",
              file=sys.stderr)
        return EXIT_USAGE
    args.rcp_record = None
    if args.rcp_reference:
        try:
            args.rcp_record = rcp.read_reference(args.rcp_reference)
        except rcp.RcpReferenceError as exc:
            print(f"bertperf-check: usage error: {exc}", file=sys.stderr)
            return EXIT_USAGE

    items = []
    for path in args.paths:
        try:
            items.append(_check_path(path, args))
        except Exception as exc:  # a bug of ours must still give a verdict, not a traceback
            from .engine import Finding
            res = CheckResult(path, False)
            res.findings.append(Finding("error", f"internal error while checking: {type(exc).__name__}: {exc}",
                                        path, f"{args.ruleset}/internal"))
            items.append({"kind": "error", "path": path, "result": res})

    passed = all(_verdict(i) for i in items)
    if args.json:
        doc = {"tool": "bertperf-check", "version": __version__, "ruleset": args.ruleset,
               "passed": passed,
               "inputs": [{"kind": i["kind"], "path": i["path"], "passed": i["result"].passed,
                           "result": i["result"].to_dict()} for i in items]}
        json.dump(_strict(doc), sys.stdout, indent=1, allow_nan=False)
        sys.stdout.write("\n")
    else:
        _print_text(items, args, sys.stdout)
    return EXIT_PASS if passed else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
