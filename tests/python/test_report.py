"""Tests of bertperf-report against independent oracles.

* The score of every shared MLPerf tree equals the official result summarizer's
  (mlperf-logging, run as a separate process on a copy of the tree, because it
  writes and deletes scaling.json beside the logs).
* Scores and throughputs equal the published values in
  docs/mlperf-bert-results.md.
* The olympic average equals the official implementation on random inputs,
  including failed runs.
* Every output format parses; the plots are PNGs of the promised size.
* The regression flag fires on a synthetically slowed copy of a tree (by the
  score for a large slowdown, by the throughput for a small one) and not on a
  tree compared with itself or a faster copy.
* Bad input gives one line on stderr and exit status 2.

Shared data is found in ../shared beside the repository, or where
BERTPERF_SHARED_DIR points; tests that need it skip when it is absent.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from bertperf_compliance.report.cli import main as report_main
from bertperf_compliance.report.plots import FIGURE_SIZE_PX
from bertperf_compliance.report.systems import find_result_sets, olympic_mean

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("BERTPERF_SHARED_DIR", REPO.parent / "shared"))
RESULTS = SHARED / "mlperf-results"
DOC = SHARED / "docs" / "mlperf-bert-results.md"

# The shared trees, as round/submitter. The official summarizer scores v2.1 under the 2.0.0 rules:
# mlperf-logging 4.1.68's training_2.1.0 rules require opt_lamb_epsilon, a rule added after the
# v2.1 round closed; the published v2.1 logs carry only opt_epsilon, so that checker rejects every
# run and reports no score. The 2.0.0 rules check the same run_start/run_stop/accuracy events and
# accept these logs, so they give the official score of the v2.1 trees.
TREES = ["v2.1/Baidu", "v2.1/NVIDIA", "v4.0/NVIDIA"]

needs_shared = pytest.mark.skipif(not RESULTS.is_dir(),
                                  reason=f"shared MLPerf result trees not found at {RESULTS} "
                                         "(set BERTPERF_SHARED_DIR)")


# The three trees the table tests were written against: the shared folder may hold more rounds and submitters.
THREE_TREES = [("v2.1", "Baidu"), ("v2.1", "NVIDIA"), ("v4.0", "NVIDIA")]


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """A copy of the shared Baidu v2.1, NVIDIA v2.1 and NVIDIA v4.0 trees, in that layout."""
    root = tmp_path_factory.mktemp("three_trees")
    for round_name, org in THREE_TREES:
        shutil.copytree(RESULTS / round_name / org, root / round_name / org)
    return root


def run_report(args, capsys):
    """Run bertperf-report in-process; returns (exit status, stdout, stderr)."""
    status = report_main([str(a) for a in args])
    out = capsys.readouterr()
    return status, out.out, out.err


OFFICIAL_JOBS = {
    # job name: (source org directories, ruleset)
    "v2.1": ([("v2.1", "Baidu"), ("v2.1", "NVIDIA")], "2.0.0"),
    "v4.0": ([("v4.0", "NVIDIA")], "4.0.0"),
    "dropped": ([("dropped", "NVIDIA")], "4.0.0"),
    "scaled": ([("scaled", "NVIDIA")], "4.0.0"),
    "late_init": ([("late_init", "NVIDIA")], "4.0.0"),
    "late_init2": ([("late_init2", "NVIDIA")], "4.0.0"),
}
LATE_INIT_RUNS = {"late_init": ["result_2.txt"], "late_init2": ["result_2.txt", "result_6.txt"]}
H200_BERT = Path("results") / "h200_ngc23.09_pytorch" / "bert"


def _make_dropped_run_tree(dest: Path) -> None:
    """The v4.0 tree with one run that never reaches the target and stops as aborted."""
    shutil.copytree(RESULTS / "v4.0" / "NVIDIA", dest)
    log = dest / H200_BERT / "result_3.txt"
    text = log.read_text(encoding="latin-1")
    text = re.sub(r'("key": "eval_accuracy", "value": )[0-9.]+', r"\g<1>0.5", text)
    text = text.replace('"status": "success"', '"status": "aborted"')
    log.write_text(text, encoding="latin-1")


def _make_late_init_tree(dest: Path, runs) -> None:
    """The v4.0 tree where the given runs converge but took 32 min to initialise (30 allowed):
    every init_start moved 32 minutes earlier."""
    shutil.copytree(RESULTS / "v4.0" / "NVIDIA", dest)
    for name in runs:
        log = dest / H200_BERT / name
        text = log.read_text(encoding="latin-1")
        text = re.sub(r'"time_ms": (\d+)(, "event_type": "INTERVAL_START", "key": "init_start")',
                      lambda m: f'"time_ms": {int(m.group(1)) - 32 * 60_000}{m.group(2)}', text)
        log.write_text(text, encoding="latin-1")


def _make_scaled_tree(dest: Path) -> None:
    """The v4.0 tree with a scaling.json, as the package checker leaves one."""
    shutil.copytree(RESULTS / "v4.0" / "NVIDIA", dest)
    (dest / H200_BERT / "scaling.json").write_text('{"scaling_factor": 1.05}')


def _make_faster_converging_tree(dest: Path) -> None:
    """The v4.0 tree with every sample count cut by 3%: faster than the RCP, within its allowance."""
    shutil.copytree(RESULTS / "v4.0" / "NVIDIA", dest)
    for log in (dest / H200_BERT).glob("result_*.txt"):
        text = log.read_text(encoding="latin-1")
        text = re.sub(r'"epoch_num": (\d{4,})', lambda m: f'"epoch_num": {round(int(m.group(1)) * 0.97)}', text)
        text = re.sub(r'("key": "train_samples", "value": )(\d+)',
                      lambda m: f"{m.group(1)}{round(int(m.group(2)) * 0.97)}", text)
        log.write_text(text, encoding="latin-1")


@pytest.fixture(scope="session")
def official(tmp_path_factory):
    """The official result summarizer's detailed rows, keyed by (round, submitter).

    It runs as separate processes, in parallel to save time, on copies of the trees: it deletes
    and writes scaling.json beside the logs, which must never happen to the shared data.
    """
    if not RESULTS.is_dir():
        pytest.skip(f"shared MLPerf result trees not found at {RESULTS} (set BERTPERF_SHARED_DIR)")
    pytest.importorskip("mlperf_logging")
    pytest.importorskip("pandas")
    root = tmp_path_factory.mktemp("official")
    procs = {}
    for job, (orgs, ruleset) in OFFICIAL_JOBS.items():
        work = root / job
        for round_name, org in orgs:
            dest = work / "orgs" / org
            if round_name == "dropped":
                _make_dropped_run_tree(dest)
            elif round_name == "scaled":
                _make_scaled_tree(dest)
            elif round_name in LATE_INIT_RUNS:
                _make_late_init_tree(dest, LATE_INIT_RUNS[round_name])
            else:
                shutil.copytree(RESULTS / round_name / org, dest)
        folder = str(work / "orgs") + "/{*}"  # every organisation folder in it
        procs[job] = subprocess.Popen(
            [sys.executable, "-m", "mlperf_logging.result_summarizer", folder, "training",
             ruleset, "--csv", str(work / "summary.csv")],
            cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rows = {}
    for job, proc in procs.items():
        output, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, output
        for row in json.loads((root / job / "summary_detailed.json").read_text()):
            rows[(job, row["submitter"])] = row
    return rows


def ours(org_dir: Path):
    (result_set,) = find_result_sets([str(org_dir)])
    return result_set


# ---------------------------------------------------------------- scores against the official tools


@needs_shared
@pytest.mark.parametrize("org", TREES)
def test_score_equals_official_summarizer(org, official):
    round_name, submitter = org.split("/")
    row = official[(round_name, submitter)]
    mine = ours(RESULTS / org)
    assert row["bert:time_to_train"] is not None
    assert mine.score_min == pytest.approx(row["bert:time_to_train"], rel=0, abs=1e-9)
    assert mine.global_batch_size == row["bert:GBS"]
    assert mine.accelerators == row["accelerators_count"]
    first = mine.runs[0]
    if first.samples_source == "eval epoch_num":
        assert mine.samples_to_converge == row["bert:samples_to_converge"]
    else:
        # Baidu logs epoch_num 1 in every eval; the summarizer then reports 1.0 samples and we
        # fall back to train_samples (what Baidu's own RCP check used).
        assert row["bert:samples_to_converge"] == 1.0
        assert first.samples_source == "train_samples"


@needs_shared
def test_dropped_run_matches_official_summarizer(official, tmp_path):
    """One run never reaches the target: both drop it and average the fastest-but-one eight."""
    org = tmp_path / "NVIDIA"
    _make_dropped_run_tree(org)
    row = official[("dropped", "NVIDIA")]
    mine = ours(org)
    assert mine.dropped == 1
    assert mine.score_min == pytest.approx(row["bert:time_to_train"], rel=0, abs=1e-9)
    assert mine.samples_to_converge == row["bert:samples_to_converge"]


@needs_shared
@pytest.mark.parametrize("job", sorted(LATE_INIT_RUNS))
def test_compliance_filter_matches_official_summarizer(official, tmp_path, job, capsys):
    """Runs that converged but overran the 30-minute init budget: with the ruleset, the reporter
    drops them as the summarizer does (one: the olympic mean of the rest; two: no score), and
    names each with its reason; without a ruleset it keeps them."""
    org = tmp_path / "NVIDIA"
    _make_late_init_tree(org, LATE_INIT_RUNS[job])
    row = official[(job, "NVIDIA")]
    (mine,) = find_result_sets([str(org)], ruleset="4.0.0")
    assert sorted(r.name for r in mine.runs if not r.converged) == LATE_INIT_RUNS[job]
    theirs = row["bert:time_to_train"]
    if len(LATE_INIT_RUNS[job]) == 1:
        assert mine.score_min == pytest.approx(theirs, rel=0, abs=1e-9)
        assert mine.score_min != pytest.approx(ours(org).score_min, rel=0, abs=1e-9)
    else:
        assert theirs is None or theirs != theirs  # no score (None or NaN)
        assert mine.score_min is None
    for run in mine.runs:
        if not run.converged:
            assert "init_stop" in run.failure and "initialisation took 32" in run.failure
            assert f"dropped {run.name}" in mine.score_note
    assert ours(org).dropped == 0  # no ruleset: no compliance filter
    status, out, _ = run_report([org, "--ruleset", "4.0.0", "--format", "markdown"], capsys)
    assert status == 0
    for name in LATE_INIT_RUNS[job]:
        assert f"dropped {name}" in out


# Real trees where the compliance filter changes the outcome. They are looked up in the shared
# results (as <round>/<submitter>, from the MLCommons training_results repositories) and skipped
# when absent. The v5.0 tinycorp tinybox_green run result_2 converged but initialised for 32.3 of
# the allowed 30 minutes: the summarizer's published score is 213.60 min, 209.95 with that run.
# The v2.1 Fujitsu logs carry only opt_epsilon, which ruleset 2.1.0 no longer accepts.
FILTERED_TREES = {"v5.0/tinycorp": "5.0.0", "v2.1/Fujitsu": "2.1.0"}


def _summarizer_scores(org: Path, ruleset: str, tmp_path: Path):
    """system_name -> the official summarizer's bert time_to_train (None: no score), and its output."""
    work = tmp_path / "summarizer"
    shutil.copytree(org, work / "orgs" / org.name)
    proc = subprocess.run([sys.executable, "-m", "mlperf_logging.result_summarizer", str(work / "orgs") + "/{*}",
                           "training", ruleset, "--csv", str(work / "summary.csv")],
                          cwd=work, capture_output=True, text=True, timeout=600)
    detailed = work / "summary_detailed.json"
    rows = json.loads(detailed.read_text()) if detailed.exists() else []
    scores = {row["system"]: row.get("bert:time_to_train") for row in rows}
    return scores, proc.stdout + proc.stderr


