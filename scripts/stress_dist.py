#!/usr/bin/env python3
"""The two-node jobs of the distributed tests, run again and again beside busy processes, to catch what fails only
now and then under load (a rank crashing at start-up, a hang). Two jobs, each a 4-rank tiny result set on two hosts
made of network namespaces (scripts/netns_hosts.sh), as the tests run them:

  slurm   `sbatch scripts/bertperf.sbatch` on a two-node Slurm cluster (tests/python/test_slurm_nodes.py's), 2 runs
  mpirun  `netns_hosts.sh mpirun 2 2 bertperf run-once ...`, 1 run

Core dumps are on for the ranks (RLIMIT_CORE is inherited through sbatch and mpirun), each job runs in a folder of its
own, and for every failure the folder is kept under --keep: the job's output, both slurmd logs (slurm), and each core
with `gdb -batch` backtraces of every thread (bt-<core>.txt). One line per job, then one summary line:

  stress_dist: slurm 50/50 passed, mpirun 49/50 passed (1 crashed, 0 failed, 0 timed out), 4 busy, 1203 s

Exit status 0 when every job passed. Needs root, Slurm's daemons and a bertperf build (a RelWithDebInfo build gives
the backtraces our frames' lines). Another test that uses network namespaces must not run at the same time.

  scripts/stress_dist.py --runs 50 --busy 4 [--jobs slurm,mpirun] [--keep DIR] [--fresh-cluster] [--stop-at-first]
"""
import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))
from test_harness_compliance import SYSTEM_FILE  # noqa: E402
from test_slurm_nodes import BERTPERF, HOSTS, ClusterUnavailable, four_rank_benchmark, sbatch, two_node_cluster  # noqa: E402

JOB_SECONDS = 300  # a job still running after this is a hang


def busy(count):
    """`count` processes that each keep a core busy (the load a shared machine has)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def backtraces(folder):
    """gdb's account of every core under `folder` into bt-<core>.txt beside it; the names of the cores."""
    cores = sorted(p for p in folder.rglob("core*") if p.is_file())
    for core in cores:
        # At a call through a null pointer the program counter is 0 and gdb finds no frames; the return address is
        # still the word on top of the stack, so it is printed with its symbol.
        gdb = subprocess.run(["gdb", "-batch", "-nx", "-ex", "info threads", "-ex", "thread apply all bt 30",
                              "-ex", "info registers rip rsp", "-ex", "info symbol *(void **)$sp",
                              "-ex", "x/6ga $sp", str(BERTPERF), str(core)],
                             capture_output=True, text=True, timeout=300)
        (core.parent / f"bt-{core.name}.txt").write_text(gdb.stdout + gdb.stderr)
    return [c.name for c in cores]


def verdict(returncode, output, cores):
    if returncode is None:
        return "timed out"
    if cores or "Segmentation fault" in output or "Process received signal" in output:
        return "crashed"
    return "passed" if returncode == 0 else "failed"


def run_slurm(cluster, folder):
    config = four_rank_benchmark(folder / "bench", runs=2)
    try:
        job = sbatch(cluster, config, folder / "tree", folder, chdir=folder)
        code = job.returncode
    except subprocess.TimeoutExpired:
        subprocess.run(["scancel", "--full", "--signal=KILL", "-u", "root"], env=cluster.env, capture_output=True)
        code = None
    output = (folder / "job.out").read_text(errors="replace") if (folder / "job.out").exists() else ""
    return code, output


