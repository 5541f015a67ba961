"""The scaling model's data set (benchmarks/bert/mlperf/reference/published_systems.json) against the
published result trees it is derived from.

- The rows of the committed data set for the trees in the shared results (v2.1 Baidu 8x8, v2.1 NVIDIA
  8x8, v4.0 NVIDIA 1xH200, v5.0 tinycorp 8xMI300X, and the others there) equal what the extractor
  computes from them now.
- Their times, samples and batch equal what this test reads from the logs itself with the log parser
  (olympic mean of run_stop - run_start over the converged runs; samples to converge as the RCP checker
  reads them, the epoch_num of the last eval_accuracy before run_stop, or train_samples where the evals
  carry no sample count, averaged over the converged runs), and Baidu's eval cadence and start-up equal
  what the results note reads from the same logs (an eval every 57 steps of 3072, 175,104 samples; the
  first eval 12.6 s after run_start against 9.3 s a later interval).
- A train_samples logged before training as a planned budget (tinycorp's, Habana's) is not the samples
  to converge; the host processor fields are the description's, as written.
- A result copied into a later round is marked as the earlier one's; open-division systems are left out.
- Bad input is one line and exit status 2.
"""
import json
import math
import shutil
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bertperf_paths import REPO  # noqa: E402
from compliance_support import require_results  # noqa: E402
from bertperf_compliance import published  # noqa: E402
from bertperf_compliance.mllog_parse import parse_file  # noqa: E402

DATASET = REPO / "benchmarks" / "bert" / "mlperf" / "reference" / "published_systems.json"
COMMITTED = {row["id"]: row for row in json.loads(DATASET.read_text())["systems"]}
NAMED = ["v2.1 Baidu 8_node_64_A100_PaddlePaddle", "v2.1 NVIDIA dgxa100_n8_ngc22.09_pytorch",
         "v4.0 NVIDIA h200_ngc23.09_pytorch", "v5.0 tinycorp tinybox_8xMI300X"]
TINYCORP = "v5.0 tinycorp tinybox_8xMI300X"


@pytest.fixture(scope="module")
def shared_rows():
    return {row["id"]: row for row in published.extract([str(require_results())])}


def test_committed_rows_equal_the_extractor_on_the_shared_trees(shared_rows):
    assert set(NAMED) <= set(shared_rows)
    for row_id, row in shared_rows.items():
        assert COMMITTED[row_id] == row, row_id


def log_figures(tree: Path):
    """Global batch, olympic-mean minutes over converged runs, their mean samples to converge, the
    train_samples values logged, and the eval points."""
    minutes, samples, logged, gbs, evals = [], [], [], set(), []
    for path in sorted(tree.glob("result_*.txt")):
        records, errors = parse_file(path)
        assert not errors, f"{path}: {errors[0]}"
        by_key = {}
        for r in records:
            by_key.setdefault(r.key, []).append(r)
        gbs.update(r.value for r in by_key["global_batch_size"])
        logged.append(by_key["train_samples"][0].value)
        stop = by_key.get("run_stop", [])
        ok = bool(stop) and stop[0].metadata.get("status") == "success" and \
            any(r.value >= 0.72 for r in by_key["eval_accuracy"])
        minutes.append((stop[0].time_ms - by_key["run_start"][0].time_ms) / 60000 if ok else math.inf)
        evals.append((by_key["run_start"][0].time_ms, [r.time_ms for r in by_key["eval_accuracy"]]))
        if ok:
            # The RCP checker's count: the epoch_num of the last eval before run_stop, where the evals
            # count samples (Baidu's put 1 there: then train_samples).
            counts = [r.metadata.get("epoch_num") for r in by_key["eval_accuracy"] if r.time_ms <= stop[0].time_ms]
            counted = all(isinstance(c, (int, float)) for c in counts) and counts == sorted(set(counts)) and \
                counts[-1] >= min(gbs)
            samples.append(counts[-1] if counted else by_key["train_samples"][0].value)
    assert len(gbs) == 1, f"{tree}: batch sizes {gbs}"
    kept = sorted(minutes)[1:-1]
    return gbs.pop(), sum(kept) / len(kept), sum(samples) / len(samples), logged, evals