@pytest.mark.parametrize("org", sorted(FILTERED_TREES))
def test_compliance_filter_on_real_trees_matches_official_summarizer(org, tmp_path):
    tree = RESULTS / org
    if not tree.is_dir():
        pytest.skip(f"{tree} not in the shared results")
    pytest.importorskip("pandas")
    ruleset = FILTERED_TREES[org]
    sets = [s for s in find_result_sets([str(tree)], ruleset=ruleset) if s.benchmark == "bert"]
    scores, output = _summarizer_scores(tree, ruleset, tmp_path)
    assert sets
    for mine in sets:
        name = json.loads((tree / "systems" / f"{mine.system}.json").read_text())["system_name"]
        assert name in scores, (name, output[-2000:])
        theirs = scores[name]
        if theirs is None or theirs != theirs:  # no score: "too many non-converging runs"
            assert f"Too many non-converging runs for {tree.name} {mine.system}/bert" in output
            assert mine.score_min is None and mine.score_note.startswith("no score")
        else:
            assert mine.score_min == pytest.approx(theirs, rel=0, abs=1e-9)
    if org == "v5.0/tinycorp":
        (green,) = [s for s in sets if s.system == "tinybox_green"]
        assert round(green.score_min, 2) == 213.60
        assert [r.name for r in green.runs if not r.converged] == ["result_2.txt"]
        assert "dropped result_2.txt" in green.score_note and "initialisation took 32.29 min, budget 30 min" in green.score_note
    else:
        assert all(s.score_min is None for s in sets)


