"""scripts/bertperf.sbatch under a real Slurm: slurmctld and slurmd from Debian's packages, started here with a
generated slurm.conf (one node with 2 CPUs, auth/none, private ports and state under the test's folder). The batch
script runs a 2-rank, 2-run tiny result set as job steps (srun --mpi=pmix), and bertperf-check accepts the tree.
Skips, with the reason, where Slurm is not installed or its daemons cannot start here."""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bertperf_paths import REPO, find_binary  # noqa: E402
from test_harness_compliance import SYSTEM_FILE, write_tiny_benchmark  # noqa: E402

BERTPERF = find_binary("bertperf")
CHECK = REPO / ".venv" / "bin" / "bertperf-check"
DAEMONS = ["slurmctld", "slurmd", "sbatch", "sinfo", "srun"]


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def slurm_conf(folder, host, ctld_port, d_port):
    return f"""ClusterName=bertperftest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SwitchType=switch/none
NodeName={host} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


@pytest.fixture
def slurm(tmp_path):
    """A one-node Slurm cluster for this test; yields the environment its clients need."""
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        pytest.skip(f"Slurm is not installed ({', '.join(missing)} missing; Debian: slurmctld slurmd slurm-client)")
    if os.geteuid() != 0:
        pytest.skip("slurmd must run as root to start job steps, and this test is not root")
    folder = tmp_path / "slurm"
    (folder / "state").mkdir(parents=True)
    (folder / "spool").mkdir()
    host = socket.gethostname().split(".")[0]
    conf = folder / "slurm.conf"
    conf.write_text(slurm_conf(folder, host, *free_ports(2)))
    env = dict(os.environ, SLURM_CONF=str(conf))
    for var in [v for v in env if v.startswith(("SLURM_", "SBATCH_", "SRUN_"))]:
        if var != "SLURM_CONF":
            del env[var]
    daemons = [subprocess.Popen([name, "-D", "-f", str(conf)] + (["-i"] if name == "slurmctld" else []),
                                stdout=open(folder / f"{name}.out", "w"), stderr=subprocess.STDOUT, env=env)
               for name in ["slurmctld", "slurmd"]]
    try:
        deadline = time.time() + 30
        state = ""
        while time.time() < deadline:
            if any(d.poll() is not None for d in daemons):
                break
            probe = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=env, timeout=10)
            state = probe.stdout.strip()
            if state == "idle":
                break
            time.sleep(0.5)
        if state != "idle":
            logs = "".join((folder / f).read_text()[-600:] for f in ["slurmctld.out", "slurmd.out"])
            pytest.skip(f"Slurm did not start here (node state '{state}'): {logs}")
        yield env
    finally:
        for d in daemons:
            if d.poll() is None:
                d.terminate()
        for d in daemons:
            try:
                d.wait(timeout=15)
            except subprocess.TimeoutExpired:
                d.kill()
                d.wait()


@pytest.mark.skipif(BERTPERF is None, reason="bertperf not built")
def test_sbatch_result_set_passes_the_checker(slurm, tmp_path):
    config = write_tiny_benchmark(tmp_path / "bench", runs=2)
    data = json.loads(config.read_text())
    data["batch"].update(ranks=2, local_batch_size=4)
    config.write_text(json.dumps(data))
    out = tmp_path / "tree"
    env = dict(slurm, CONFIG=str(config), OUT=str(out), RUNS="2", SYSTEM_FILE=str(SYSTEM_FILE),
               BERTPERF=str(BERTPERF))
    start = time.time()
    job = subprocess.run(["sbatch", "--wait", "--ntasks=2", "--chdir", str(REPO), "--output",
                          str(tmp_path / "job.out"), str(REPO / "scripts" / "bertperf.sbatch")],
                         capture_output=True, text=True, env=env, timeout=180)
    output = (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else ""
    print(f"sbatch job ended after {time.time() - start:.1f} s")
    assert job.returncode == 0, job.stdout + job.stderr + output
    assert_two_runs_comply(out, output)


def keys_of(log):
    """The MLLOG keys of a log, in order."""
    return [json.loads(line.split(":::MLLOG ", 1)[1])["key"] for line in log.read_text().splitlines()]


def assert_two_runs_comply(out, output):
    """The result tree `out` of a 2-run sbatch job (its output `output`): one result per job step, each logged once by
    rank 0; every log complies; the tree as a whole differs from a submission only in holding 2 runs, not 10."""
    results = out / "results" / "cpu_2c" / "bert"
    assert sorted(p.name for p in results.iterdir()) == ["result_0.txt", "result_1.txt"], output
    assert output.count("run 1 of 2") == 1 and output.count("run 2 of 2") == 1, output
    for log in results.iterdir():
        keys = keys_of(log)
        assert keys.count("run_stop") == 1 and keys.count("init_start") == 1, log
    logs = sorted(str(p) for p in results.iterdir())
    check = subprocess.run([str(CHECK), *logs], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    tree = subprocess.run([str(CHECK), "--rcp-bypass", "--seed-checker-bypass", str(out)], capture_output=True,
                          text=True, timeout=300)
    errors = [line for line in tree.stdout.splitlines() if ": error: " in line]
    assert len(errors) == 1 and "package:run-count] found 2 result_*.txt files" in errors[0], tree.stdout
    assert "2 of 2 runs comply" in tree.stdout, tree.stdout


@pytest.mark.skipif(BERTPERF is None, reason="bertperf not built")
def test_sbatch_rank_failure_ends_the_job_step(slurm, tmp_path):
    """Rank 1 reads a corrupt shard in the first run's job step: the step and the job end non-zero within 60 s,
    naming the rank and host; rank 0 logged the run as aborted; no second step starts."""
    from test_rank_failure import corrupt_token, two_rank_benchmark
    config = two_rank_benchmark(tmp_path / "bench")
    corrupt_token(tmp_path / "bench" / "train_1.hdf5", 40)
    out = tmp_path / "tree"
    env = dict(slurm, CONFIG=str(config), OUT=str(out), RUNS="2", SYSTEM_FILE=str(SYSTEM_FILE),
               BERTPERF=str(BERTPERF))
    start = time.time()
    job = subprocess.run(["sbatch", "--wait", "--ntasks=2", "--chdir", str(REPO), "--output",
                          str(tmp_path / "job.out"), str(REPO / "scripts" / "bertperf.sbatch")],
                         capture_output=True, text=True, env=env, timeout=180)
    seconds = time.time() - start
    output = (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else ""
    print(f"sbatch job ended after {seconds:.1f} s (exit {job.returncode})")
    assert job.returncode != 0, output
    assert seconds < 60, output
    host = socket.gethostname()
    assert f"rank 1 on {host}: bertperf run-once: error: " in output and "token id 40" in output, output
    assert "run 0 failed" in output and "run 2 of 2" not in output, output
    results = out / "results" / "cpu_2c" / "bert"
    assert sorted(p.name for p in results.iterdir()) == ["result_0.txt"], output
    last = json.loads((results / "result_0.txt").read_text().splitlines()[-1].split(":::MLLOG ", 1)[1])
    assert last["key"] == "run_stop" and last["metadata"]["status"] == "aborted"


@pytest.mark.skipif(BERTPERF is None, reason="bertperf not built")
def test_sbatch_killed_rank_ends_the_job_step(slurm, tmp_path):
    """Rank 1 of the first run's job step gets SIGKILL mid-run: srun (--kill-on-bad-exit) ends the step and the job
    within 60 s of the kill, naming the task and host; no rank stays, no result is written, no second step starts."""
    from test_rank_failure import alive, two_rank_benchmark, wait_for_run_start
    config = two_rank_benchmark(tmp_path / "bench", target=0.99)
    out = tmp_path / "tree"
    env = dict(slurm, CONFIG=str(config), OUT=str(out), RUNS="2", SYSTEM_FILE=str(SYSTEM_FILE),
               BERTPERF=str(BERTPERF))
    job = subprocess.Popen(["sbatch", "--wait", "--ntasks=2", "--chdir", str(REPO), "--output",
                            str(tmp_path / "job.out"), str(REPO / "scripts" / "bertperf.sbatch")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        ranks = wait_for_run_start(config, out / "results" / "cpu_2c" / "bert", variable=b"SLURM_PROCID=")
        os.kill(ranks[1], 9)
        killed = time.time()
        job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
    seconds = time.time() - killed
    output = (tmp_path / "job.out").read_text()
    print(f"sbatch job ended {seconds:.1f} s after rank 1 was killed (exit {job.returncode})")
    assert job.returncode != 0, output
    assert seconds < 60, output
    assert f"{socket.gethostname()}: task 1: Killed" in output, output
    assert "run 2 of 2" not in output, output
    for _ in range(100):
        if not alive(ranks[0]):
            break
        time.sleep(0.1)
    assert not alive(ranks[0]), "rank 0 still runs"
    assert sorted(p.name for p in (out / "results" / "cpu_2c" / "bert").iterdir()) == [], output


@pytest.mark.skipif(find_binary("dist_probe") is None, reason="dist_probe not built")
def test_srun_ranks_agree_with_mpi_or_are_refused(slurm):
    """Under srun --mpi=pmix each task is the rank, local rank and node Slurm says; without an MPI plugin the tasks
    could not join (Open MPI's MPI_Init fails in many lines), and each refuses with one line before it."""
    probe = str(find_binary("dist_probe"))
    ok = subprocess.run(["srun", "--ntasks=2", "--mpi=pmix", "--kill-on-bad-exit=1", probe, "check"],
                        capture_output=True, text=True, env=slurm, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    ranks = sorted(line for line in ok.stdout.splitlines() if line.startswith("rank="))
    assert [r.split(" host=")[0] for r in ranks] == [
        "rank=0 size=2 local_rank=0 local_size=2 node=0 nodes=1",
        "rank=1 size=2 local_rank=1 local_size=2 node=0 nodes=1"], ok.stdout
    refused = subprocess.run(["srun", "--ntasks=2", "--mpi=none", probe, "check"], capture_output=True, text=True,
                             env=slurm, timeout=120)
    assert refused.returncode != 0, refused.stdout + refused.stderr
    assert refused.stderr.count("dist_probe: error: this process is one of several tasks (SLURM_STEP_NUM_TASKS=2) "
                                "but srun gave it no PMIx or PMI contact") == 2, refused.stderr


@pytest.mark.skipif(BERTPERF is None, reason="bertperf not built")
def test_srun_outside_an_allocation_is_one_line(tmp_path):
    config = write_tiny_benchmark(tmp_path / "bench", runs=2)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    proc = subprocess.run([str(BERTPERF), "run", "--config", str(config), "--out", str(tmp_path / "tree"), "--srun",
                           "--system-file", str(SYSTEM_FILE)], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == ("bertperf run: error: command line: --srun needs a Slurm allocation (SLURM_JOB_ID is not "
                           "set): use sbatch or salloc\n"), proc.stderr
