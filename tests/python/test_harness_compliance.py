"""Our harness's logs against the official MLPerf compliance checker (rulesets 5.0.0 and 2.1.0).

Scripted runs: tests/cpp/test_harness_timed_run.cpp drives the timed run with scripted training
trajectories and leaves its logs in $BERTPERF_HARNESS_LOG_DIR. A run that reaches the target must
pass; a run aborted at the sample limit or on a non-finite loss must fail on the accuracy rule and
on nothing else.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bertperf_paths import find_binary  # noqa: E402

TIMED_RUN_TEST = find_binary("test_harness_timed_run")
RULESETS = ["5.0.0", "2.1.0"]
ACCURACY_RULE = "Failed checks for eval_accuracy : (v['value'] >= 0.720) and v['value'] < 1.0"


def official_check(log, ruleset, tmp_path):
    """(passed, messages) from the official checker's command line."""
    proc = subprocess.run(
        [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training", "--ruleset", ruleset,
         "--log_output", str(tmp_path / "checker.log"), str(log)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    output = proc.stdout + proc.stderr
    passed = proc.returncode == 0 and "INFO - SUCCESS" in output
    # One WARNING block holds every message, separated by lines of dashes.
    block = re.search(r"WARNING - (.*?)(?:\nERROR - FAILED|\nINFO - SUCCESS|\Z)", output, re.S)
    messages = [m.strip() for m in block.group(1).split("-" * 30)] if block else []
    return passed, [m for m in messages if m], output


@pytest.fixture(scope="module")
def scripted_logs(tmp_path_factory):
    if TIMED_RUN_TEST is None:
        pytest.skip("test_harness_timed_run not built")
    out = tmp_path_factory.mktemp("scripted_logs")
    subprocess.run([str(TIMED_RUN_TEST), "--gtest_brief=1"], check=True, capture_output=True, timeout=300,
                   env=dict(os.environ, BERTPERF_HARNESS_LOG_DIR=str(out)))
    return out


@pytest.mark.parametrize("ruleset", RULESETS)
@pytest.mark.parametrize("name", ["success", "mini"])
def test_converged_run_passes(scripted_logs, ruleset, name, tmp_path):
    passed, messages, output = official_check(scripted_logs / f"{name}.txt", ruleset, tmp_path)
    assert passed, output
    assert messages == [], output


@pytest.mark.parametrize("ruleset", RULESETS)
@pytest.mark.parametrize("name", ["aborted", "nan"])
def test_aborted_run_fails_only_on_accuracy(scripted_logs, ruleset, name, tmp_path):
    log = scripted_logs / f"{name}.txt"
    passed, messages, output = official_check(log, ruleset, tmp_path)
    assert not passed, output
    assert messages == [ACCURACY_RULE], output
    assert '"status": "aborted"' in log.read_text().splitlines()[-1]


def test_seeds_differ_between_runs(scripted_logs):
    """The seed checker rejects two runs logging the same seed from the same source line."""
    import json
    seeds = []
    for name in ["seed_a", "seed_b"]:
        records = [json.loads(line.split(":::MLLOG ", 1)[1]) for line in (scripted_logs / f"{name}.txt").open()]
        found = [(r["metadata"]["file"], r["metadata"]["lineno"], r["value"]) for r in records if r["key"] == "seed"]
        assert len(found) == 1
        seeds.append(found[0])
    assert seeds[0][:2] == seeds[1][:2]  # same source line ...
    assert seeds[0][2] != seeds[1][2]    # ... different values
