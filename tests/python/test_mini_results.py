"""The committed mini result set (results/mini_cpu_2c, written by scripts/mini.sh) judged by the
official tools: every log by the official compliance checker, the tree by the official package
checker, its score by the official result summarizer; and its convergence against the committed
PyTorch reference runs of the same recipe (benchmarks/bert/mini/reference/pytorch_cpu_2c.json)."""

import json
import subprocess
import sys

import pytest

from bertperf_paths import REPO
from compliance_support import copy_tree, official_log_verdict, official_package_verdict
from bertperf_compliance.check import rcp
from bertperf_compliance.check.engine import check_log
from bertperf_compliance.check.package import check_package
from bertperf_compliance.report.runs import read_run
from bertperf_compliance.report.systems import find_result_sets

TREE = REPO / "results" / "mini_cpu_2c"
REFERENCE = REPO / "benchmarks" / "bert" / "mini" / "reference" / "pytorch_cpu_2c.json"
BENCHMARK = json.loads((REPO / "benchmarks" / "bert" / "mini" / "benchmark.json").read_text())
LOGS = sorted((TREE / "results").glob("*/bert/result_*.txt"))

pytestmark = pytest.mark.skipif(not LOGS, reason="no committed mini result set")


def test_the_set_is_a_full_mlperf_set_that_reached_the_target():
    assert len(LOGS) == BENCHMARK["runs"]
    runs = [read_run(str(p), BENCHMARK["target_accuracy"]) for p in LOGS]
    assert sum(r.converged for r in runs) >= BENCHMARK["runs"] - 1
    assert len({r.seed for r in runs}) == len(runs)


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.name)
def test_each_log_passes_the_official_checker_and_ours(log):
    assert official_log_verdict(log, "5.0.0")
    assert check_log(str(log), "5.0.0").passed


def test_the_tree_passes_the_official_package_checker_and_ours(tmp_path):
    copy = copy_tree(TREE, tmp_path / "mini_cpu_2c")
    assert official_package_verdict(copy, "5.0.0")
    assert check_package(str(copy), "5.0.0").passed


def test_score_equals_the_official_summarizer(tmp_path):
    pytest.importorskip("pandas")
    work = tmp_path / "work"
    copy_tree(TREE, work / "orgs" / "bertperf")
    proc = subprocess.run([sys.executable, "-m", "mlperf_logging.result_summarizer", str(work / "orgs") + "/{*}",
                           "training", "5.0.0", "--csv", str(work / "summary.csv")],
                          cwd=work, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = json.loads((work / "summary_detailed.json").read_text())
    (ours,) = find_result_sets([str(TREE)], BENCHMARK["target_accuracy"])
    assert ours.score_min == pytest.approx(row["bert:time_to_train"], rel=0, abs=1e-9)


def test_convergence_is_within_the_pytorch_reference():
    record = rcp.read_reference(str(REFERENCE))
    result = rcp.check_directory(str(LOGS[0].parent), reference=record)
    assert result.passed, (result.message, result.detail)
    reference = json.loads(REFERENCE.read_text())
    assert reference["target_accuracy"] == BENCHMARK["target_accuracy"]
    assert len(reference["runs"]) == BENCHMARK["runs"]