@pytest.mark.parametrize("row_id", NAMED)
def test_rows_equal_the_logs_read_here(shared_rows, row_id):
    results = require_results()
    row = shared_rows[row_id]
    gbs, minutes, samples, _, _ = log_figures(results / row["tree"])
    assert row["global_batch"] == gbs
    assert row["olympic_minutes"] == pytest.approx(minutes, abs=1e-6)
    assert row["mean_samples"] == pytest.approx(samples, abs=0.05)
    assert row["runs"] >= 9 and row["converged"] >= 9
    desc = json.loads((results / row["tree"]).parents[2].joinpath("systems", row["tree"].split("/")[-2] + ".json")
                      .read_text())
    assert row["host_processor"] == desc["host_processor_model_name"].strip()
    assert row["host_processors_per_node"] == str(desc["host_processors_per_node"]).strip()
    assert row["host_processor_core_count"] == str(desc["host_processor_core_count"]).strip()


def test_a_planned_train_samples_is_not_the_samples_to_converge(shared_rows):
    # tinycorp logs train_samples (3,993,600) before its first step, a budget; its runs stop at the eval
    # that reaches the target, 2.8 to 3.8 M samples in.
    row = shared_rows[TINYCORP]
    _, _, samples, logged, _ = log_figures(require_results() / row["tree"])
    assert set(logged) == {3993600}
    assert row["mean_samples"] == pytest.approx(samples, abs=0.05) and row["mean_samples"] < 0.9 * 3993600


def test_baidu_eval_cadence_and_startup_as_the_results_note_reads_them(shared_rows):
    row = shared_rows["v2.1 Baidu 8_node_64_A100_PaddlePaddle"]
    assert row["eval_interval"] == 175104
    assert row["nodes"] == 8 and row["accelerators_per_node"] == 8
    assert "8x ConnectX-6 IB HDR 200Gb/Sec" in row["host_networking"]
    # 12.6 s to the first eval against 9.3 s a later interval: about 3.3 s of start-up.
    assert row["startup_s"] == pytest.approx(3.3, abs=0.3)
    assert row["eval_s"] is None  # Baidu's logs have no eval_start/eval_stop
    _, _, _, _, evals = log_figures(require_results() / row["tree"])
    first = statistics.median((times[0] - start) / 1000 for start, times in evals)
    later = statistics.median((b - a) / 1000 for _, times in evals for a, b in zip(times[1:], times[2:]))
    assert row["startup_s"] == pytest.approx(first - later, abs=0.15)


def test_h200_eval_time_from_eval_start_and_stop(shared_rows):
    row = shared_rows["v4.0 NVIDIA h200_ngc23.09_pytorch"]
    tree = require_results() / row["tree"]
    per_run = []
    for path in sorted(tree.glob("result_*.txt")):
        records, _ = parse_file(path)
        starts = [r.time_ms for r in records if r.key == "eval_start"]
        stops = [r.time_ms for r in records if r.key == "eval_stop"]
        per_run.append(sum(b - a for a, b in zip(starts, stops)) / len(stops) / 1000)
    assert row["eval_s"] == pytest.approx(statistics.median(per_run), abs=1e-3)


def test_sample_counts_read_from_trees_outside_the_shared_results():
    # Mean samples to converge of the converged runs, the last eval's epoch_num, read from the published logs
    # (training_results_v3.0 NVIDIA/results/dgxh100_n8_ngc23.04_pytorch: 9 of 10 converged, 2,882,304 over all
    # 10; training_results_v5.0 Oracle/results/8xBM.GPU.H200.8), which an earlier hand-made list had wrong; and
    # Habana's v1.1 HLS-1H-N16, whose logs give train_samples 1,751,040 before training and stop at the eval of
    # 2,626,560 samples (run 0) and 2,661,580.8 on average.
    assert COMMITTED["v3.0 NVIDIA dgxh100_n8_ngc23.04_pytorch"]["mean_samples"] == 2846720.0
    assert round(COMMITTED["v5.0 Oracle 8xBM.GPU.H200.8"]["mean_samples"]) == 2961521
    assert COMMITTED["v1.1 Intel-HabanaLabs HLS-1H-N16"]["mean_samples"] == 2661580.8


