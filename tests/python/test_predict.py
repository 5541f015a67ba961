"""`bertperf predict` (the scaling model) against every published MLPerf BERT result, and the a100_8x8
config against Baidu's v2.1 8x8 logs.

- `bertperf predict --validate --json` predicts every usable result of the data set
  (benchmarks/bert/mlperf/reference/published_systems.json) and says why it predicts none of the rest;
  its "bands" (by node count) and "devices" are the median and largest absolute error of its rows.
- Leave-one-out is real: a result's prediction does not move when its own time (or a later copy of
  its runs) changes, while the other results of its class see it.
- The medians stay under stated bounds (the figures of benchmarks/RESULTS.md, with some room): at the
  RCP samples and at the samples each result logged.
- Baidu's v2.1 8x8 result (2.476 min) predicted from benchmarks/bert/mlperf/a100_8x8.json by a model
  fitted without it: within 3%.
- --batch, --nodes, --gpus-per-node, --device and --network change what they name.
- The RCP tables the predictor reads are the RCP checker's own (pruned) tables, per ruleset.
- `bertperf run-once --dry-run` on a100_8x8 logs every hyperparameter line of Baidu's ten 8x8 logs
  with the same value, once each; the keys Baidu does not log are a stated list.
"""
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bertperf_paths import REPO, find_binary  # noqa: E402
from compliance_support import require_results  # noqa: E402
from bertperf_compliance.check import rcp as rcp_module  # noqa: E402
from bertperf_compliance.mllog_parse import parse_file  # noqa: E402

BERTPERF = find_binary("bertperf")
MLPERF = REPO / "benchmarks" / "bert" / "mlperf"
DATASET = MLPERF / "reference" / "published_systems.json"
SYSTEMS = json.loads(DATASET.read_text())["systems"]
BAIDU = "v2.1 Baidu 8_node_64_A100_PaddlePaddle"
BAIDU_TREE = "v2.1/Baidu/results/8_node_64_A100_PaddlePaddle/bert"

# Median absolute error bounds, by node band (benchmarks/RESULTS.md has the figures these guard).
BOUND_RCP = {"1": 0.075, "2-16": 0.095, "32+": 0.12}
BOUND_LOGGED = {"1": 0.035, "2-16": 0.06, "32+": 0.16}

# Hyperparameter keys: those the compliance rules name for BERT (closed_common, closed_bert), and the
# other hyperparameters submitters log.
HYPERPARAMETER_KEYS = {
    "global_batch_size", "d_batch_size", "gradient_accumulation_steps", "max_sequence_length",
    "max_predictions_per_seq", "opt_name", "opt_base_learning_rate", "opt_epsilon", "opt_lamb_epsilon",
    "opt_learning_rate_training_steps", "opt_learning_rate_warmup_steps", "num_warmup_steps", "start_warmup_step",
    "opt_lamb_beta_1", "opt_lamb_beta_2", "opt_lamb_weight_decay_rate", "opt_lamb_learning_rate_decay_poly_power",
    "opt_gradient_clip_norm", "max_samples",
}
# What we log beyond Baidu's v2.1 lines: the epsilon spelling of rulesets 3.0.0 on, and settings Baidu
# fixed in code (sequence length 512, LAMB, poly power 1, clip 1.0, the 4.5M-sample hard stop).
OUR_EXTRA_KEYS = {"opt_lamb_epsilon", "max_sequence_length", "opt_name", "opt_lamb_learning_rate_decay_poly_power",
                  "opt_gradient_clip_norm", "max_samples"}


def need_binary():
    if BERTPERF is None:
        pytest.skip("bertperf is not built (scripts/build.sh)")


def run(*args, **kw):
    return subprocess.run([str(BERTPERF), *map(str, args)], cwd=REPO, capture_output=True, text=True, timeout=120,
                          **kw)


def validate(*extra):
    out = run("predict", "--validate", "--json", *extra)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def validation():
    need_binary()
    return validate()


def band(nodes):
    return "1" if nodes == 1 else "2-16" if nodes <= 16 else "32+"


def summary(errors):
    return {"systems": len(errors), "median_abs_error": pytest.approx(statistics.median(errors), abs=1e-12),
            "max_abs_error": pytest.approx(max(errors), abs=1e-12)}


