"""Our harness's logs against the official MLPerf compliance checker (rulesets 5.0.0 and 2.1.0).

Scripted runs: tests/cpp/test_harness_timed_run.cpp drives the timed run with scripted training
trajectories and leaves its logs in $BERTPERF_HARNESS_LOG_DIR. Real runs: `bertperf run-once` and
`bertperf run` train a tiny 24-layer BERT (so the 398 tensor names of BERT-large are logged) on
generated data whose masked labels are one token 90% of the time, so accuracy reaches 0.9 (and
never 1.0) within a few steps. In both, a run that reaches the target must pass; a run aborted at
the sample limit or on a non-finite loss must fail on the accuracy rule and on nothing else.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bertperf_paths import REPO, find_binary  # noqa: E402
from tiny_config import write_tiny_config  # noqa: E402

TIMED_RUN_TEST = find_binary("test_harness_timed_run")
BERTPERF = find_binary("bertperf")
SYSTEM_FILE = REPO / "systems" / "cpu_2c.json"
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
@pytest.mark.parametrize("name", ["aborted", "nan", "nan_first"])
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


# ---- real runs on tiny generated data ------------------------------------------------------------

def write_tiny_shard(path, count, seed, other_tenths=1, seq_len=32, predictions=5, vocab=32):
    """Fixed-length MLPerf layout. Masked labels: token 5, except `other_tenths` of every ten labels
    (other tokens, unpredictable because the input there is [MASK]), so the best accuracy is
    1 - other_tenths / 10."""
    import h5py
    import numpy as np
    rng = np.random.default_rng(seed)
    ids = np.zeros((count, seq_len), np.int16)
    mask = np.zeros((count, seq_len), np.int8)
    segments = np.zeros((count, seq_len), np.int8)
    positions = np.zeros((count, predictions), np.int16)
    labels = np.zeros((count, predictions), np.int16)
    k = 0
    for i in range(count):
        length = int(rng.integers(seq_len // 2, seq_len + 1))
        split = int(rng.integers(2, length - 2))
        tokens = rng.integers(4, vocab, length).astype(np.int16)
        tokens[0], tokens[split], tokens[length - 1] = 1, 2, 2  # [CLS] a [SEP] b [SEP]
        candidates = [p for p in range(1, length - 1) if p != split]
        for j, p in enumerate(sorted(rng.choice(candidates, predictions, replace=False))):
            labels[i, j] = 6 + k % 7 if k % 10 < other_tenths else 5
            positions[i, j] = p
            tokens[p] = 3  # [MASK]
            k += 1
        ids[i, :length] = tokens
        mask[i, :length] = 1
        segments[i, split + 1:length] = 1
    with h5py.File(path, "w") as f:
        f["input_ids"], f["input_mask"], f["segment_ids"] = ids, mask, segments
        f["masked_lm_positions"], f["masked_lm_ids"] = positions, labels
        f["next_sentence_labels"] = rng.integers(0, 2, count).astype(np.int8)


def write_tiny_benchmark(directory, target=0.72, max_samples=1600, runs=2, other_tenths=1):
    directory.mkdir(parents=True, exist_ok=True)
    write_tiny_shard(directory / "train.hdf5", 512, seed=1, other_tenths=other_tenths)
    write_tiny_shard(directory / "eval.hdf5", 64, seed=2, other_tenths=other_tenths)
    (directory / "benchmark.json").write_text(json.dumps({
        "name": "tiny", "submission_benchmark": "bert", "target_accuracy": target, "eval_samples": 64,
        "eval_interval": {"scale": 1.0, "per_global_batch_sample": 0.0, "offset": 128, "round_down_to": 1},
        "runs": runs}))
    return write_tiny_config(directory / "config.json", bert_config__num_hidden_layers=24,
                             data__train_files=["train.hdf5"], data__eval_file="eval.hdf5", max_samples=max_samples)


needs_bertperf = pytest.mark.skipif(BERTPERF is None, reason="bertperf not built")


def run_once(config, log, *extra, timeout=300):
    return subprocess.run([str(BERTPERF), "run-once", "--config", str(config), "--log", str(log),
                           "--system-file", str(SYSTEM_FILE), *extra],
                          capture_output=True, text=True, timeout=timeout)


@needs_bertperf
def test_real_run_reaches_target_and_passes(tmp_path):
    config = write_tiny_benchmark(tmp_path / "bench")
    log = tmp_path / "result_0.txt"
    proc = run_once(config, log)
    assert proc.returncode == 0, proc.stderr
    lines = log.read_text().splitlines()
    assert all(line.startswith(":::MLLOG {") for line in lines)  # the progress line stays on stderr
    assert "[bertperf] samples" in proc.stderr
    assert '"status": "success"' in lines[-1]
    # The RCP checker finds these records by substring: no other line may contain the words.
    for line in lines:
        key = json.loads(line.split(":::MLLOG ", 1)[1])["key"]
        for word in ["eval_accuracy", "global_batch_size", "train_samples", "submission_benchmark"]:
            assert word not in line or key == word, line
    for ruleset in RULESETS:
        passed, messages, output = official_check(log, ruleset, tmp_path)
        assert passed and not messages, output
    # Each eval interval's time waiting for training batches beside its throughput, summed per run by the reporter.
    from bertperf_compliance.report.runs import read_run
    records = [json.loads(line.split(":::MLLOG ", 1)[1]) for line in lines]
    waits = [r["value"]["data_wait_s"] for r in records if r["key"] == "tracked_stats"]
    assert waits and all(w >= 0 for w in waits)
    run = read_run(str(log))
    assert run.data_wait_s == pytest.approx(sum(waits))
    assert 0 <= run.data_wait_share < 1


@needs_bertperf
def test_real_run_aborted_at_max_samples_fails_only_on_accuracy(tmp_path):
    # At most 0.6 accuracy: short of our target and of the rules' 0.720.
    config = write_tiny_benchmark(tmp_path / "bench", target=0.95, max_samples=256, other_tenths=4)
    log = tmp_path / "result_0.txt"
    proc = run_once(config, log, "--no-progress")
    assert proc.returncode == 3, proc.stderr
    assert '"status": "aborted"' in log.read_text().splitlines()[-1]
    assert "[bertperf] samples" not in proc.stderr
    for ruleset in RULESETS:
        passed, messages, output = official_check(log, ruleset, tmp_path)
        assert not passed, output
        assert messages == [ACCURACY_RULE], output


def diverging_benchmark(directory, record_slots):
    """The tiny benchmark at a learning rate of 1e6 (LAMB's trust ratio makes each update about 1e6 times the
    weights, so they overflow within a few steps), its host reading the step records every `record_slots` steps; at
    most 0.6 accuracy, so the eval where it stops is short of the target."""
    config = write_tiny_benchmark(directory, target=0.95, other_tenths=4)
    data = json.loads(config.read_text())
    data["lamb"]["learning_rate"] = 1e6
    data["backend"]["record_slots"] = record_slots
    config.write_text(json.dumps(data))
    return config


@needs_bertperf
def test_real_run_diverging_between_reads_logs_as_reading_every_step(tmp_path):
    """A step that is not finite, found by the host up to 16 steps later (harness/train_step.h), ends the run with
    the MLPerf log of a host that read every step: the same records in the same order with the same values (the
    samples where it stopped, the eval there, the abort), times aside; and the log fails only on accuracy."""
    records = {}
    for slots in (1, 16):
        log = tmp_path / f"result_{slots}.txt"
        proc = run_once(diverging_benchmark(tmp_path / f"bench_{slots}", slots), log, "--no-progress", "--seed", "7")
        assert proc.returncode == 3, proc.stderr
        lines = log.read_text().splitlines()
        assert '"status": "aborted"' in lines[-1]
        parsed = [json.loads(line.split(":::MLLOG ", 1)[1]) for line in lines]
        records[slots] = [(r["key"], r["value"], r["metadata"].get("epoch_num"), r["metadata"].get("status"))
                          for r in parsed if r["key"] not in ("tracked_stats", "bertperf_config")]
        for ruleset in RULESETS:
            passed, messages, output = official_check(log, ruleset, tmp_path)
            assert not passed, output
            assert messages == [ACCURACY_RULE], output
    stops = [r for r in records[16] if r[0] == "train_samples"]
    # Before the first eval point (128 samples, 16 steps of 8): the host reading every 16 steps launched steps past it.
    assert stops and 0 < stops[0][1] < 120, "the run must diverge early in the first ring for this test to mean much"
    assert records[16] == records[1]


@needs_bertperf
def test_bad_config_is_one_line_and_no_log(tmp_path):
    config = write_tiny_benchmark(tmp_path / "bench")
    data = json.loads(config.read_text())
    data["lamb"]["beta_2"] = data["lamb"].pop("beta2")
    config.write_text(json.dumps(data))
    log = tmp_path / "result_0.txt"
    proc = run_once(config, log)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "config.json: lamb: missing field 'beta2'" in proc.stderr
    assert list(tmp_path.glob("*result_0*")) == []


def wait_for(predicate, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@needs_bertperf
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_leaves_no_result_file(tmp_path, sig):
    # Unreachable target and a large limit: the run is still training when the signal comes.
    config = write_tiny_benchmark(tmp_path / "bench", target=0.95, max_samples=10**7)
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen([str(BERTPERF), "run-once", "--config", str(config), "--log", str(out / "result_0.txt"),
                             "--system-file", str(SYSTEM_FILE), "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        temp = lambda: [p for p in out.iterdir() if ".tmp." in p.name]  # noqa: E731
        assert wait_for(lambda: temp() and "run_start" in temp()[0].read_text()), "no temporary log appeared"
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == -sig
    assert list(out.iterdir()) == []


@needs_bertperf
def test_run_builds_a_tree_the_package_checker_accepts(tmp_path):
    """Ten runs into an MLPerf tree; the official package checker (compliance of each file, seed
    checker, system description) accepts it. RCP is bypassed: there is no RCP for this batch size."""
    config = write_tiny_benchmark(tmp_path / "bench", runs=10)
    root = tmp_path / "tree"
    proc = subprocess.run([str(BERTPERF), "run", "--config", str(config), "--out", str(root), "--system-file",
                           str(SYSTEM_FILE), "--no-progress"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    results = sorted(p.name for p in (root / "results" / "cpu_2c" / "bert").iterdir())
    assert results == sorted(f"result_{i}.txt" for i in range(10))
    # The system description as given, with the software the runs logged (tests/python/test_package.py).
    written = json.loads((root / "systems" / "cpu_2c.json").read_text())
    given = json.loads(SYSTEM_FILE.read_text())
    assert written.pop("other_software_stack")["openblas_version"]
    given.pop("other_software_stack")
    assert written == given
    assert proc.stdout.count("success") == 10
    for ruleset in RULESETS:
        check = subprocess.run([sys.executable, "-m", "mlperf_logging.package_checker", str(root), "training",
                                ruleset, "--rcp-bypass", "--log_output", str(tmp_path / "package.log")],
                               capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert "PACKAGE CHECKER FOUND NO ERRORS, SUCCESS" in check.stdout + check.stderr, check.stdout + check.stderr


@needs_bertperf
def test_run_refuses_to_overwrite_and_resumes(tmp_path):
    config = write_tiny_benchmark(tmp_path / "bench", runs=2)
    root = tmp_path / "tree"
    args = [str(BERTPERF), "run", "--config", str(config), "--out", str(root), "--system-file", str(SYSTEM_FILE),
            "--no-progress"]
    assert subprocess.run(args + ["--runs", "1"], capture_output=True, timeout=300).returncode == 0
    first = (root / "results/cpu_2c/bert/result_0.txt").read_text()
    again = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "exists already" in again.stderr
    stale = root / "results/cpu_2c/bert/.result_1.txt.tmp.99999999"  # left by a killed run
    stale.write_text(":::MLLOG partial")
    resumed = subprocess.run(args + ["--resume"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert (root / "results/cpu_2c/bert/result_0.txt").read_text() == first
    assert (root / "results/cpu_2c/bert/result_1.txt").exists()
    assert not stale.exists()


@needs_bertperf
@pytest.mark.skipif(not any((Path(d) / "mpirun").exists() for d in os.environ.get("PATH", "").split(":")),
                    reason="mpirun not installed")
def test_two_rank_run_logs_once_and_passes(tmp_path):
    """`run` launches a 2-rank config through mpirun; only rank 0 logs, so every key appears once."""
    config = write_tiny_benchmark(tmp_path / "bench")
    data = json.loads(config.read_text())
    data["batch"].update(ranks=2, local_batch_size=4)
    config.write_text(json.dumps(data))
    root = tmp_path / "tree"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    proc = subprocess.run([str(BERTPERF), "run", "--config", str(config), "--out", str(root), "--runs", "1",
                           "--system-file", str(SYSTEM_FILE), "--no-progress", "--mpirun-args", "--oversubscribe"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    log = root / "results/cpu_2c/bert/result_0.txt"
    keys = [json.loads(line.split(":::MLLOG ", 1)[1])["key"] for line in log.read_text().splitlines()]
    for key in ["cache_clear", "init_start", "seed", "global_batch_size", "init_stop", "run_start", "run_stop"]:
        assert keys.count(key) == 1, key
    assert keys.count("weights_initialization") == 398
    for ruleset in RULESETS:
        passed, messages, output = official_check(log, ruleset, tmp_path)
        assert passed and not messages, output


@needs_bertperf
def test_run_interrupted_stops_and_leaves_no_partial_result(tmp_path):
    config = write_tiny_benchmark(tmp_path / "bench", target=0.95, max_samples=10**7, runs=3)
    root = tmp_path / "tree"
    proc = subprocess.Popen([str(BERTPERF), "run", "--config", str(config), "--out", str(root), "--system-file",
                             str(SYSTEM_FILE), "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    results = root / "results/cpu_2c/bert"
    try:
        assert wait_for(lambda: results.is_dir() and any(".tmp." in p.name for p in results.iterdir()))
        proc.send_signal(signal.SIGTERM)  # to the parent only: it forwards to the run in progress
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    assert list(results.iterdir()) == []
    assert [p.name for p in (root / "systems").iterdir()] == ["cpu_2c.json"]