@needs_shared
def test_scaling_json_matches_official_summarizer(official, tmp_path):
    org = tmp_path / "NVIDIA"
    _make_scaled_tree(org)
    mine = ours(org)
    assert (mine.scaling_factor, mine.scaling_source) == (1.05, "scaling.json")
    assert mine.score_min == pytest.approx(official[("scaled", "NVIDIA")]["bert:time_to_train"],
                                           rel=0, abs=1e-9)


@needs_shared
def test_rcp_factor_equals_official_rcp_checker(tmp_path):
    """Without scaling.json the score carries the factor the official RCP checker would write."""
    rcp_checker = pytest.importorskip("mlperf_logging.rcp_checker.rcp_checker")
    pytest.importorskip("scipy")
    org = tmp_path / "NVIDIA"
    _make_faster_converging_tree(org)
    mine = ours(org)  # before the official checker writes scaling.json into the copy
    passed, message, _ = rcp_checker.check_directory(
        str(org / H200_BERT), "training", "4.0.0", False, False, rcp_pass="pruned_rcps",
        set_scaling=True)
    written = json.loads((org / H200_BERT / "scaling.json").read_text())["scaling_factor"]
    assert passed and message == "RCP Interpolation" and written > 1.0
    assert (mine.rcp_verdict, mine.rcp_message) == ("pass", message)
    assert mine.scaling_source == "RCP"
    assert mine.scaling_factor == pytest.approx(written, rel=1e-12)
    assert mine.score_min == pytest.approx(mine.olympic_min * written, rel=1e-12)


