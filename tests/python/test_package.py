"""bertperf-package: result sets into an MLPerf submitter tree, checked as MLCommons checks it.

Fresh runs: `bertperf run` of the committed tiny config (tests/configs/tiny: two 16-wide layers on
generated data that reach the target in a few steps) writes a ten-run set whose logs name the
build's commit and config; packaged from a fresh clone of this repository, the tree passes
bertperf-check, the official package checker and the result summarizer, its code is the logged
commit blob for blob, and each refusal (a log from another commit, a dirty build, a system
description missing a field, a config that disagrees with a log, too few runs, a log without
provenance) is one line naming the file, with nothing written. The committed mini set
(results/mini_cpu_2c, written before runs logged their commit) is packaged with --legacy-logs and
passes the same official tools.
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bertperf_paths import REPO, find_binary
from compliance_support import copy_tree, official_package_verdict
from test_harness_compliance import write_tiny_shard
from bertperf_compliance.check.package import check_package
from bertperf_compliance.package.code import hidden
from bertperf_compliance.report.systems import find_result_sets

BERTPERF = find_binary("bertperf")
TINY_CONFIG = "tests/configs/tiny/cpu_2c.json"
MINI = REPO / "results" / "mini_cpu_2c"
MINI_REFERENCE = REPO / "benchmarks" / "bert" / "mini" / "reference" / "pytorch_cpu_2c.json"
ORG, IMPL = "bertperf", "bertperf"

pytestmark = [
    pytest.mark.skipif(BERTPERF is None, reason="bertperf not built"),
    pytest.mark.skipif(not (REPO / ".git").exists(), reason="not a git checkout"),
]


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def package(tree, out, repo, *extra):
    """bertperf-package as a user runs it; (exit status, stdout, stderr)."""
    # The tiny config names its data folder from the environment; its dry run needs the name, not the data.
    env = dict(os.environ, PYTHONPATH=str(REPO / "compliance"), BERTPERF_TINY_DATA="/nonexistent")
    proc = subprocess.run([sys.executable, "-m", "bertperf_compliance.package", "--submitter", ORG,
                           "--implementation", IMPL, "--out", str(out), "--repo", str(repo),
                           "--bertperf", str(BERTPERF), *extra, str(tree)],
                          capture_output=True, text=True, timeout=900, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def records(path):
    return [json.loads(line.split(":::MLLOG ", 1)[1]) for line in Path(path).read_text().splitlines()
            if ":::MLLOG " in line]


def first(path, key):
    return next(r for r in records(path) if r["key"] == key)


def edit_log(path, key, change):
    """Rewrites the first record of `key` with change(record); None drops the line."""
    out, done = [], False
    for line in Path(path).read_text().splitlines():
        if not done and f'"key": "{key}"' in line:
            done = True
            record = change(json.loads(line.split(":::MLLOG ", 1)[1]))
            if record is None:
                continue
            line = ":::MLLOG " + json.dumps(record)
        out.append(line)
    assert done, key
    Path(path).write_text("\n".join(out) + "\n")


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A fresh clone of this repository: only what is committed."""
    path = tmp_path_factory.mktemp("clone") / "bertperf"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(path)], check=True, capture_output=True, timeout=300)
    return path


