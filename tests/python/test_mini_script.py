"""scripts/mini.sh with no arguments on a fresh clone runs to the end and exits 0: the new result set
goes to a fresh directory and the report compares it with the committed set (results/mini_cpu_2c)
as the baseline.

The script runs for real in a copy of the repository's layout (a git repository of its own), except
for the ten-minute parts: setup and build are no-ops, the data set is marked present, and `bertperf
run` is a stand-in that keeps the real command's contract (it refuses a tree that already holds
result_0.txt, as test_harness_compliance.py::test_run_refuses_to_overwrite_and_resumes checks of the
real one) and writes the committed logs as its result set, with the commit and config lines a run
of this build logs (harness/provenance.h); every other command goes to the real bertperf. The
checkers, the official checker, the report and the packaging into a submitter tree all run on them."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from bertperf_paths import REPO, find_binary

BASELINE = REPO / "results" / "mini_cpu_2c"
VENV = REPO / ".venv" / "bin"

STAND_IN = """#!/usr/bin/env bash
# bertperf stand-in: `run --config C --out DIR [--runs N]` writes the committed result set into DIR, with the
# lines naming this repository's commit and the config; every other command is the real bertperf's.
set -euo pipefail
[ "$1" = run ] || exec "{real}" "$@"
out="" config=""
while [ $# -gt 0 ]; do case "$1" in --out) out="$2"; shift 2 ;; --config) config="$2"; shift 2 ;; *) shift ;; esac
done
result="$out/results/cpu_2c/bert/result_0.txt"
if [ -e "$result" ]; then echo "bertperf: error: $result: exists already" >&2; exit 2; fi
mkdir -p "$out/results/cpu_2c/bert" "$out/systems"
cp "{baseline}"/systems/cpu_2c.json "$out/systems/"
.venv/bin/python - "{baseline}" "$out" "$(git rev-parse HEAD)" "$config" <<'PY'
import glob, json, os, sys
baseline, out, commit, config = sys.argv[1:]
for path in glob.glob(os.path.join(baseline, "results/cpu_2c/bert/result_*.txt")):
    lines = []
    for line in open(path):
        lines.append(line)
        record = json.loads(line.split(":::MLLOG ", 1)[1])
        if record["key"] == "max_samples":
            for key, value, metadata in (("bertperf_commit", commit, {"dirty": False, "source": "git"}),
                                         ("bertperf_config", config, {})):
                lines.append(":::MLLOG " + json.dumps({**record, "key": key, "value": value,
                                                       "metadata": {**record["metadata"], **metadata}}) + "\\n")
    with open(os.path.join(out, "results/cpu_2c/bert", os.path.basename(path)), "w") as handle:
        handle.writelines(lines)
PY
"""

REAL = find_binary("bertperf")

pytestmark = [
    pytest.mark.skipif(not (BASELINE / "results").is_dir() or not (VENV / "bertperf-report").exists(),
                       reason="needs the committed mini result set and the .venv with bertperf-report"),
    pytest.mark.skipif(REAL is None, reason="bertperf not built (packaging reads the config with it)"),
]


def fake_clone(root: Path) -> Path:
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "mini.sh", root / "scripts" / "mini.sh")
    for name in ["setup.sh", "build.sh"]:
        (root / "scripts" / name).write_text("#!/usr/bin/env bash\nexit 0\n")
        (root / "scripts" / name).chmod(0o755)
    (root / ".venv").symlink_to(REPO / ".venv")
    shutil.copytree(REPO / "benchmarks", root / "benchmarks")  # packaged as code: real files
    for name in ["data/mini/train/part-00000-of-00016.hdf5", "data/mini/eval_1000.hdf5"]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).touch()
    shutil.copytree(BASELINE, root / "results" / "mini_cpu_2c")
    (root / "build" / "bin").mkdir(parents=True)
    stand_in = root / "build" / "bin" / "bertperf"
    stand_in.write_text(STAND_IN.replace("{baseline}", str(BASELINE)).replace("{real}", str(REAL)))
    stand_in.chmod(0o755)
    (root / ".gitignore").write_text("/.venv\n/build/\n/data/\n/results/mini_cpu_2c-*/\n")
    for command in (["init", "--quiet"], ["add", "--all"],
                    ["-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "--quiet", "-m", "clone"]):
        subprocess.run(["git", *command], cwd=root, check=True, capture_output=True)
    return root


def test_mini_without_arguments_runs_to_the_end_beside_the_committed_set(tmp_path):
    root = fake_clone(tmp_path / "clone")
    committed = sorted(p.relative_to(root) for p in (root / "results" / "mini_cpu_2c").rglob("*"))
    # This checkout's compliance package, whatever the .venv's editable install points at.
    env = dict(os.environ, PYTHONPATH=str(REPO / "compliance"))
    proc = subprocess.run(["bash", "scripts/mini.sh"], cwd=root, capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    new = [p for p in (root / "results").iterdir() if p.name.startswith("mini_cpu_2c-")
           and not p.name.endswith("-submission")]
    assert len(new) == 1, list((root / "results").iterdir())
    out = new[0]
    assert sorted(p.name for p in (out / "results" / "cpu_2c" / "bert").iterdir()) == \
        sorted(f"result_{i}.txt" for i in range(10))
    # The committed set is the baseline: untouched, and the first set of the report.
    assert sorted(p.relative_to(root) for p in (root / "results" / "mini_cpu_2c").rglob("*")) == committed
    report = (out / "REPORT.md").read_text()
    # Each set named by what it is: the committed baseline's path and this run's.
    baseline_label = "bertperf/cpu_2c (results/mini_cpu_2c)"
    run_label = f"bertperf/cpu_2c ({out.relative_to(root)})"
    assert baseline_label in report and run_label in report and "#2" not in report, report[:2000]
    assert (out / "CHECK.txt").read_text().startswith(f"PASS {out.relative_to(root)} (tree, ruleset 5.0.0)")
    assert proc.stdout.count(f"PASS {out.relative_to(root)}/results/cpu_2c/bert/result_") == 10  # official checker
    assert list((out / "plots").glob("*.png"))
    # The submitter tree beside the set, checked by the official tools before it was written.
    org = Path(str(out) + "-submission") / "bertperf"
    assert sorted(p.name for p in (org / "results" / "cpu_2c" / "bert").iterdir()) == \
        sorted(f"result_{i}.txt" for i in range(10))
    assert (org / "benchmarks" / "bert" / "implementations" / "bertperf" / "code" / "scripts" / "mini.sh").is_file()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    assert commit in (org / "benchmarks" / "bert" / "implementations" / "bertperf" / "README.md").read_text()
    for name in ("official package checker", "official repository checker", "official result summarizer"):
        assert f"== {name} (mlperf-logging" in proc.stdout and f"{name} (mlperf-logging" in proc.stdout
    assert proc.stdout.count("): PASS") >= 3, proc.stdout[-3000:]