def test_olympic_mean_equals_official_average():
    summarizer = pytest.importorskip("mlperf_logging.result_summarizer.result_summarizer")
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(2, 12)
        dropped = rng.randint(0, 2)
        values = [rng.uniform(1.0, 30.0) for _ in range(n)]
        expected = None if dropped > 1 else summarizer._compute_olympic_average(list(values), dropped, 1)
        got = olympic_mean(values, dropped)
        if expected is None:
            assert got is None
        else:
            assert got == pytest.approx(expected, rel=1e-12)


# ---------------------------------------------------------------- published numbers


def _published_row(system: str):
    """Cells of the first table row naming `system`, keyed by its table's header (markup removed)."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    header = None
    for i, line in enumerate(lines):
        if line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|[-| ]+\|$", lines[i + 1]):
            header = [c.strip().strip("*").strip() for c in line.strip("|").split("|")]
        elif line.startswith("|") and header and system in line:
            cells = [c.strip().replace("*", "") for c in line.strip("|").split("|")]
            return dict(zip(header, cells))
    raise AssertionError(f"{system} not in a table of {DOC}")


def _number(cell: str) -> float:
    return float(re.match(r"[0-9][0-9,]*\.?[0-9]*", cell).group(0).replace(",", ""))


PUBLISHED = [
    # (org, doc system name, score column, effective throughput column, train-only column)
    ("v2.1/Baidu", "8_node_64_A100_PaddlePaddle", "Score min", "Eff. s/s", None),
    ("v2.1/NVIDIA", "dgxa100_n8_ngc22.09_pytorch", "Score min", "Eff. s/s", None),
    ("v4.0/NVIDIA", "h200_ngc23.09", "Score", "Eff s/s", "train-only s/s"),
]


@pytest.mark.skipif(not DOC.is_file(), reason=f"published results note not found at {DOC}")
@needs_shared
@pytest.mark.parametrize("org, name, score_col, eff_col, train_col", PUBLISHED,
                         ids=[p[0] for p in PUBLISHED])
def test_matches_published_results(org, name, score_col, eff_col, train_col):
    row = _published_row(name)
    mine = ours(RESULTS / org)
    assert round(mine.score_min, 3) == pytest.approx(_number(row[score_col]), abs=1e-9)
    assert round(mine.mean_of("throughput_effective")) == _number(row[eff_col])
    if train_col:
        assert round(mine.mean_of("throughput_train_only")) == _number(row[train_col])
    else:
        assert mine.mean_of("throughput_train_only") is None  # v2.1 logs have no eval_start/stop


@pytest.mark.skipif(not DOC.is_file(), reason=f"published results note not found at {DOC}")
@needs_shared
def test_steady_throughput_matches_published_interval_rate():
    """The note: steady-state interval rate 18,851 (Baidu) vs 18,625 samples/s (NVIDIA)."""
    quoted = re.search(r"Steady-state interval rate ([0-9,]+) vs ([0-9,]+) samples/s",
                       DOC.read_text(encoding="utf-8"))
    for org, published in zip(("v2.1/Baidu", "v2.1/NVIDIA"), quoted.groups()):
        steady = ours(RESULTS / org).mean_of("throughput_steady")
        assert steady == pytest.approx(_number(published), rel=2e-4)


@pytest.mark.skipif(not DOC.is_file(), reason=f"published results note not found at {DOC}")
@needs_shared
def test_baidu_samples_equal_its_rcp_log():
    """Baidu's package_checker.log, quoted in the note, gives its olympic train_samples."""
    quoted = re.search(r"Submission mean epochs: ([0-9.]+)", DOC.read_text(encoding="utf-8"))
    assert ours(RESULTS / "v2.1" / "Baidu").samples_to_converge == float(quoted.group(1))


# ---------------------------------------------------------------- output formats