@pytest.fixture(scope="module")
def fresh_set(tmp_path_factory):
    """Ten runs of the tiny config by `bertperf run`, with the commit and config they log."""
    data = tmp_path_factory.mktemp("tiny_data")
    write_tiny_shard(data / "train.hdf5", 512, seed=1)
    write_tiny_shard(data / "eval.hdf5", 64, seed=2)
    tree = tmp_path_factory.mktemp("tiny_set") / "set"
    proc = subprocess.run([str(BERTPERF), "run", "--config", str(REPO / TINY_CONFIG), "--out", str(tree),
                           "--no-progress"], capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, BERTPERF_TINY_DATA=str(data)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    logs = sorted((tree / "results" / "cpu_2c" / "bert").glob("result_*.txt"))
    assert len(logs) == 10
    commit = first(logs[0], "bertperf_commit")
    known = subprocess.run(["git", "-C", str(REPO), "cat-file", "-t", commit["value"]], capture_output=True, text=True)
    if known.stdout.strip() != "commit":
        pytest.skip(f"the build's commit {commit['value']} is not in this repository")
    return {"tree": tree, "data": data, "commit": commit["value"], "dirty": commit["metadata"]["dirty"]}


def dirty_flag(fresh_set):
    # A developer's build with uncommitted changes logs that (the refusal has its own test).
    return ["--allow-dirty"] if fresh_set["dirty"] else []


def copy_set(fresh_set, tmp_path):
    return copy_tree(fresh_set["tree"], tmp_path / "set")


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


# ---- the log lines packaging needs -------------------------------------------------------------------------

def test_runs_log_their_commit_config_and_library_versions(fresh_set):
    for log in sorted((fresh_set["tree"] / "results" / "cpu_2c" / "bert").glob("result_*.txt")):
        commit = first(log, "bertperf_commit")
        assert re.fullmatch(r"[0-9a-f]{40}", commit["value"])
        assert commit["value"] == fresh_set["commit"]
        assert commit["metadata"]["source"] == "git" and isinstance(commit["metadata"]["dirty"], bool)
        assert first(log, "bertperf_config")["value"] == TINY_CONFIG
        versions = first(log, "bertperf_library_versions")["value"]
        # Against the system's own account of its libraries.
        for name, package_name in (("OpenBLAS", "openblas"), ("HDF5", "hdf5")):
            proc = subprocess.run(["pkg-config", "--modversion", package_name], capture_output=True, text=True)
            if proc.returncode == 0:
                assert versions[name] == proc.stdout.strip(), name
        mpirun = subprocess.run(["mpirun", "--version"], capture_output=True, text=True)
        if mpirun.returncode == 0 and "MPI" in versions:
            assert re.search(r"\d+\.\d+\.\d+", mpirun.stdout).group(0) in versions["MPI"]
    # bertperf --version names the same build.
    version = subprocess.run([str(BERTPERF), "--version"], capture_output=True, text=True).stdout
    assert fresh_set["commit"] in version


def test_the_trees_system_description_names_the_logged_software(fresh_set):
    tree = fresh_set["tree"]
    desc = json.loads((tree / "systems" / "cpu_2c.json").read_text())
    stack = desc["other_software_stack"]
    versions = first(tree / "results" / "cpu_2c" / "bert" / "result_9.txt", "bertperf_library_versions")["value"]
    assert stack["openblas_version"] == versions["OpenBLAS"]
    assert stack["hdf5_version"] == versions["HDF5"]
    assert stack["compiler_version"] == versions["compiler"]
    assert stack["bertperf_commit"].startswith(fresh_set["commit"])
    # Everything else as the committed description has it.
    committed = json.loads((REPO / "systems" / "cpu_2c.json").read_text())
    assert {k: v for k, v in desc.items() if k not in ("other_software_stack", "division")} == \
        {k: v for k, v in committed.items() if k not in ("other_software_stack", "division")}


# ---- a package that passes ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def packaged(fresh_set, clone, tmp_path_factory):
    out = tmp_path_factory.mktemp("package")
    rc, stdout, stderr = package(fresh_set["tree"], out, clone, *dirty_flag(fresh_set))
    assert rc == 0, stdout[-4000:] + stderr[-4000:]
    return {"out": out, "org": out / ORG, "stdout": stdout}


def test_the_package_is_code_results_and_systems(packaged, fresh_set, clone):
    org = packaged["org"]
    assert sorted(p.name for p in org.iterdir()) == ["benchmarks", "results", "systems"]
    assert [p.name for p in packaged["out"].iterdir()] == [ORG]  # no staging left behind
    # Results and system descriptions: copied unchanged.
    src = fresh_set["tree"]
    for log in (src / "results" / "cpu_2c" / "bert").glob("result_*.txt"):
        assert (org / "results" / "cpu_2c" / "bert" / log.name).read_bytes() == log.read_bytes()
    assert sorted(p.name for p in (org / "results" / "cpu_2c" / "bert").iterdir()) == \
        sorted(f"result_{i}.txt" for i in range(10))
    assert (org / "systems" / "cpu_2c.json").read_bytes() == (src / "systems" / "cpu_2c.json").read_bytes()
    # The code: the logged commit, blob for blob, without the dot-files the repository checker refuses.
    code = org / "benchmarks" / "bert" / "implementations" / IMPL / "code"
    tree = {}
    for line in git(clone, "ls-tree", "-r", fresh_set["commit"]).splitlines():
        meta, path = line.split("\t", 1)
        tree[path] = meta.split()[2]
    expected = {p for p in tree if not hidden(p)}
    found = {str(p.relative_to(code)) for p in code.rglob("*") if p.is_file() or p.is_symlink()}
    assert found == expected
    assert {".gitignore", ".gitattributes"} & set(tree)  # there were dot-files to leave out
    for path in sorted(expected):
        data = (code / path).read_bytes()
        if path == "cmake/archive_commit.txt":
            assert data.decode().strip() == fresh_set["commit"]  # git archive fills it in
        else:
            assert git_blob_id(data) == tree[path], path


def test_the_package_passes_the_official_tools_and_ours(packaged, tmp_path):
    stdout = packaged["stdout"]
    for name in ("official package checker", "official repository checker", "official result summarizer"):
        assert re.search(rf"== {name} \(mlperf-logging [\d.]+\): PASS", stdout), stdout[-3000:]
    copy = copy_tree(packaged["org"], tmp_path / ORG)
    assert official_package_verdict(copy, "5.0.0")
    assert check_package(str(copy), "5.0.0").passed
    # The score the packager printed is the official summarizer's, on a copy of its own.
    pytest.importorskip("pandas")
    work = tmp_path / "summary"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-m", "mlperf_logging.result_summarizer", str(copy), "training", "5.0.0",
                           "--csv", str(work / "s.csv")], cwd=work, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = json.loads((work / "s.json").read_text())
    (ours,) = find_result_sets([str(copy / "results")], 0.72)
    assert ours.score_min == pytest.approx(row["bert"], rel=0, abs=1e-9)
    table = stdout[stdout.index("== score as the results page shows it"):]
    assert "Open division, Research, Development, or Internal (RDI)" in table
    assert f"| {ORG} | cpu_2c | 1 |" in table and f"| {row['bert']:.3f} |" in table


