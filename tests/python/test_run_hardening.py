"""`bertperf run` and `run-once` under faults: a full disk (a file size limit in the child), an
incomplete result file on --resume, two runs on one tree, the parent killed outright, SIGHUP, eval
sets that are empty or too small, the run length of packed data, packed shards under either setting of
"packed", and reproducible checkpoint bytes. Each run trains the tiny 24-layer BERT of test_harness_compliance.py on generated data, in
seconds."""
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_harness_compliance import (BERTPERF, SYSTEM_FILE, needs_bertperf, run_once, wait_for,  # noqa: E402
                                     write_tiny_benchmark, write_tiny_shard)
from bertperf_paths import REPO  # noqa: E402

pytestmark = needs_bertperf


def run_args(config, root, *extra):
    return [str(BERTPERF), "run", "--config", str(config), "--out", str(root), "--system-file", str(SYSTEM_FILE),
            "--no-progress", *extra]


def limit_file_size(size):
    """preexec_fn: files may grow to `size` bytes; writes past it fail with EFBIG (SIGXFSZ ignored,
    as a full disk fails them with ENOSPC), in this child and its children."""
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    return apply


def one_line(text):
    return text.strip() != "" and text.strip().count("\n") == 0


def alive(pid):
    """True while `pid` runs (a zombie waiting for its reaper counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def temp_logs(directory):
    return [p for p in directory.iterdir() if ".tmp." in p.name] if directory.is_dir() else []


# ---- a full disk --------------------------------------------------------------------------------

def test_run_once_on_a_full_disk_writes_no_result(tmp_path):
    config = write_tiny_benchmark(tmp_path / "bench")
    out = tmp_path / "out"
    out.mkdir()
    # 16 KiB: the log's 398 weights_initialization lines alone are larger.
    proc = subprocess.run([str(BERTPERF), "run-once", "--config", str(config), "--log", str(out / "result_0.txt"),
                           "--system-file", str(SYSTEM_FILE), "--no-progress"],
                          capture_output=True, text=True, timeout=300, preexec_fn=limit_file_size(16384))
    assert proc.returncode == 2, proc.stderr
    assert one_line(proc.stderr), proc.stderr
    assert f"{out / 'result_0.txt'}: cannot write the log file" in proc.stderr, proc.stderr
    assert list(out.iterdir()) == []


def test_run_on_a_full_disk_commits_nothing_and_fails(tmp_path):
    config = write_tiny_benchmark(tmp_path / "bench", runs=2)
    root = tmp_path / "tree"
    proc = subprocess.run(run_args(config, root), capture_output=True, text=True, timeout=300,
                          preexec_fn=limit_file_size(16384))
    assert proc.returncode != 0, proc.stderr
    results = root / "results" / "cpu_2c" / "bert"
    assert list(results.iterdir()) == [], proc.stderr
    assert "cannot write the log file" in proc.stderr


def test_resume_redoes_an_incomplete_result(tmp_path):
    config = write_tiny_benchmark(tmp_path / "bench", runs=3)
    root = tmp_path / "tree"
    assert subprocess.run(run_args(config, root, "--runs", "2"), capture_output=True, timeout=300).returncode == 0
    results = root / "results" / "cpu_2c" / "bert"
    # result_0: cut before its run_stop line (a truncated write of an older version); result_1: empty.
    lines = (results / "result_0.txt").read_text().splitlines(keepends=True)
    (results / "result_0.txt").write_text("".join(lines[:-1]))
    (results / "result_1.txt").write_text("")
    proc = subprocess.run(run_args(config, root, "--resume"), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("is incomplete") == 2, proc.stderr
    for i in range(3):
        last = json.loads((results / f"result_{i}.txt").read_text().splitlines()[-1].split(":::MLLOG ", 1)[1])
        assert last["key"] == "run_stop"


# ---- two runs, dying parents, SIGHUP ------------------------------------------------------------

@pytest.fixture
def endless(tmp_path):
    """A config whose runs train until stopped (unreachable target, huge sample limit). Whatever
    the outcome, no process of the test outlives it (a failing build may leave orphans)."""
    yield write_tiny_benchmark(tmp_path / "bench", target=0.95, max_samples=10**7, runs=3)
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(tmp_path).encode() in (proc / "cmdline").read_bytes():
                os.kill(int(proc.name), signal.SIGKILL)
        except OSError:
            pass


def test_second_run_on_one_tree_is_refused_and_leaves_the_first_alone(tmp_path, endless):
    root = tmp_path / "tree"
    results = root / "results" / "cpu_2c" / "bert"
    first = subprocess.Popen(run_args(endless, root), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: temp_logs(results)), "the first run wrote no temporary log"
        temp = temp_logs(results)[0]
        for extra in [[], ["--resume"]]:
            second = subprocess.run(run_args(endless, root, *extra), capture_output=True, text=True, timeout=60)
            assert second.returncode == 2, second.stderr
            assert one_line(second.stderr), second.stderr
            assert "another `bertperf run`" in second.stderr and str(root) in second.stderr, second.stderr
            assert temp.exists()  # not taken for stale
        assert first.poll() is None
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=60)
    assert temp_logs(results) == []


def test_run_killed_outright_takes_its_child_with_it(tmp_path, endless):
    root = tmp_path / "tree"
    results = root / "results" / "cpu_2c" / "bert"
    parent = subprocess.Popen(run_args(endless, root), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: temp_logs(results)), "no temporary log appeared"
        child = int(temp_logs(results)[0].name.rsplit(".", 1)[1])
        assert alive(child)
        parent.kill()
        parent.wait(timeout=30)
        # The child gets SIGTERM when its parent dies: it removes its temporary log and ends.
        assert wait_for(lambda: not alive(child), timeout=30), "run-once outlived its parent"
        assert temp_logs(results) == []
    finally:
        parent.kill()
    assert not list(results.glob("result_*.txt"))


@pytest.mark.parametrize("command", ["run-once", "run"])
def test_sighup_is_handled_like_sigterm(tmp_path, endless, command):
    root = tmp_path / "tree"
    if command == "run-once":
        directory = tmp_path / "out"
        directory.mkdir()
        args = [str(BERTPERF), "run-once", "--config", str(endless), "--log", str(directory / "result_0.txt"),
                "--system-file", str(SYSTEM_FILE), "--no-progress"]
    else:
        directory = root / "results" / "cpu_2c" / "bert"
        args = run_args(endless, root)
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert wait_for(lambda: temp_logs(directory) and "run_start" in temp_logs(directory)[0].read_text())
        proc.send_signal(signal.SIGHUP)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == (-signal.SIGHUP if command == "run-once" else 128 + signal.SIGHUP)
    assert list(directory.iterdir()) == []


# ---- eval sets ------------------------------------------------------------------------------------

@pytest.mark.parametrize("count", [0, 10])
def test_empty_or_small_eval_set_is_refused(tmp_path, count):
    config = write_tiny_benchmark(tmp_path / "bench")  # its benchmark evaluates on 64 sequences
    write_tiny_shard(tmp_path / "bench" / "eval.hdf5", count, seed=2)
    log = tmp_path / "result_0.txt"
    proc = run_once(config, log, "--no-progress")
    assert proc.returncode == 2, proc.stderr
    assert one_line(proc.stderr), proc.stderr
    assert "eval.hdf5" in proc.stderr, proc.stderr
    assert ("no sequences" if count == 0 else f"holds {count} sequences") in proc.stderr, proc.stderr
    assert not log.exists() and not list(tmp_path.glob(".result_0*"))


# ---- run length ---------------------------------------------------------------------------------

def packed_config(tmp_path, train_steps):
    """Sequences of 16 to 32 tokens at seq_len 64: the reader packs two or three per row."""
    config = write_tiny_benchmark(tmp_path / "bench")
    data = json.loads(config.read_text())
    data.pop("max_samples")
    data["bert_config"]["max_position_embeddings"] = 64
    data["data"].update(seq_len=64, packed=True)
    data["lamb"]["train_steps"] = train_steps
    config.write_text(json.dumps(data))
    return config


def trained_steps(config, *extra):
    proc = subprocess.run([str(BERTPERF), "train", "--config", str(config), *extra], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    steps = [line.split() for line in proc.stdout.splitlines() if line.startswith("step ")]
    return len(steps), int(steps[-1][3])


def test_packed_rows_train_train_steps_optimizer_steps(tmp_path):
    config = packed_config(tmp_path, train_steps=6)
    steps, samples = trained_steps(config)
    assert steps == 6
    assert samples > 6 * 8  # sequences, more than the rows: the rows are packed
    assert trained_steps(config, "--steps", "4")[0] == 4


def packed_shards_config(tmp_path, packed, eval_packed):
    """The tiny config training on the reader's golden packed shard (5 packed rows of 13 sequences, at most 64 tokens
    and 8 predictions each, token ids below 100) with "packed": `packed`, and evaluating on it (`eval_packed`) or on
    the tiny benchmark's 64 unpacked sequences."""
    config = write_tiny_benchmark(tmp_path / "bench")
    data = json.loads(config.read_text())
    shard = str(REPO / "tests" / "golden" / "reader" / "packed.hdf5")
    data["bert_config"].update(vocab_size=100, max_position_embeddings=64)
    data["data"].update(train_files=[shard], seq_len=64, max_predictions=8, packed=packed)
    if eval_packed:
        data["data"]["eval_file"] = shard
    data["batch"]["local_batch_size"] = 2
    config.write_text(json.dumps(data))
    return config, shard