def _markdown_tables(text: str):
    """Split Markdown into tables; each is a list of rows of cells (escaped pipes kept in cells)."""
    tables, current = [], None
    for line in text.splitlines():
        if line.startswith("|"):
            assert line.endswith("|") and not line.endswith("\\|"), line
            cells = re.split(r"(?<!\\)\|", line[1:-1])
            if current is None:
                current = []
                tables.append(current)
            current.append([c.strip() for c in cells])
        else:
            current = None
    return tables


@needs_shared
def test_markdown_renders_as_valid_tables(capsys, three):
    status, out, _ = run_report([three, "--format", "markdown"], capsys)
    assert status == 0
    tables = _markdown_tables(out)
    assert len(tables) == 3  # systems, runs, comparisons
    for table in tables:
        header, separator, *body = table
        assert all(re.fullmatch(r":?-{3,}:?", c) for c in separator)
        assert len(separator) == len(header) and all(h for h in header)
        assert body and all(len(row) == len(header) for row in body)
    systems, runs, _ = tables
    assert len(systems) - 2 == 3 and len(runs) - 2 == 30
    score_col = systems[0].index("score min")
    assert sorted(row[score_col] for row in systems[2:]) == ["2.4759", "2.4974", "5.2116"]
    for title in ("Systems", "Runs", "Comparisons"):
        assert re.search(rf"^### {title}", out, re.M)


@needs_shared
@pytest.mark.parametrize("table, rows", [("systems", 3), ("runs", 30), ("comparisons", 2)])
def test_csv_parses(table, rows, capsys, three):
    status, out, _ = run_report([three, "--format", "csv", "--table", table], capsys)
    assert status == 0
    parsed = list(csv.DictReader(io.StringIO(out)))
    assert len(parsed) == rows
    if table == "systems":
        by_label = {r["label"]: r for r in parsed}
        assert float(by_label["NVIDIA/h200_ngc23.09_pytorch"]["score_min"]) == pytest.approx(5.21165)
        assert by_label["Baidu/8_node_64_A100_PaddlePaddle"]["throughput_train_only"] == ""
    if table == "runs":
        assert all(float(r["time_to_train_min"]) > 0 for r in parsed)
    if table == "comparisons":
        for name in ("time", "throughput"):
            assert all(float(r[f"{name}_ci_low"]) <= float(r[f"{name}_ratio"]) <= float(r[f"{name}_ci_high"])
                       for r in parsed)


@needs_shared
def test_json_parses(capsys, tmp_path, three):
    out_file = tmp_path / "report.json"
    status, out, _ = run_report([three, "--format", "json", "--output", out_file], capsys)
    assert status == 0 and out == ""
    doc = json.loads(out_file.read_text())
    assert [s["label"] for s in doc["systems"]] == [
        "Baidu/8_node_64_A100_PaddlePaddle", "NVIDIA/dgxa100_n8_ngc22.09_pytorch",
        "NVIDIA/h200_ngc23.09_pytorch"]
    assert len(doc["runs"]) == 30
    run0 = doc["runs"][20]
    assert run0["run"] == "result_0.txt" and run0["eval_curve"][-1] == [2398552, pytest.approx(0.72005, abs=1e-4)]
    assert len(run0["interval_samples_per_s"]) == len(run0["eval_curve"])
    for c in doc["comparisons"]:
        assert {c["time_verdict"], c["throughput_verdict"]} <= {"slower", "faster", "within noise"}


# ---------------------------------------------------------------- plots


