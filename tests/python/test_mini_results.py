"""The committed mini result sets (results/mini_cpu_2c in fp32, results/mini_cpu_2c_bf16 on cpu-bf16 and
results/mini_cpu_2c_fp8 on its FP8 twin, written by scripts/mini.sh) judged by the official tools: every log by the
official compliance checker, the tree by the official package checker, its score by the official result summarizer;
and its convergence against the committed PyTorch reference runs of the same recipe in fp32 (benchmarks/bert/mini/reference/pytorch_cpu_2c.json)."""

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

SETS = ["mini_cpu_2c", "mini_cpu_2c_bf16", "mini_cpu_2c_fp8"]
REFERENCE = REPO / "benchmarks" / "bert" / "mini" / "reference" / "pytorch_cpu_2c.json"
BENCHMARK = json.loads((REPO / "benchmarks" / "bert" / "mini" / "benchmark.json").read_text())


def logs_of(name):
    return sorted((REPO / "results" / name / "results").glob("*/bert/result_*.txt"))


def committed(name):
    """The set's tree, or a skip where it is not committed."""
    if not logs_of(name):
        pytest.skip(f"no committed result set results/{name}")
    return REPO / "results" / name


@pytest.mark.parametrize("name", SETS)
def test_the_set_is_a_full_mlperf_set_that_reached_the_target(name):
    committed(name)
    logs = logs_of(name)
    assert len(logs) == BENCHMARK["runs"]
    runs = [read_run(str(p), BENCHMARK["target_accuracy"]) for p in logs]
    assert sum(r.converged for r in runs) >= BENCHMARK["runs"] - 1
    assert len({r.seed for r in runs}) == len(runs)


@pytest.mark.parametrize("log", [log for name in SETS for log in logs_of(name)],
                         ids=lambda p: f"{p.parents[3].name}/{p.name}")
def test_each_log_passes_the_official_checker_and_ours(log):
    assert official_log_verdict(log, "5.0.0")
    assert check_log(str(log), "5.0.0").passed


@pytest.mark.parametrize("name", SETS)
def test_the_tree_passes_the_official_package_checker_and_ours(name, tmp_path):
    copy = copy_tree(committed(name), tmp_path / name)
    assert official_package_verdict(copy, "5.0.0")
    assert check_package(str(copy), "5.0.0").passed


@pytest.mark.parametrize("name", SETS)
def test_score_equals_the_official_summarizer(name, tmp_path):
    pytest.importorskip("pandas")
    tree = committed(name)
    work = tmp_path / "work"
    copy_tree(tree, work / "orgs" / "bertperf")
    proc = subprocess.run([sys.executable, "-m", "mlperf_logging.result_summarizer", str(work / "orgs") + "/{*}",
                           "training", "5.0.0", "--csv", str(work / "summary.csv")],
                          cwd=work, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = json.loads((work / "summary_detailed.json").read_text())
    (ours,) = find_result_sets([str(tree)], BENCHMARK["target_accuracy"])
    assert ours.score_min == pytest.approx(row["bert:time_to_train"], rel=0, abs=1e-9)


@pytest.mark.parametrize("name", SETS)
def test_convergence_is_within_the_pytorch_reference(name):
    committed(name)
    record = rcp.read_reference(str(REFERENCE))
    result = rcp.check_directory(str(logs_of(name)[0].parent), reference=record)
    assert result.passed, (result.message, result.detail)
    reference = json.loads(REFERENCE.read_text())
    assert reference["target_accuracy"] == BENCHMARK["target_accuracy"]
    assert len(reference["runs"]) == BENCHMARK["runs"]