def test_bands_are_the_rows_errors(validation):
    rows = validation["rows"]
    assert [b["nodes"] for b in validation["bands"]] == ["1", "2-16", "32+"]
    for key, name in (("bands", "error_rcp"), ("bands_logged", "error_logged")):
        for b in validation[key]:
            errors = [abs(r[name]) for r in rows if band(r["nodes"]) == b["nodes"]]
            assert {k: b[k] for k in ("systems", "median_abs_error", "max_abs_error")} == summary(errors)
    for d in validation["devices"]:
        errors = [abs(r["error_rcp"]) for r in rows if r["device"] == d["device"]]
        assert {k: d[k] for k in ("systems", "median_abs_error", "max_abs_error")} == summary(errors)
    for r in rows:
        assert r["band"] == band(r["nodes"])
        assert r["error_rcp"] == pytest.approx(r["predicted_rcp_minutes"] / r["olympic_minutes"] - 1, abs=1e-12)
        assert r["error_logged"] == pytest.approx(r["predicted_logged_minutes"] / r["olympic_minutes"] - 1, abs=1e-12)


def test_every_result_is_predicted_or_says_why(validation):
    predicted = {r["id"] for r in validation["rows"]}
    skipped = {s["id"]: s["reason"] for s in validation["skipped"]}
    assert not predicted & set(skipped)
    assert predicted | set(skipped) == {s["id"] for s in SYSTEMS}
    assert len(predicted) >= 240
    for s in SYSTEMS:
        if s["same_runs_as"]:
            assert skipped[s["id"]] == f"the same runs as {s['same_runs_as']}"
    # Every GPU type of the issue is predicted.
    devices = {r["device"] for r in validation["rows"]}
    assert {"a100-sxm-80gb", "a100-sxm-40gb", "a100-pcie-80gb", "h100-sxm", "h100-pcie", "h200"} <= devices
    # RCP samples: the mean of the result's ruleset at its batch, plus half an interval.
    baidu = next(r for r in validation["rows"] if r["id"] == BAIDU)
    _, pruned = rcp_module.rcp_tables("2.1.0")
    low, high = pruned[0], pruned[1]
    mean = low.mean + (high.mean - low.mean) * (3072 - low.bs) / (high.bs - low.bs)
    assert baidu["rcp_samples"] == pytest.approx(mean + 175000 / 2, abs=0.1)


def test_leave_one_out_is_real(tmp_path, validation):
    doc = json.loads(DATASET.read_text())
    for s in doc["systems"]:
        if s["id"] == BAIDU:
            s["olympic_minutes"] *= 2
    path = tmp_path / "published.json"
    path.write_text(json.dumps(doc))
    changed = {r["id"]: r for r in validate("--published", path)["rows"]}
    before = {r["id"]: r for r in validation["rows"]}
    assert changed[BAIDU]["predicted_rcp_minutes"] == pytest.approx(before[BAIDU]["predicted_rcp_minutes"], rel=1e-12)
    assert changed[BAIDU]["error_rcp"] != pytest.approx(before[BAIDU]["error_rcp"], abs=1e-3)
    nvidia = "v2.1 NVIDIA dgxa100_n8_ngc22.09_pytorch"
    assert changed[nvidia]["predicted_rcp_minutes"] != pytest.approx(before[nvidia]["predicted_rcp_minutes"], rel=1e-6)


def test_median_errors_under_the_bounds(validation):
    for key, bounds in (("bands", BOUND_RCP), ("bands_logged", BOUND_LOGGED)):
        for b in validation[key]:
            assert b["median_abs_error"] < bounds[b["nodes"]], (key, b)


@pytest.mark.parametrize("ablation", [["--without", "round"], ["--without", "fixed-step"],
                                      ["--without", "logged-costs"], ["--algo", "hierarchical"]])
def test_each_term_of_the_model_helps(validation, ablation):
    # The validation without a term of the model (benchmarks/RESULTS.md has the figures): the speed model
    # (at the logged samples) is worse over the three bands together.
    def total(v):
        return sum(b["median_abs_error"] for b in v["bands_logged"])
    assert total(validate(*ablation)) > total(validation)