def test_the_readme_says_how_to_rebuild_and_rerun(packaged, fresh_set):
    text = (packaged["org"] / "benchmarks" / "bert" / "implementations" / IMPL / "README.md").read_text()
    assert fresh_set["commit"] in text
    for command in ("scripts/setup.sh", "scripts/build.sh", "scripts/test.sh",
                    f"build/bin/bertperf run --config {TINY_CONFIG} --out rerun/cpu_2c",
                    "bertperf-check --ruleset 5.0.0 rerun/cpu_2c"):
        assert command in text, command
    assert "${BERTPERF_TINY_DATA}/train.hdf5" in text  # the config's data
    assert "OpenBLAS" in text  # the libraries the runs logged
    assert "official package checker" in text and "pass" in text
    assert "/work/" not in text and str(REPO) not in text  # no machine paths


# ---- refusals: one line naming the file, nothing written ---------------------------------------------------

def refused(tree, tmp_path, clone, *extra):
    out = tmp_path / "out"
    rc, stdout, stderr = package(tree, out, clone, *extra)
    assert rc == 1, stdout[-3000:] + stderr[-3000:]
    assert not out.exists() or list(out.iterdir()) == [], list(out.iterdir())
    lines = [line for line in stderr.splitlines() if line.startswith("bertperf-package: ")]
    assert lines[-1].startswith("bertperf-package: refused"), stderr
    return lines[:-1]


def test_refuses_a_log_from_another_commit(fresh_set, clone, tmp_path):
    tree = copy_set(fresh_set, tmp_path)
    other = "f" * 40
    edit_log(tree / "results" / "cpu_2c" / "bert" / "result_3.txt", "bertperf_commit",
             lambda r: {**r, "value": other})
    (line,) = refused(tree, tmp_path, clone, *dirty_flag(fresh_set))
    assert re.search(r"result_3\.txt:\d+: built from commit ffffffffffff, the other runs from "
                     + fresh_set["commit"][:12], line), line
    assert "fix: rerun it with the build of" in line


def test_refuses_a_dirty_build_unless_told(fresh_set, clone, tmp_path):
    tree = copy_set(fresh_set, tmp_path)
    for log in (tree / "results" / "cpu_2c" / "bert").glob("result_*.txt"):
        edit_log(log, "bertperf_commit", lambda r: {**r, "metadata": {**r["metadata"], "dirty": True}})
    lines = refused(tree, tmp_path, clone)
    assert len(lines) == 10
    assert all("with uncommitted changes (dirty)" in line and "--allow-dirty" in line for line in lines)
    assert any(re.search(r"result_0\.txt:\d+: built from commit", line) for line in lines)
    # Told: packaged, and the README says the code is the commit, not exactly what ran.
    rc, stdout, stderr = package(tree, tmp_path / "told", clone, "--allow-dirty")
    assert rc == 0, stdout[-3000:] + stderr[-3000:]
    text = (tmp_path / "told" / ORG / "benchmarks" / "bert" / "implementations" / IMPL / "README.md").read_text()
    assert "with uncommitted changes" in text and "--allow-dirty" in text


