"""Two-rank jobs of the real `bertperf` under `mpirun -np 2` on tiny generated data: a rank that reads a corrupt shard
or is killed ends the whole job non-zero within 60 s (measured and printed), naming the rank and the host, with no
rank left running and no half-written result (where rank 0 survives, the run is logged as aborted); and balanced
batches on two ranks train exactly as one rank with the same global batch in two micro-batches."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_harness_compliance import BERTPERF, SYSTEM_FILE, write_tiny_benchmark, write_tiny_shard  # noqa: E402

MPIRUN = ["mpirun", "-np", "2", "--oversubscribe"]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
HOST = socket.gethostname()

pytestmark = [pytest.mark.skipif(BERTPERF is None, reason="bertperf not built"),
              pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed")]


def two_rank_benchmark(directory, target=0.72, **batch):
    """The tiny benchmark with two training shards (rank r reads shard r) and a 2-rank config; a target above 0.9
    is never reached, so the run goes on for minutes."""
    config = write_tiny_benchmark(directory, target=target, max_samples=100000)
    write_tiny_shard(directory / "train_1.hdf5", 512, seed=3)
    data = json.loads(config.read_text())
    data["data"]["train_files"] = ["train.hdf5", "train_1.hdf5"]
    data["batch"].update(ranks=2, local_batch_size=4)
    data["batch"].update(batch)
    config.write_text(json.dumps(data))
    return config


def corrupt_token(path, value):
    import h5py
    with h5py.File(path, "r+") as f:
        ids = f["input_ids"][...]
        ids[3, 1] = value
        f["input_ids"][...] = ids


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if ".tmp." in p.name)


def ranks_of(config, variable=b"OMPI_COMM_WORLD_RANK="):
    """The pids of the job's bertperf ranks, by rank (from their command lines and environments)."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if str(config) not in (proc / "cmdline").read_bytes().decode(errors="replace"):
                continue
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for var in env:
            if var.startswith(variable):
                found[int(var.split(b"=")[1])] = int(proc.name)
    return found


def wait_for_run_start(config, logs, variable=b"OMPI_COMM_WORLD_RANK="):
    """The two ranks' pids once the timed run is under way (rank 0 has logged run_start in its temporary log)."""
    deadline = time.monotonic() + 60
    ranks = {}
    while time.monotonic() < deadline:
        temps = [p for p in logs.iterdir() if ".tmp." in p.name] if logs.is_dir() else []
        if temps and "run_start" in temps[0].read_text():
            ranks = ranks_of(config, variable)
            if len(ranks) == 2:
                return ranks
        time.sleep(0.05)
    raise AssertionError(f"the run did not start: {ranks}")


def alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_corrupt_shard_on_rank_1_ends_the_job_and_rank_0_logs_aborted(tmp_path):
    config = two_rank_benchmark(tmp_path / "bench")
    corrupt_token(tmp_path / "bench" / "train_1.hdf5", 40)  # the vocabulary has 32 words
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "result_0.txt"
    start = time.monotonic()
    proc = subprocess.run(["timeout", "120", *MPIRUN, str(BERTPERF), "run-once", "--config", str(config), "--log",
                           str(log), "--system-file", str(SYSTEM_FILE), "--seed", "7", "--no-progress"],
                          capture_output=True, text=True, env=ENV, timeout=180)
    seconds = time.monotonic() - start
    print(f"job ended {seconds:.1f} s after it started (exit {proc.returncode})")
    assert proc.returncode not in (0, 124), proc.stderr
    assert seconds < 60
    pattern = (rf"rank 1 on {re.escape(HOST)}: bertperf run-once: error: \S*train_1\.hdf5: "
               r".*token id 40 is outside the vocabulary of 32")
    assert re.search(pattern, proc.stderr), proc.stderr
    assert "rank 0 on" not in proc.stderr, proc.stderr
    # Rank 0 survived the failure until it had logged the run as aborted and put the complete log in place.
    assert "bertperf run-once: run aborted (rank 1 on" in proc.stderr, proc.stderr
    lines = log.read_text().splitlines()
    keys = [json.loads(line.split(":::MLLOG ", 1)[1])["key"] for line in lines]
    assert keys.count("run_start") == 1, keys
    assert keys[-5:] == ["block_stop", "epoch_stop", "train_samples", "eval_samples", "run_stop"], keys[-5:]
    assert json.loads(lines[-1].split(":::MLLOG ", 1)[1])["metadata"]["status"] == "aborted"
    # The log is complete: the checker finds only that no evaluation happened (the run ended in its first step).
    check = subprocess.run([str(Path(sys.executable).parent / "bertperf-check"), "--json", str(log)],
                           capture_output=True, text=True, timeout=120)
    findings = [f for i in json.loads(check.stdout)["inputs"] for f in i["result"]["findings"]]
    assert [f["rule"] for f in findings] == ["5.0.0/closed_bert/eval_accuracy:at-least-one"], findings
    assert leftovers(logs) == []