def test_packed_shards_under_packed_false_fail_in_one_line_before_run_start(tmp_path):
    config, shard = packed_shards_config(tmp_path, packed=False, eval_packed=False)
    proc = run_once(config, tmp_path / "result_0.txt", "--stdout", "--no-progress")
    assert proc.returncode == 2, proc.stderr
    assert one_line(proc.stderr), proc.stderr
    assert "'packed'" in proc.stderr and shard in proc.stderr, proc.stderr
    assert "internal" not in proc.stderr.lower(), proc.stderr
    keys = [json.loads(line.split(":::MLLOG ", 1)[1])["key"] for line in proc.stdout.splitlines() if ":::MLLOG" in line]
    assert "init_start" in keys and "run_start" not in keys, keys


def test_packed_shards_train_and_evaluate_as_packed_rows(tmp_path):
    config, _ = packed_shards_config(tmp_path, packed=True, eval_packed=True)
    proc = subprocess.run([str(BERTPERF), "train", "--config", str(config), "--steps", "2", "--eval"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split()[:2] for line in lines[:2]] == [["step", "1"], ["step", "2"]], proc.stdout
    assert int(lines[1].split()[3]) > 2 * 2  # sequences, more than the rows: the file's rows are packed
    assert lines[2].startswith("eval samples 13 "), proc.stdout  # every sequence of the 5 packed rows


# ---- checkpoints ----------------------------------------------------------------------------------

def test_identical_runs_save_identical_checkpoint_bytes(tmp_path):
    """Two runs from one seed, more than a second apart, write the same checkpoint file byte for
    byte (HDF5 would otherwise stamp each object with its creation time)."""
    config = write_tiny_benchmark(tmp_path / "bench")
    saved = []
    for name in ["a.h5", "b.h5"]:
        if saved:
            time.sleep(1.1)
        proc = subprocess.run([str(BERTPERF), "train", "--config", str(config), "--steps", "2", "--seed", "3",
                               "--save", str(tmp_path / name)], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        saved.append((tmp_path / name).read_bytes())
    assert len(saved[0]) > 10000
    assert saved[0] == saved[1]
