"""scripts/bertperf.sbatch on a Slurm cluster of two nodes: hosts made of network namespaces (scripts/netns_hosts.sh),
each running its own slurmd (`slurmd -N <node>`, its own spool, log and pid file, its NodeAddr the host's address),
under one slurmctld on the machine itself, all started here with a generated slurm.conf (auth/none, private ports).

- `sbatch --nodes 2 --ntasks-per-node 2 scripts/bertperf.sbatch` runs a 4-rank, 2-run tiny result set as job steps
  across both nodes (srun --mpi=pmix, Open MPI over TCP between the hosts), and bertperf-check accepts the tree.
- Killing one node's slurmd and every process on it mid-run (what a node failure does) ends the job within 60 s:
  rank 0 notices the silent node (comm/context.h), logs the run as aborted and ends the step; no half-written result
  and no second run.

Skips, with the reason, where Slurm is not installed, this is not root, or network namespaces are not allowed. The
cluster is taken down however a test ends."""
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bertperf_paths import REPO, find_binary  # noqa: E402
from test_harness_compliance import SYSTEM_FILE, write_tiny_benchmark  # noqa: E402
from test_slurm import DAEMONS, assert_two_runs_comply, free_ports, keys_of  # noqa: E402

BERTPERF = find_binary("bertperf")
HOSTS = REPO / "scripts" / "netns_hosts.sh"
NODES = 2