def run_mpirun(hosts_env, folder):
    config = four_rank_benchmark(folder / "bench", runs=1)
    command = [str(HOSTS), "mpirun", "2", "2", str(BERTPERF), "run-once", "--config", str(config),
               "--log", str(folder / "result_0.txt"), "--system-file", str(SYSTEM_FILE)]
    try:
        job = subprocess.run(command, capture_output=True, text=True, env=hosts_env, cwd=folder, timeout=JOB_SECONDS)
        code, output = job.returncode, job.stdout + job.stderr
    except subprocess.TimeoutExpired as e:
        subprocess.run([str(HOSTS), "kill", "1"], env=hosts_env, capture_output=True)
        subprocess.run([str(HOSTS), "kill", "2"], env=hosts_env, capture_output=True)
        code, output = None, (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
    (folder / "job.out").write_text(output)
    return code, output


def clusters(runs, fresh):
    """(i, cluster) for each of `runs` jobs: one cluster for them all, or a new one for each job (as a test has)."""
    if fresh:
        for i in range(runs):
            with two_node_cluster() as cluster:
                yield i, cluster
    else:
        with two_node_cluster() as cluster:
            for i in range(runs):
                yield i, cluster


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="jobs of each kind (default 10)")
    parser.add_argument("--busy", type=int, default=4, help="busy processes beside the jobs (default 4)")
    parser.add_argument("--jobs", default="slurm,mpirun", help="which jobs, in this order (default slurm,mpirun)")
    parser.add_argument("--keep", type=Path, default=REPO / "stress-failures",
                        help="where a failed job's folder is kept (default stress-failures/)")
    parser.add_argument("--fresh-cluster", action="store_true",
                        help="a new Slurm cluster for each Slurm job, as each test has (slower)")
    parser.add_argument("--stop-at-first", action="store_true", help="stop at the first job that does not pass")
    args = parser.parse_args()
    kinds = args.jobs.split(",")
    if args.runs < 1 or args.busy < 0 or not set(kinds) <= {"slurm", "mpirun"}:
        parser.error("--runs must be at least 1, --busy at least 0, --jobs slurm and/or mpirun")
    if BERTPERF is None:
        sys.exit("stress_dist: error: bertperf is not built (scripts/build.sh)")
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    counts = {kind: {} for kind in kinds}
    start = time.monotonic()
    load = busy(args.busy)
    print(f"stress_dist: {args.runs} x {', '.join(kinds)} beside {args.busy} busy processes, bertperf {BERTPERF}; "
          f"load average {os.getloadavg()[0]:.2f} before, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}",
          flush=True)
    try:
        stop = False
        for kind in kinds:
            for i, cluster in clusters(args.runs, args.fresh_cluster and kind == "slurm"):
                folder = Path(tempfile.mkdtemp(prefix=f"stress-{kind}-{i}-", dir="/tmp"))
                began = time.monotonic()
                code, output = run_slurm(cluster, folder) if kind == "slurm" else run_mpirun(cluster.hosts_env, folder)
                cores = backtraces(folder)
                result = verdict(code, output, cores)
                counts[kind][result] = counts[kind].get(result, 0) + 1
                line = f"stress_dist: {kind} {i + 1}/{args.runs}: {result} in {time.monotonic() - began:.1f} s"
                if result != "passed":
                    kept = args.keep / folder.name
                    if kind == "slurm":
                        for log in cluster.folder.glob("slurmd-*.log"):
                            shutil.copy(log, folder)
                    shutil.rmtree(folder / "bench", ignore_errors=True)  # the data: regenerated at will
                    args.keep.mkdir(parents=True, exist_ok=True)
                    shutil.move(str(folder), kept)
                    line += f" (exit {code}, {len(cores)} core(s); kept in {kept})"
                    stop = args.stop_at_first
                else:
                    shutil.rmtree(folder, ignore_errors=True)
                print(line, flush=True)
                if stop:
                    break
            if stop:
                break
    except ClusterUnavailable as e:
        sys.exit(f"stress_dist: error: {e}")
    finally:
        for p in load:
            p.kill()
            p.wait()
    parts = []
    for kind, seen in counts.items():
        total = sum(seen.values())
        bad = ", ".join(f"{seen.get(r, 0)} {r}" for r in ("crashed", "failed", "timed out"))
        parts.append(f"{kind} {seen.get('passed', 0)}/{total} passed" + (f" ({bad})" if total != seen.get("passed", 0)
                                                                        else ""))
    print(f"stress_dist: {', '.join(parts)}, {args.busy} busy, {time.monotonic() - start:.0f} s", flush=True)
    sys.exit(0 if all(set(seen) == {"passed"} for seen in counts.values()) else 1)


if __name__ == "__main__":
    main()
