#!/usr/bin/env python3
"""Side-by-side speed of bertperf-check and the official mlperf-logging checkers on the
shared MLPerf result corpus, with a verdict cross-check.

Three comparisons, each timed in wall-clock and CPU seconds (best of --repeat):

1. per-log compliance, in-process: every ``result_*.txt`` under every ruleset;
2. whole submission trees, in-process: the official package checker (on a temporary
   copy, as it may write ``scaling.json``) against ``check_package``;
3. command line, one process per log (optional, ``--cli``): what a user waits for.

Usage (from the repository root, with the project's virtual environment):

    .venv/bin/python scripts/bench_checker.py [--repeat 3] [--cli] [--rulesets 2.1.0,5.0.0]

The corpus is ``$BERTPERF_SHARED_DIR/mlperf-results`` (default: ``../shared`` beside the
repository).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RULESETS = ("2.1.0", "3.0.0", "3.1.0", "4.0.0", "4.1.0", "5.0.0")


def corpus_root() -> Path:
    return Path(os.environ.get("BERTPERF_SHARED_DIR", REPO.parent / "shared")) / "mlperf-results"


def timed(fn, repeat):
    best_wall = best_cpu = float("inf")
    result = None
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        result = fn()
        best_wall = min(best_wall, time.perf_counter() - w)
        best_cpu = min(best_cpu, time.process_time() - c)
    return result, best_wall, best_cpu


def official_log(path, ruleset):
    from mlperf_logging.compliance_checker import mlp_compliance as mc
    mc.enqueued_configs.clear()
    try:
        return bool(mc.main(str(path), f"training_{ruleset}/common.yaml",
                            mc.make_checker("training", ruleset, True, False))[0])
    except Exception:
        return False
    finally:
        mc.enqueued_configs.clear()


def official_tree(path, ruleset):
    from mlperf_logging.package_checker import package_checker as pc

    class Grab(logging.Handler):
        ok = False

        def emit(self, record):
            if "PACKAGE CHECKER FOUND NO ERRORS" in record.getMessage():
                Grab.ok = True

    Grab.ok = False
    handler = Grab()
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pc.check_training_package(str(path), "training", ruleset, True, False, False, False,
                                      False, os.devnull)
    except Exception:
        return False
    finally:
        root.removeHandler(handler)
    return Grab.ok


def row(name, n, ours, theirs):
    (_, ow, oc), (_, tw, tc) = ours, theirs
    print(f"{name:<34} {n:>5}  {tw:8.3f} {tc:8.3f}  {ow:8.3f} {oc:8.3f}  {tw / ow:6.1f}x {tc / oc:6.1f}x")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cli", action="store_true", help="also time one process per log")
    ap.add_argument("--rulesets", default=",".join(RULESETS))
    args = ap.parse_args(argv)
    rulesets = args.rulesets.split(",")

    root = corpus_root()
    logs = sorted(root.glob("*/*/results/*/bert/result_*.txt"))
    trees = sorted(p.parent for p in root.glob("*/*/systems"))
    if not logs:
        print(f"no logs under {root}; set BERTPERF_SHARED_DIR", file=sys.stderr)
        return 2

    sys.path.insert(0, str(REPO / "compliance"))
    from bertperf_compliance.check.engine import check_log
    from bertperf_compliance.check.package import check_package
    logging.disable(logging.WARNING)

    print(f"corpus: {len(logs)} logs, {len(trees)} trees, rulesets {', '.join(rulesets)}; "
          f"best of {args.repeat}")
    print(f"{'comparison':<34} {'runs':>5}  {'official':>17}  {'bertperf-check':>17}  {'speed-up':>15}")
    print(f"{'':<34} {'':>5}  {'wall s':>8} {'cpu s':>8}  {'wall s':>8} {'cpu s':>8}  {'wall':>7} {'cpu':>7}")

    pairs = [(p, r) for r in rulesets for p in logs]
    theirs = timed(lambda: [official_log(p, r) for p, r in pairs], args.repeat)
    ours = timed(lambda: [check_log(p, r).passed for p, r in pairs], args.repeat)
    row("per-log compliance (in-process)", len(pairs), ours, theirs)
    mismatch = sum(a != b for a, b in zip(ours[0], theirs[0]))

    with tempfile.TemporaryDirectory() as tmp:
        copies = []
        for n, tree in enumerate(trees):
            dst = Path(tmp) / f"t{n}"
            shutil.copytree(tree, dst)
            for dirpath, dirnames, filenames in os.walk(dst):
                for name in dirnames + filenames:
                    os.chmod(os.path.join(dirpath, name), 0o755)
            copies.append(dst)
        tpairs = [(t, r) for r in rulesets for t in copies]
        logging.disable(logging.NOTSET)
        logging.getLogger().handlers[:] = []
        theirs_t = timed(lambda: [official_tree(t, r) for t, r in tpairs], args.repeat)
        logging.disable(logging.WARNING)
        ours_t = timed(lambda: [check_package(str(t), r).passed for t, r in tpairs], args.repeat)
        row("package check per tree (in-process)", len(tpairs), ours_t, theirs_t)
        mismatch += sum(a != b for a, b in zip(ours_t[0], theirs_t[0]))

    if args.cli:
        py = sys.executable
        ruleset = rulesets[-1]
        with tempfile.TemporaryDirectory() as tmp:
            def official_cli():
                return [subprocess.run([py, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
                                        "--ruleset", ruleset, "--log_output", os.path.join(tmp, "cc.log"),
                                        str(p)], capture_output=True).returncode == 0 for p in logs]

            def ours_cli():
                env = dict(os.environ, PYTHONPATH=str(REPO / "compliance"))
                return [subprocess.run([py, "-m", "bertperf_compliance.check", "--quiet", "--ruleset", ruleset,
                                        str(p)], capture_output=True, env=env).returncode == 0 for p in logs]

            c_theirs = timed(official_cli, 1)
            c_ours = timed(ours_cli, 1)
            # CPU of child processes is not in process_time; compare wall time only.
            (_, ow, _), (_, tw, _) = c_ours, c_theirs
            print(f"{'CLI, one process per log':<34} {len(logs):>5}  {tw:8.3f} {'-':>8}  {ow:8.3f} {'-':>8}  "
                  f"{tw / ow:6.1f}x {'-':>7}")
            mismatch += sum(a != b for a, b in zip(c_ours[0], c_theirs[0]))

    print(f"verdict mismatches: {mismatch}")
    return 0 if mismatch == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