def test_killed_rank_1_ends_the_job_and_leaves_no_result(tmp_path):
    config = two_rank_benchmark(tmp_path / "bench", target=0.99)
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "result_0.txt"
    job = subprocess.Popen(["timeout", "120", *MPIRUN, str(BERTPERF), "run-once", "--config", str(config), "--log",
                            str(log), "--system-file", str(SYSTEM_FILE), "--seed", "7", "--no-progress"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        ranks = wait_for_run_start(config, logs)
        os.kill(ranks[1], signal.SIGKILL)
        killed = time.monotonic()
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
    seconds = time.monotonic() - killed
    print(f"job ended {seconds:.1f} s after rank 1 was killed (exit {job.returncode})")
    assert job.returncode not in (0, 124), err
    assert seconds < 60
    # Open MPI's line: "mpirun noticed that process rank 1 with PID N on node HOST exited on signal 9 (Killed)."
    assert re.search(rf"rank 1 with PID \d+ on node {re.escape(HOST)} exited on signal 9", err), err
    for _ in range(100):
        if not alive(ranks[0]):
            break
        time.sleep(0.1)
    assert not alive(ranks[0]), "rank 0 still runs"
    # The launcher ended rank 0 too: no result, complete or partial.
    assert not log.exists()
    assert leftovers(logs) == []


def train_losses(config, launcher, steps=6):
    proc = subprocess.run([*launcher, str(BERTPERF), "train", "--config", str(config), "--steps", str(steps),
                           "--seed", "5"], capture_output=True, text=True, env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr
    steps_seen = re.findall(r"^step (\d+) samples (\d+) loss (\S+)", proc.stdout, re.M)
    assert len(steps_seen) == steps, proc.stdout
    return [(int(s), int(n), float(loss)) for s, n, loss in steps_seen]


def test_balanced_two_ranks_train_as_one_rank_with_the_same_global_batch(tmp_path):
    """Two ranks with one micro-batch each get the batches one rank gets as two micro-batches (data/reader.h), so
    the training is the same but for the order of fp32 sums (the all-reduce against the accumulator)."""
    def config_for(name, ranks, micro, balanced=True):
        config = two_rank_benchmark(tmp_path / name, ranks=ranks, grad_accum_steps=micro)
        data = json.loads(config.read_text())
        data["distributed"] = {"balanced_batches": balanced}
        config.write_text(json.dumps(data))
        return config
    one = train_losses(config_for("one", 1, 2), [])
    two = train_losses(config_for("two", 2, 1), ["timeout", "300", *MPIRUN])
    print("one rank x 2 micro-batches:", one)
    print("two ranks x 1 micro-batch: ", two)
    for (s1, n1, l1), (s2, n2, l2) in zip(one, two):
        assert (s1, n1) == (s2, n2)
        assert l2 == pytest.approx(l1, rel=2e-6, abs=0), (s1, l1, l2)
    # Without balancing each rank reads its own shard: other batches, another trajectory (so the test can fail).
    unbalanced = train_losses(config_for("unbalanced", 2, 1, balanced=False), ["timeout", "300", *MPIRUN])
    assert any(abs(u[2] - o[2]) > 1e-4 * abs(o[2]) for u, o in zip(unbalanced, one)), unbalanced