def test_cpu_only_rows_carry_their_processors():
    # Intel's CPU-only results: 0 accelerators, the host processor as the system descriptions write it
    # (training_results_v2.1 and v3.0 Intel/systems/*-nodes-SPR-pytorch.json).
    cpu = {k: r for k, r in COMMITTED.items() if r["accelerators_per_node"] == 0}
    assert set(cpu) == {f"{v} Intel {n}-nodes-SPR-pytorch" for v in ("v2.1", "v3.0", "v3.1") for n in (8, 16)}
    v30 = cpu["v3.0 Intel 16-nodes-SPR-pytorch"]
    assert (v30["host_processor"], v30["host_processors_per_node"], v30["host_processor_core_count"],
            v30["host_processor_frequency"]) == ("Intel(R) Xeon(R) Platinum 8480+ @ 2.00GHz", "2", "56", "2.00GHz")
    v21 = cpu["v2.1 Intel 8-nodes-SPR-pytorch"]
    assert (v21["host_processor"], v21["host_processor_core_count"], v21["host_processor_frequency"]) == \
        ("Intel(R) Xeon(R) code named Sapphire Rapids", "", "")
    assert all(set(r) >= {"host_processor", "host_processors_per_node", "host_processor_core_count",
                          "host_processor_frequency"} for r in COMMITTED.values())


def test_the_data_set_covers_every_round():
    rounds = {row["round"] for row in COMMITTED.values()}
    assert rounds == {"v1.1", "v2.0", "v2.1", "v3.0", "v3.1", "v4.0", "v4.1", "v5.0"}
    assert len(COMMITTED) >= 280
    copies = [row for row in COMMITTED.values() if row["same_runs_as"]]
    assert all(COMMITTED[row["same_runs_as"]]["round"] <= row["round"] for row in copies)
    assert COMMITTED["v2.1 NVIDIA dgxa100_n512_ngc22.04_pytorch"]["same_runs_as"] == \
        "v2.0 NVIDIA dgxa100_n512_ngc22.04_pytorch"


def test_copies_are_marked_and_open_division_left_out(tmp_path):
    results = require_results()
    baidu = Path("Baidu/results/8_node_64_A100_PaddlePaddle/bert")
    for round_name in ("v2.1", "v9.9"):
        shutil.copytree(results / "v2.1" / "Baidu", tmp_path / round_name / "Baidu")
    shutil.copytree(results / "v4.0" / "NVIDIA", tmp_path / "v4.0" / "NVIDIA")
    desc = tmp_path / "v4.0" / "NVIDIA" / "systems" / "h200_ngc23.09_pytorch.json"
    desc.write_text(json.dumps(dict(json.loads(desc.read_text()), division="open")))
    rows = published.extract([str(tmp_path)])
    assert [r["id"] for r in rows] == ["v2.1 Baidu 8_node_64_A100_PaddlePaddle", "v9.9 Baidu 8_node_64_A100_PaddlePaddle"]
    assert rows[0]["same_runs_as"] is None
    assert rows[1]["same_runs_as"] == rows[0]["id"]
    assert rows[1]["tree"] == "v9.9/" + baidu.as_posix()


def test_bad_input_is_one_line(tmp_path, capsys):
    results = require_results()
    shutil.copytree(results / "v2.1" / "Baidu", tmp_path / "v2.1" / "Baidu")
    (tmp_path / "v2.1" / "Baidu" / "systems" / "8_node_64_A100_PaddlePaddle.json").unlink()
    assert published.main([str(tmp_path), "--out", str(tmp_path / "out.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "8_node_64_A100_PaddlePaddle.json" in err
    assert not (tmp_path / "out.json").exists()
    assert published.main([str(tmp_path / "missing"), "--out", str(tmp_path / "out.json")]) == 2
    assert "missing" in capsys.readouterr().err