def test_refuses_a_system_description_without_a_required_field(fresh_set, clone, tmp_path):
    tree = copy_set(fresh_set, tmp_path)
    desc_path = tree / "systems" / "cpu_2c.json"
    desc = json.loads(desc_path.read_text())
    del desc["cooling"]
    desc_path.write_text(json.dumps(desc, indent=4))
    (line,) = refused(tree, tmp_path, clone, *dirty_flag(fresh_set))
    assert f"{desc_path}: missing field 'cooling' (ruleset 5.0.0)" in line and "fix: add \"cooling\"" in line


def test_refuses_a_log_that_disagrees_with_its_config(fresh_set, clone, tmp_path):
    tree = copy_set(fresh_set, tmp_path)
    log = tree / "results" / "cpu_2c" / "bert" / "result_2.txt"
    edit_log(log, "opt_base_learning_rate", lambda r: {**r, "value": 0.03})
    (line,) = refused(tree, tmp_path, clone, *dirty_flag(fresh_set))
    assert re.search(rf"result_2\.txt:\d+: opt_base_learning_rate is 0\.03 here, 0\.02 in the config "
                     rf"{TINY_CONFIG} at commit {fresh_set['commit'][:12]}", line), line


def test_refuses_too_few_runs(fresh_set, clone, tmp_path):
    tree = copy_set(fresh_set, tmp_path)
    for i in range(2, 10):
        (tree / "results" / "cpu_2c" / "bert" / f"result_{i}.txt").unlink()
    (line,) = refused(tree, tmp_path, clone, *dirty_flag(fresh_set))
    assert "results/cpu_2c/bert: 2 runs; ruleset 5.0.0 wants exactly 10 for bert" in line
    assert "--resume" in line


def test_refuses_a_log_without_provenance_unless_vouched_for(fresh_set, clone, tmp_path):
    tree = copy_set(fresh_set, tmp_path)
    edit_log(tree / "results" / "cpu_2c" / "bert" / "result_5.txt", "bertperf_commit", lambda r: None)
    (line,) = refused(tree, tmp_path, clone, *dirty_flag(fresh_set))
    assert "result_5.txt: the log names no bertperf commit" in line and "--legacy-logs COMMIT" in line


def test_an_existing_package_is_not_overwritten(fresh_set, clone, tmp_path):
    (tmp_path / "out" / ORG).mkdir(parents=True)
    rc, _, stderr = package(fresh_set["tree"], tmp_path / "out", clone)
    assert rc == 2 and "exists already" in stderr and stderr.count("\n") == 1


# ---- the committed mini set ---------------------------------------------------------------------------------

def test_the_committed_mini_set_packaged_from_a_fresh_clone_passes(clone, tmp_path):
    """Its logs name the commit that built them, a commit of this repository: packaged from a fresh clone with no
    --legacy-logs, the code is that commit's, and every log's hyperparameters are checked against the mini config
    at that commit."""
    if not (MINI / "results").is_dir():
        pytest.skip("no committed mini result set")
    logged = {r["value"] for log in (MINI / "results").glob("*/bert/result_*.txt") for r in records(log)
              if r["key"] == "bertperf_commit"}
    assert len(logged) == 1, f"the committed mini set's runs name {sorted(logged)}: one commit expected"
    (commit,) = logged
    out = tmp_path / "out"
    rc, stdout, stderr = package(clone / "results" / "mini_cpu_2c", out, clone,
                                 "--config", "cpu_2c=benchmarks/bert/mini/cpu_2c.json",
                                 "--rcp-reference", str(clone / MINI_REFERENCE.relative_to(REPO)))
    assert rc == 0, stdout[-4000:] + stderr[-4000:]
    org = out / ORG
    copy = copy_tree(org, tmp_path / "copy" / ORG)
    assert official_package_verdict(copy, "5.0.0")
    assert check_package(str(copy), "5.0.0").passed
    assert "official result summarizer (mlperf-logging" in stdout and "): PASS" in stdout
    readme = (org / "benchmarks" / "bert" / "implementations" / IMPL / "README.md").read_text()
    assert "scripts/mini.sh" in readme and commit in readme


def test_refuses_a_config_other_than_the_one_the_runs_name(fresh_set, clone, tmp_path):
    (line,) = refused(fresh_set["tree"], tmp_path, clone, *dirty_flag(fresh_set),
                      "--config", "cpu_2c=benchmarks/bert/mini/cpu_2c.json")
    assert f"the runs ran {TINY_CONFIG}, not the --config benchmarks/bert/mini/cpu_2c.json" in line