def slurm_conf(folder, nodes, subnet, ctld_port, d_port):
    """Node I is host I of netns_hosts.sh (SUBNET.I); the controller listens on the machine's address there."""
    controller = socket.gethostname().split(".")[0]
    lines = [
        "ClusterName=bertperfnodes",
        f"SlurmctldHost={controller}({subnet}.254)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={d_port}",
        "AuthType=auth/none",
        "CredType=cred/none",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={folder}/state",
        # One slurmd per node on one machine: %n is the node's name.
        f"SlurmdSpoolDir={folder}/spool-%n",
        f"SlurmdPidFile={folder}/slurmd-%n.pid",
        f"SlurmdLogFile={folder}/slurmd-%n.log",
        # PMIx puts each step's client directory under TmpFS: one per node, or the two nodes' steps collide.
        f"TmpFS={folder}/tmp-%n",
        f"SlurmctldPidFile={folder}/slurmctld.pid",
        f"SlurmctldLogFile={folder}/slurmctld.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "MpiDefault=none",
        "ReturnToService=2",
        # A failed node is noticed in seconds, its job is not requeued, and sbatch --wait polls every 2 s (it backs
        # off only up to a third of MinJobAge).
        "SlurmdTimeout=5",
        "JobRequeue=0",
        "MinJobAge=6",
        "KillWait=5",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "SwitchType=switch/none",
    ]
    names = ",".join(nodes)
    lines += [f"NodeName={name} NodeAddr={subnet}.{i + 1} CPUs=2 State=UNKNOWN" for i, name in enumerate(nodes)]
    lines.append(f"PartitionName=test Nodes={names} Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


class Cluster:
    def __init__(self, env, hosts_env, nodes, folder):
        self.env, self.hosts_env, self.nodes, self.folder = env, hosts_env, nodes, folder

    def kill_node(self, i):
        """Everything on host I dies at once: its slurmd, the job's slurmstepd and its ranks."""
        subprocess.run([str(HOSTS), "kill", str(i)], env=self.hosts_env, check=True, timeout=30)


class ClusterUnavailable(Exception):
    """This machine cannot hold the cluster (the reason is the message): the tests skip, scripts say so."""


@contextlib.contextmanager
def two_node_cluster(nodes=NODES):
    """A Slurm cluster of `nodes` network-namespace hosts, up for the with-block and taken down however it ends
    (also scripts/stress_dist.py's). Raises ClusterUnavailable before the block where the machine cannot hold it."""
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        raise ClusterUnavailable(f"Slurm is not installed ({', '.join(missing)} missing; Debian: slurmctld slurmd "
                                 "slurm-client)")
    if os.geteuid() != 0:
        raise ClusterUnavailable("slurmd must run as root and network namespaces need root, and this is not root")
    tag = os.getpid()
    prefix = f"bs{tag % 100000}"
    subnet = f"10.{150 + tag % 40}.{tag // 40 % 250}"
    hosts_env = dict(os.environ, NETNS_PREFIX=prefix, NETNS_SUBNET=subnet)
    check = subprocess.run([str(HOSTS), "check"], capture_output=True, text=True, env=hosts_env, timeout=30)
    if check.returncode != 0:
        raise ClusterUnavailable(f"network namespaces: {check.stdout}{check.stderr}".strip())
    # Short: slurmstepd's sockets live in the spool folders, and a socket's path has at most 108 bytes.
    folder = Path(tempfile.mkdtemp(prefix="bpslurm", dir="/tmp"))
    (folder / "state").mkdir()
    names = [f"{prefix}-h{i + 1}" for i in range(nodes)]
    for name in names:
        (folder / f"spool-{name}").mkdir()
        (folder / f"tmp-{name}").mkdir()
    conf = folder / "slurm.conf"
    conf.write_text(slurm_conf(folder, names, subnet, *free_ports(2)))
    env = dict(os.environ, SLURM_CONF=str(conf))
    for var in [v for v in env if v.startswith(("SLURM_", "SBATCH_", "SRUN_"))]:
        if var != "SLURM_CONF":
            del env[var]
    daemons = []
    try:
        up = subprocess.run([str(HOSTS), "up", str(nodes)], capture_output=True, text=True, env=hosts_env, timeout=60)
        assert up.returncode == 0, up.stdout + up.stderr
        daemons.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(conf)], env=env, stderr=subprocess.STDOUT,
                                        stdout=open(folder / "slurmctld.out", "w")))
        for i, name in enumerate(names):
            daemons.append(subprocess.Popen([str(HOSTS), "run", str(i + 1), "slurmd", "-D", "-N", name, "-f", str(conf)],
                                            env=dict(env, **{k: hosts_env[k] for k in ("NETNS_PREFIX", "NETNS_SUBNET")}),
                                            stdout=open(folder / f"slurmd-{name}.out", "w"), stderr=subprocess.STDOUT))
        deadline = time.time() + 30
        states = ""
        while time.time() < deadline:
            if any(d.poll() is not None for d in daemons):
                break
            probe = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, env=env,
                                   timeout=10)
            states = probe.stdout.strip()
            if sorted(states.splitlines()) == sorted(f"{name} idle" for name in names):
                break
            time.sleep(0.5)
        else:
            states = f"{states} (after 30 s)"
        if sorted(states.splitlines()) != sorted(f"{name} idle" for name in names):
            logs = "".join(p.read_text()[-600:] for p in sorted(folder.glob("*.out")))
            raise ClusterUnavailable(f"Slurm's nodes did not come up here ({states!r}): {logs}")
        yield Cluster(env, hosts_env, names, folder)
    finally:
        # The hosts first (with every process on them), then the controller.
        subprocess.run([str(HOSTS), "down"], env=hosts_env, capture_output=True, timeout=60)
        for d in daemons:
            if d.poll() is None:
                d.terminate()
        for d in daemons:
            try:
                d.wait(timeout=15)
            except subprocess.TimeoutExpired:
                d.kill()
                d.wait()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def cluster():
    try:
        with two_node_cluster() as c:
            yield c
    except ClusterUnavailable as e:
        pytest.skip(str(e))


def four_rank_benchmark(directory, **kwargs):
    config = write_tiny_benchmark(directory, **kwargs)
    data = json.loads(config.read_text())
    data["batch"].update(ranks=4, local_batch_size=2)
    config.write_text(json.dumps(data))
    return config