def test_rcp_tables_are_the_checkers():
    tables = json.loads((MLPERF / "reference" / "rcp.json").read_text())["tables"]
    covered = [r for t in tables for r in t["rulesets"]]
    assert sorted(covered) == sorted(rcp_module.RCP_RULESETS)
    for table in tables:
        for ruleset in table["rulesets"]:
            _, pruned = rcp_module.rcp_tables(ruleset)
            assert [p["global_batch"] for p in table["points"]] == [int(r.bs) for r in pruned], ruleset
            for p, r in zip(table["points"], pruned):
                assert p["mean_samples"] == pytest.approx(r.mean, abs=0.06)


def hyperparameters(path: Path):
    records, errors = parse_file(path)
    assert not errors
    found = {}
    for r in records:
        if r.key in HYPERPARAMETER_KEYS:
            assert r.key not in found, f"{path}: {r.key} logged twice"
            found[r.key] = r.value
    return found


def test_dry_run_logs_baidus_8x8_hyperparameters(tmp_path):
    need_binary()
    results = require_results()
    log = tmp_path / "dry.txt"
    out = run("run-once", "--config", str(MLPERF / "a100_8x8.json"), "--dry-run", "--log", str(log), "--seed", "7")
    assert out.returncode == 0, out.stderr
    ours = hyperparameters(log)
    baidu_logs = sorted((results / BAIDU_TREE).glob("result_*.txt"))
    assert len(baidu_logs) == 10
    for path in baidu_logs:
        theirs = hyperparameters(path)
        assert len(theirs) >= 13, path
        for key, value in theirs.items():
            assert key in ours, f"{key} missing from the dry run"
            assert type(ours[key]) is type(value) and ours[key] == value, f"{key}: ours {ours[key]!r}, Baidu {value!r}"
        assert set(ours) - set(theirs) == OUR_EXTRA_KEYS
    # No training happened: no weights, no run.
    records, _ = parse_file(log)
    assert not {"weights_initialization", "run_start", "init_stop"} & {r.key for r in records}


def test_dry_run_bad_input_is_one_line(tmp_path):
    need_binary()
    out = run("run-once", "--config", str(tmp_path / "missing.json"), "--dry-run", "--stdout")
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "missing.json" in out.stderr