def _png_size(path: Path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    assert data[-8:-4] == b"IEND"
    return struct.unpack(">II", data[16:24])


@needs_shared
def test_plots_are_pngs_of_the_right_size(capsys, tmp_path, three):
    plots = tmp_path / "plots"
    status, _, err = run_report([three, "--plots", plots], capsys)
    assert status == 0
    names = sorted(p.name for p in plots.iterdir())
    assert names == ["accuracy_vs_samples.png", "interval_throughput.png", "throughput.png",
                     "time_to_train.png"]
    for name in names:
        assert _png_size(plots / name) == FIGURE_SIZE_PX
        assert str(plots / name) in err


# ---------------------------------------------------------------- comparisons and regressions


def _slowed_copy(org_dir: Path, dest: Path, factor: float) -> Path:
    """Copy a tree, stretching every event's time after run_start by `factor`."""
    shutil.copytree(org_dir, dest)
    for log in dest.rglob("result_*.txt"):
        text = log.read_text(encoding="latin-1")
        start = int(re.search(r'"time_ms": (\d+), "event_type": "[A-Z_]+", "key": "run_start"',
                              text).group(1))

        def stretch(match):
            t = int(match.group(1))
            return f'"time_ms": {start + round((t - start) * factor) if t > start else t}'

        log.write_text(re.sub(r'"time_ms": (\d+)', stretch, text), encoding="latin-1")
    return dest


def _only_comparison(args, capsys):
    status, out, _ = run_report([*args, "--format", "json", "--fail-on-regression"], capsys)
    (comparison,) = json.loads(out)["comparisons"]
    return status, comparison


@needs_shared
@pytest.mark.parametrize("org", ["v4.0/NVIDIA", "v2.1/Baidu"])
def test_regression_flag_fires_on_slowed_copy(org, capsys, tmp_path):
    original = RESULTS / org
    # Stored under another name: the same system is recognised by its system description.
    slowed = _slowed_copy(original, tmp_path / "rerun", 1.15)
    status, c = _only_comparison([original, slowed], capsys)
    assert status == 1
    assert c["same_system"] and c["regression"] and c["regression_in"] == "time and throughput"
    assert c["time_verdict"] == c["throughput_verdict"] == "slower"
    assert c["time_ratio"] == pytest.approx(1.15, abs=1e-4)
    assert 1.0 < c["time_ci_low"] < 1.15 < c["time_ci_high"]
    assert c["throughput_ratio"] == pytest.approx(1 / 1.15, abs=1e-4)
    assert c["throughput_ci_high"] < 1.0


@needs_shared
def test_small_slowdown_is_caught_by_throughput_only(capsys, tmp_path):
    """3% slower steps: lost in the convergence noise of the score, clear in the throughput."""
    original = RESULTS / "v4.0" / "NVIDIA"
    status, c = _only_comparison([original, _slowed_copy(original, tmp_path / "rerun", 1.03)], capsys)
    assert status == 1
    assert c["time_verdict"] == "within noise" and c["throughput_verdict"] == "slower"
    assert c["regression"] and c["regression_in"] == "throughput"


@needs_shared
def test_faster_copy_is_no_regression(capsys, tmp_path):
    original = RESULTS / "v4.0" / "NVIDIA"
    status, c = _only_comparison([original, _slowed_copy(original, tmp_path / "rerun", 0.85)], capsys)
    assert status == 0
    assert c["time_verdict"] == c["throughput_verdict"] == "faster" and not c["regression"]


@needs_shared
@pytest.mark.parametrize("org", ["v4.0/NVIDIA", "v2.1/NVIDIA"])
def test_no_regression_against_itself(org, capsys):
    tree = RESULTS / org
    status, c = _only_comparison([tree, tree], capsys)
    assert status == 0
    assert c["same_system"] and not c["regression"] and c["regression_in"] == ""
    for name in ("time", "throughput"):
        assert c[f"{name}_ratio"] == 1.0
        assert c[f"{name}_ci_low"] < 1.0 < c[f"{name}_ci_high"]
        assert c[f"{name}_verdict"] == "within noise"


@needs_shared
def test_sets_of_one_system_are_named_by_their_trees(capsys, tmp_path):
    """A rerun beside its baseline: each set says which tree it is, in the tables and in the plots."""
    from bertperf_compliance.report.plots import _accuracy_figure, _throughput_figure, _time_figure
    original = RESULTS / "v4.0" / "NVIDIA"
    rerun = _slowed_copy(original, tmp_path / "rerun", 1.0)
    labels = [f"NVIDIA/h200_ngc23.09_pytorch ({original})", f"NVIDIA/h200_ngc23.09_pytorch ({rerun})"]
    status, out, _ = run_report([original, rerun, "--format", "json"], capsys)
    assert status == 0
    doc = json.loads(out)
    assert [s["label"] for s in doc["systems"]] == labels
    (comparison,) = doc["comparisons"]
    assert (comparison["baseline"], comparison["candidate"]) == tuple(labels)
    status, out, _ = run_report([original, rerun, "--format", "markdown"], capsys)
    assert all(out.count(label) >= 2 for label in labels) and "#1" not in out and "#2" not in out
    sets = find_result_sets([str(original), str(rerun)])
    # A long label is broken into lines (plots.py); joined, the lines are the label.
    for figure in (_time_figure(sets), _throughput_figure(sets)):
        ticks = [t.get_text().replace("\n", "") for t in figure.axes[0].get_yticklabels()]
        assert sorted(ticks) == sorted(labels)
    legend = [t.get_text().replace("\n", "") for t in _accuracy_figure(sets, 0.72).axes[0].get_legend().get_texts()]
    assert all(label in legend for label in labels)
    # The same folder given twice can only be told apart by position.
    twice = find_result_sets([str(original), str(original)])
    assert [s.label for s in twice] == [f"{labels[0]} #1", f"{labels[0]} #2"]


@needs_shared
@pytest.mark.filterwarnings("error")  # e.g. constrained layout's "axes sizes collapsed to zero"
def test_plot_titles_fit_their_figures(tmp_path):
    """Every title lies inside its figure, and every axes keeps at least a quarter of its width, with set labels as
    long as a rerun's in a deep folder beside its baseline (the labels take the axes' left side), and no warning
    from the layout."""
    from bertperf_compliance.report.plots import (_accuracy_figure, _interval_figure, _throughput_figure,
                                                  _time_figure)
    original = RESULTS / "v4.0" / "NVIDIA"
    rerun = _slowed_copy(original, tmp_path / "a-rerun-beside-its-baseline-in-a-folder-with-a-long-name" / "rerun", 1.0)
    sets = find_result_sets([str(original), str(rerun)])
    for figure in (_accuracy_figure(sets, 0.72), _time_figure(sets), _throughput_figure(sets),
                   _interval_figure(sets)):
        figure.canvas.draw()
        renderer = figure.canvas.get_renderer()
        titles = [figure._suptitle] + [ax.title for ax in figure.axes]
        titles = [t for t in titles if t is not None and t.get_text()]
        assert titles
        for ax in figure.axes:
            assert ax.get_window_extent(renderer).width >= figure.bbox.width / 4, figure._suptitle.get_text()
        for title in titles:
            extent = title.get_window_extent(renderer)
            assert 0 <= extent.x0 and extent.x1 <= figure.bbox.width, \
                f"{title.get_text()!r} spans x {extent.x0:.0f}-{extent.x1:.0f} of {figure.bbox.width:.0f}"


@needs_shared
def test_baseline_by_label_and_position(capsys, three):
    h200 = "NVIDIA/h200_ngc23.09_pytorch"
    for choice in (h200, "3"):
        status, out, _ = run_report([three, "--format", "json", "--baseline", choice], capsys)
        assert status == 0
        comparisons = json.loads(out)["comparisons"]
        assert [c["baseline"] for c in comparisons] == [h200, h200]
        assert all(c["time_verdict"] == "faster" and c["time_ratio"] < 0.5 for c in comparisons)
    status, _, err = run_report([three, "--baseline", "9"], capsys)
    assert status == 2 and err.count("\n") == 1 and "--baseline" in err


@needs_shared
def test_set_without_score_is_not_compared(capsys, tmp_path):
    org = tmp_path / "NVIDIA"
    shutil.copytree(RESULTS / "v4.0" / "NVIDIA", org)
    for n in (1, 2):  # two aborted runs: more than the one the rules tolerate
        log = org / H200_BERT / f"result_{n}.txt"
        log.write_text(log.read_text(encoding="latin-1").replace('"status": "success"', '"status": "aborted"'),
                       encoding="latin-1")
    status, out, _ = run_report([RESULTS / "v4.0", org, "--format", "json", "--fail-on-regression"], capsys)
    assert status == 0
    doc = json.loads(out)
    assert doc["systems"][1]["score_min"] is None and "2 of 10 runs" in doc["systems"][1]["note"]
    assert [r["counted"] for r in doc["runs"][10:13]] == [
        "yes", "no: run_stop status 'aborted'", "no: run_stop status 'aborted'"]
    (comparison,) = doc["comparisons"]
    assert comparison["time_verdict"] == "n/a" and comparison["time_ratio"] is None
    assert comparison["throughput_verdict"] == "within noise" and not comparison["regression"]


@needs_shared
def test_comparison_is_reproducible(capsys, three):
    args = [RESULTS, "--format", "csv", "--table", "comparisons", "--seed", "3"]
    first = run_report(args, capsys)[1]
    assert run_report(args, capsys)[1] == first


# ---------------------------------------------------------------- bad input


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "bertperf_compliance.report.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def _assert_one_line_error(proc, *fragments):
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_missing_tree(tmp_path):
    _assert_one_line_error(_cli(tmp_path / "nowhere"), "nowhere", "no such file or directory")


def test_tree_without_logs(tmp_path):
    _assert_one_line_error(_cli(tmp_path), "no result_*.txt")


@needs_shared
def test_malformed_log(tmp_path):
    org = tmp_path / "NVIDIA"
    shutil.copytree(RESULTS / "v4.0" / "NVIDIA", org)
    log = org / "results" / "h200_ngc23.09_pytorch" / "bert" / "result_5.txt"
    lines = log.read_text(encoding="latin-1").splitlines(keepends=True)
    lines[40] = ':::MLLOG {"namespace": "", "time_ms": 17152\n'
    log.write_text("".join(lines), encoding="latin-1")
    _assert_one_line_error(_cli(org), "result_5.txt:41:", "malformed MLLOG line")


@needs_shared
def test_non_finite_values(tmp_path, capsys):
    """NaN accuracy is ignored (the run still converges); an infinite timestamp is a malformed log."""
    org = tmp_path / "NVIDIA"
    shutil.copytree(RESULTS / "v4.0" / "NVIDIA", org)
    log = org / H200_BERT / "result_2.txt"
    text = log.read_text(encoding="latin-1")
    log.write_text(re.sub(r'("key": "eval_accuracy", "value": )[0-9.]+', r"\g<1>NaN", text, count=1),
                   encoding="latin-1")
    status, out, _ = run_report([org, "--format", "json"], capsys)
    assert status == 0
    assert json.loads(out)["systems"][0]["score_min"] == pytest.approx(5.21165)
    log.write_text(re.sub(r'"time_ms": \d+(, "event_type": "INTERVAL_END", "key": "run_stop")',
                          r'"time_ms": Infinity\1', text), encoding="latin-1")
    _assert_one_line_error(_cli(org), "result_2.txt:", "time_ms is inf")


def test_log_without_run_start(tmp_path):
    bench = tmp_path / "results" / "sys" / "bert"
    bench.mkdir(parents=True)
    (bench / "result_0.txt").write_text("hello\n")
    _assert_one_line_error(_cli(tmp_path), "result_0.txt", "no run_start")


def test_bad_option(tmp_path):
    _assert_one_line_error(_cli(tmp_path, "--format", "xml"), "--format")


@needs_shared
def test_a_train_samples_budget_logged_before_run_start_is_not_samples_trained(tmp_path):
    """Some submitters (Habana, Google's TPU v4, tinycorp) log train_samples before run_start as a planned budget;
    the samples trained and the throughput come from the evals then, as the RCP checker reads them."""
    from bertperf_compliance.report.runs import read_run

    original = RESULTS / "v4.0" / "NVIDIA" / H200_BERT / "result_0.txt"
    lines = original.read_text(encoding="latin-1").splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if '"key": "run_start"' in line)
    record = json.loads(lines[start].split(":::MLLOG ", 1)[1])
    budget = {**record, "event_type": "POINT_IN_TIME", "key": "train_samples", "value": 9_000_000, "time_ms":
              record["time_ms"] - 1}
    # The budget before run_start, and no train_samples at the end (as those logs have it).
    rest = [line for line in lines[start:] if '"key": "train_samples"' not in line]
    planned = tmp_path / "result_0.txt"
    planned.write_text("".join(lines[:start] + [":::MLLOG " + json.dumps(budget) + "\n"] + rest), encoding="latin-1")
    before, after = read_run(str(original)), read_run(str(planned))
    assert after.planned_samples == 9_000_000
    assert after.samples_to_converge == before.samples_to_converge
    assert after.trained_samples == after.samples_to_converge
    assert after.throughput_effective == pytest.approx(after.samples_to_converge / (after.time_to_train_min * 60))