def sbatch(cluster, config, out, tmp_path, wait=True, chdir=REPO):
    """The 2-run job on both nodes, its output in tmp_path/job.out; the ranks run in `chdir` (where a core goes)."""
    env = dict(cluster.env, CONFIG=str(config), OUT=str(out), RUNS="2", SYSTEM_FILE=str(SYSTEM_FILE),
               BERTPERF=str(BERTPERF))
    command = ["sbatch", "--parsable", "--wait", "--nodes", str(NODES), "--ntasks-per-node", "2", "--chdir", str(chdir),
               "--output", str(tmp_path / "job.out"), str(REPO / "scripts" / "bertperf.sbatch")]
    if wait:
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=240, cwd=chdir)
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=chdir)


@pytest.mark.skipif(BERTPERF is None, reason="bertperf not built")
def test_sbatch_on_two_nodes_passes_the_checker(cluster, tmp_path):
    config = four_rank_benchmark(tmp_path / "bench", runs=2)
    out = tmp_path / "tree"
    start = time.time()
    job = sbatch(cluster, config, out, tmp_path)
    output = (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else ""
    print(f"sbatch job on {NODES} nodes ended after {time.time() - start:.1f} s")
    assert job.returncode == 0, job.stdout + job.stderr + output
    assert f"{NODES} node(s) {cluster.nodes[0][:-1]}" in output and "4 task(s)" in output, output
    assert_two_runs_comply(out, output)


@pytest.mark.skipif(BERTPERF is None, reason="bertperf not built")
def test_a_node_lost_mid_run_ends_the_job_and_rank_0_logs_aborted(cluster, tmp_path):
    """Node 2's slurmd and all its processes are killed once the first run is under way. Open MPI over TCP neither
    fails nor returns on the ranks that remain, and Slurm needs its own timeouts to notice the node: rank 0 hears
    nothing from node 2 for 10 s, logs the run as aborted and ends the step. The job ends within 60 s of the kill."""
    from test_rank_failure import leftovers
    config = four_rank_benchmark(tmp_path / "bench", target=0.99, max_samples=1000000)  # never converges
    out = tmp_path / "tree"
    results = out / "results" / "cpu_2c" / "bert"
    job = sbatch(cluster, config, out, tmp_path, wait=False)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            temps = [p for p in results.iterdir() if ".tmp." in p.name] if results.is_dir() else []
            if temps and "run_start" in temps[0].read_text():
                break
            assert job.poll() is None, job.stdout.read()
            time.sleep(0.1)
        else:
            raise AssertionError("the run did not start")
        time.sleep(1)  # some steps into the run
        cluster.kill_node(2)
        killed = time.monotonic()
        stdout, _ = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
    seconds = time.monotonic() - killed
    output = (tmp_path / "job.out").read_text()
    print(f"sbatch job ended {seconds:.1f} s after node 2 was killed (sbatch exit {job.returncode})")
    assert seconds < 60, output
    # Slurm's account of the job: it did not complete.
    job_id = stdout.strip().splitlines()[0] if stdout.strip() else ""
    state = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, env=cluster.env,
                           timeout=30).stdout
    assert "JobState=COMPLETED" not in state and re.search(r" ExitCode=[1-9]|JobState=(NODE_FAIL|CANCELLED)", state), \
        state + output
    # Rank 0 saw the node go and closed the run's log as aborted; nothing else was written, and no second run began.
    lost = f"node 1 ({cluster.nodes[1]}) is gone"
    assert f"rank 0 on {cluster.nodes[0]}: {lost}" in output, output
    assert f"bertperf run-once: run aborted ({lost}" in output, output
    assert sorted(p.name for p in results.iterdir()) == ["result_0.txt"], output
    assert leftovers(results) == []
    keys = keys_of(results / "result_0.txt")
    assert keys.count("run_start") == 1, keys
    assert keys[-5:] == ["block_stop", "epoch_stop", "train_samples", "eval_samples", "run_stop"], keys[-5:]
    last = json.loads((results / "result_0.txt").read_text().splitlines()[-1].split(":::MLLOG ", 1)[1])
    assert last["metadata"]["status"] == "aborted"
    assert "run 2 of 2" not in output, output