def predict_config(*args):
    out = run("predict", "--config", MLPERF / "a100_8x8.json", "--json", *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_predict_a100_8x8_beside_baidu():
    need_binary()
    report = predict_config()
    own = [r for r in report["rows"] if r["config_system"]]
    assert len(own) == 1 and own[0]["shape"] == "8x8" and own[0]["global_batch"] == 3072
    published = {p["id"]: p for p in own[0]["published"]}
    baidu = published[BAIDU]
    assert baidu["olympic_minutes"] == pytest.approx(2.476, abs=5e-4)
    assert baidu["error"] == pytest.approx(baidu["predicted_minutes"] / baidu["olympic_minutes"] - 1)
    assert abs(baidu["error"]) < 0.03
    # The same prediction as the validation's for Baidu (the config is Baidu's system and recipe).
    row = next(r for r in validate()["rows"] if r["id"] == BAIDU)
    assert baidu["predicted_minutes"] == pytest.approx(row["predicted_rcp_minutes"], rel=1e-9)
    assert {"1x8", "8x8", "64x8", "512x8"} <= {r["shape"] for r in report["rows"]}
    text = run("predict", "--config", MLPERF / "a100_8x8.json")
    assert f"published: {BAIDU} 2.476 min" in text.stdout


def test_shape_options_change_what_they_name():
    need_binary()
    base = predict_config("--scale", "8x8", "--algo", "ring")
    row = base["rows"][0]
    # --batch: the system's global batch, so the local batch and the steps.
    wide = predict_config("--scale", "8x8", "--algo", "ring", "--batch", 6144)["rows"][0]
    assert wide["global_batch"] == 6144 and wide["local_batch"] == 96 and wide["config_system"]
    # --network: half the ports double the across-node part of the ring's bandwidth term.
    half = predict_config("--scale", "8x8", "--algo", "ring", "--network", "4x InfiniBand HDR 200Gb/s")
    assert half["network"] == "4x 200 Gb/s InfiniBand"
    assert half["rows"][0]["comm_ms"] > 1.5 * row["comm_ms"]
    # --nodes and --gpus-per-node: the system's shape.
    small = predict_config("--nodes", 2, "--gpus-per-node", 4, "--scale", "2x4")
    assert small["rows"][0]["shape"] == "2x4" and small["rows"][0]["config_system"]
    assert small["rows"][0]["global_batch"] == 3072 and small["rows"][0]["local_batch"] == 384
    # --device: another class's fit and links.
    pcie = predict_config("--device", "a100-pcie-80gb", "--scale", "8x8")
    assert pcie["device"] == "a100-pcie-80gb"
    assert pcie["device_samples_per_s"] != pytest.approx(base["device_samples_per_s"])
    assert pcie["rows"][0]["published"] == []  # no published A100-PCIe 8x8 result at 3072


@pytest.mark.parametrize("args, needle", [
    (["--config", "benchmarks/bert/mlperf/a100_8x8.json", "--algo", "sharp"], "--algo"),
    (["--config", "benchmarks/bert/mlperf/a100_8x8.json", "--network", "carrier pigeons"], "carrier pigeons"),
    (["--config", "benchmarks/bert/mlperf/a100_8x8.json", "--device", "abacus"], "abacus"),
    (["--config", "benchmarks/bert/mlperf/a100_8x8.json", "--batch", "0"], "--batch"),
    (["--config", "benchmarks/bert/mlperf/a100_8x8.json", "--nodes", "-1"], "--nodes"),
    (["--config", "benchmarks/bert/mlperf/a100_8x8.json", "--scale", "8by8"], "--scale"),
    (["--config", "benchmarks/bert/mlperf/a100_8x8.json", "--overlap", "2"], "--overlap"),
    (["--config", "benchmarks/bert/mlperf/a100_8x8.json", "--round", "v0.5"], "0.5.0"),
    (["--validate", "--published", "benchmarks/bert/mlperf/reference/rcp.json"], "rcp.json"),
    (["--validate", "--devices", "benchmarks/bert/mlperf/reference/rcp.json"], "rcp.json"),
    (["--validate", "--without", "luck"], "luck"),
])
def test_predict_bad_input_is_one_line(args, needle):
    need_binary()
    out = run("predict", *args)
    assert out.returncode == 2, out.stdout
    assert out.stderr.strip().count("\n") == 0 and needle in out.stderr, out.stderr


def test_predict_rate_from_flops_and_from_a_measured_step():
    need_binary()
    # BERT-large over 254 real tokens and 76 predictions is about 0.49 TFLOP a sample, so 47% of the A100's
    # 312 TFLOP/s is about 300 samples/s, the rate NVIDIA's and Baidu's v2.1 runs reached.
    report = predict_config("--mfu", "0.47", "--samples", "2700000")
    assert report["device_samples_per_s"] == pytest.approx(300, rel=0.03)
    # A measured single-device step of 0.16 s at 48 samples: 300 samples/s, and with no other devices
    # the step is that step.
    report = predict_config("--step-time", "0.16", "--scale", "1x1,8x8", "--samples", "2700000", "--startup-s", "0",
                            "--eval-rate", "900", "--algo", "ring")
    assert report["device_samples_per_s"] == pytest.approx(300)
    one, many = report["rows"]
    assert one["step_ms"] == pytest.approx(160) and one["comm_ms"] == 0
    # 8x8 on HDR: a ring over 64 ranks, the 8 ports of a node carrying the data.
    bytes_ = report["gradient_bytes"]
    ring = 2 * 63 / 64 * bytes_ / (8 * 25e9) + 2 * 63 * 9.6e-6
    assert many["comm_ms"] == pytest.approx(1e3 * ring)
    assert many["step_ms"] == pytest.approx(160 + 1e3 * ring)
    # Time to train: steps, plus 10,000 eval samples at 900 a device on 64 devices at each eval.
    steps, evals = 2700000 / 3072, 2700000 / 175000
    minutes = (steps * many["step_ms"] / 1e3 + evals * 10000 / (64 * 900)) / 60
    assert many["time_to_train_minutes"] == pytest.approx(minutes)