@needs_shared
def test_data_wait_is_summed_beside_throughput_and_absent_from_other_logs(tmp_path, capsys):
    """bertperf logs the seconds each eval interval waited for data in tracked_stats (data_wait_s); the reporter sums
    them per run and shows them beside throughput; a log without them (another submitter's) has none."""
    from bertperf_compliance.report.runs import read_run

    original = RESULTS / "v4.0" / "NVIDIA" / H200_BERT / "result_0.txt"
    lines = original.read_text(encoding="latin-1").splitlines(keepends=True)
    assert read_run(str(original)).data_wait_s is None
    evals = [i for i, line in enumerate(lines) if '"key": "eval_accuracy"' in line][:3]
    waits = [0.25, 0.0, 1.5]
    for i, wait in zip(reversed(evals), reversed(waits)):
        record = json.loads(lines[i].split(":::MLLOG ", 1)[1])
        stats = {**record, "key": "tracked_stats", "value": {"throughput": 1000.0, "data_wait_s": wait}}
        lines.insert(i, ":::MLLOG " + json.dumps(stats) + "\n")
    tree = tmp_path / "tree" / "results" / "sys" / "bert"
    tree.mkdir(parents=True)
    (tree / "result_0.txt").write_text("".join(lines), encoding="latin-1")
    run = read_run(str(tree / "result_0.txt"))
    assert run.data_wait_s == pytest.approx(sum(waits))
    assert run.data_wait_share == pytest.approx(sum(waits) / (run.time_to_train_min * 60))
    # In the report's runs table, beside the throughputs.
    status, _, _ = run_report([tmp_path / "tree", "--format", "json", "--output", tmp_path / "report.json"], capsys)
    assert status == 0
    row = json.loads((tmp_path / "report.json").read_text())["runs"][0]
    assert row["data_wait_s"] == pytest.approx(sum(waits))
    status, out, _ = run_report([tmp_path / "tree"], capsys)
    assert "data wait s" in out and "1.75" in out
