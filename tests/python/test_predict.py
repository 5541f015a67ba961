"""`bertperf predict` (the scaling model) against every published MLPerf BERT result, and the a100_8x8
config against Baidu's v2.1 8x8 logs.

- `bertperf predict --validate --json` predicts every usable result of the data set
  (benchmarks/bert/mlperf/reference/published_systems.json) three ways ("modes"): leave-one-out, leave-family-out
  (the result's family: its submitter's results of its device class, every round and node count) and
  forward-in-time (earlier rounds only), and says why it predicts none of the rest; each mode's "bands" (by node
  count) and "devices" are the median, 90th percentile and largest absolute error of its rows, its "calibration"
  the share of its rows inside their 90% intervals.
- The intervals are split-conformal ones this test recomputes from the rows: the median m of the residuals
  log(measured / predicted) of the other families' results of the band and class (of the band where the class has
  fewer than 9), widened by the ceil(0.9 (n + 1))-th smallest |r - m|.
- Holding out is real: a result's prediction does not move when its own time, its own samples, its family's
  results (leave-family-out) or its round's and later rounds' results (forward-in-time) change, while the others
  see them.
- The samples term: each result's ratio (samples to converge over RCP samples) is what this test computes
  from the data set itself: the median log ratio of the other results at its global batch (3 or more),
  plus the median over the other results of its class of what the batch effects leave (3 or more); the
  RCP samples are the RCP checker's mean plus half the benchmark's eval interval. Without the term the
  bands at the logged samples are the same and those at the RCP samples worse.
- Every term of the model, the stated power included, lowers the leave-family-out medians taken together.
- Intel's CPU-only results are predicted (device class xeon-amx), and `--device xeon-amx` plans a CPU
  cluster from the cpu_2c config: a node's rate is the fit times its peak's share of the reference node's,
  the 16-node results are predicted from the 8-node ones alone within 15%, and a measured core rate in
  devices.json (core_samples_per_s) stands in for a class without results.
- The medians stay under stated bounds (the figures of speed/RESULTS.md, with some room), and every
  mode's calibration is within 0.85-0.95.
- Baidu's v2.1 8x8 result (2.476 min) predicted from benchmarks/bert/mlperf/a100_8x8.json by a model
  fitted without it: within 3% in every mode that predicts it; the config's own row is predicted without the
  published results of its shape (the in-sample figure shown beside it only as such), every row with its
  interval, from its class where it has enough results, else from its band, as the output says.
- --batch, --nodes, --gpus-per-node, --device and --network change what they name.
- The RCP tables the predictor reads are the RCP checker's own (pruned) tables, per ruleset.
- `bertperf run-once --dry-run` on a100_8x8 logs every hyperparameter line of Baidu's ten 8x8 logs
  with the same value, once each; the keys Baidu does not log are a stated list.
"""
import json
import math
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

# Median absolute error bounds at the RCP samples (and at the logged samples), by mode and node band
# (speed/RESULTS.md has the figures these guard).
BOUND_RCP = {"leave-family-out": {"1": 0.05, "2-16": 0.09, "32+": 0.20},
             "leave-one-out": {"1": 0.05, "2-16": 0.07, "32+": 0.09},
             "forward-in-time": {"1": 0.055, "2-16": 0.04}}
BOUND_LOGGED = {"leave-family-out": {"1": 0.03, "2-16": 0.07, "32+": 0.23},
                "leave-one-out": {"1": 0.03, "2-16": 0.05, "32+": 0.10},
                "forward-in-time": {"1": 0.025, "2-16": 0.035}}
MODES = ("leave-family-out", "leave-one-out", "forward-in-time")

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


def mode(report, name):
    return next(m for m in report["modes"] if m["name"] == name)


@pytest.fixture(scope="module")
def validation():
    need_binary()
    return validate()


def band(nodes):
    return "1" if nodes == 1 else "2-16" if nodes <= 16 else "32+"


def quantile(values, q):
    """Linear between order statistics (numpy's default)."""
    v = sorted(values)
    at = q * (len(v) - 1)
    lo = int(at)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (at - lo) * (v[hi] - v[lo])


def summary(errors):
    return {"results": len(errors), "median_abs_error": pytest.approx(statistics.median(errors), abs=1e-12),
            "p90_abs_error": pytest.approx(quantile(errors, 0.9), abs=1e-12),
            "max_abs_error": pytest.approx(max(errors), abs=1e-12)}


def test_modes_bands_and_calibration_are_the_rows(validation):
    assert [m["name"] for m in validation["modes"]] == list(MODES)
    assert validation["quoted"] == "leave-family-out"
    for m in validation["modes"]:
        rows = m["rows"]
        assert [b["nodes"] for b in m["bands"]] == sorted({band(r["nodes"]) for r in rows}, key=["1", "2-16", "32+"].index)
        for key, name in (("bands", "error_rcp"), ("bands_logged", "error_logged")):
            for b in m[key]:
                errors = [abs(r[name]) for r in rows if band(r["nodes"]) == b["nodes"]]
                assert {k: b[k] for k in ("results", "median_abs_error", "p90_abs_error", "max_abs_error")} == summary(errors)
        for d in m["devices"]:
            errors = [abs(r["error_rcp"]) for r in rows if r["device"] == d["device"]]
            assert {k: d[k] for k in ("results", "median_abs_error", "p90_abs_error", "max_abs_error")} == summary(errors)
        for cal in m["calibration"]:
            inside = [r["inside"] for r in rows if band(r["nodes"]) == cal["nodes"]]
            assert (cal["results"], cal["inside"]) == (len(inside), sum(inside))
            assert cal["share"] == pytest.approx(sum(inside) / len(inside))
        for r in rows:
            assert r["band"] == band(r["nodes"])
            assert r["error_rcp"] == pytest.approx(r["predicted_rcp_minutes"] / r["olympic_minutes"] - 1, abs=1e-12)
            assert r["error_logged"] == pytest.approx(r["predicted_logged_minutes"] / r["olympic_minutes"] - 1, abs=1e-12)
            iv = r["interval"]
            assert iv["low_minutes"] == pytest.approx(iv["low"] * r["predicted_rcp_minutes"])
            assert iv["high_minutes"] == pytest.approx(iv["high"] * r["predicted_rcp_minutes"])
            assert r["inside"] == (iv["low_minutes"] <= r["olympic_minutes"] <= iv["high_minutes"])


def conformal(rows, band_name, device, except_family=None):
    """The 90% interval (factors on the predicted time) from the residuals of `rows`: of the class at the band
    where it has 9, else of the band, else of every row; the family `except_family` left out."""
    def residual(r):
        return math.log(r["olympic_minutes"] / r["predicted_rcp_minutes"])
    others = [r for r in rows if r["family"] != except_family]
    of_class = [residual(r) for r in others if r["band"] == band_name and r["device"] == device]
    of_band = [residual(r) for r in others if r["band"] == band_name]
    pool = of_class if len(of_class) >= 9 else of_band if of_band else [residual(r) for r in others]
    m = statistics.median(pool)
    spread = sorted(abs(r - m) for r in pool)
    w = spread[min(len(spread), math.ceil(0.9 * (len(spread) + 1))) - 1]
    return math.exp(m - w), math.exp(m + w), len(of_class) >= 9


def test_intervals_are_split_conformal_from_the_other_families(validation):
    for m in validation["modes"]:
        for r in m["rows"]:
            low, high, of_class = conformal(m["rows"], r["band"], r["device"], r["family"])
            assert (r["interval"]["low"], r["interval"]["high"]) == (pytest.approx(low, rel=1e-9),
                                                                     pytest.approx(high, rel=1e-9)), r["id"]
            assert r["interval"]["of_class"] == of_class


def test_calibration_is_on_target(validation):
    # The share of held-out results inside their 90% intervals, every band of every mode: 0.85-0.95.
    for m in validation["modes"]:
        for cal in m["calibration"]:
            assert 0.85 <= cal["share"] <= 0.95, (m["name"], cal)


def test_every_result_is_predicted_or_says_why(validation):
    for m in validation["modes"]:
        predicted = {r["id"] for r in m["rows"]}
        skipped = {s["id"]: s["reason"] for s in m["skipped"]}
        assert not predicted & set(skipped)
        assert predicted | set(skipped) == {s["id"] for s in SYSTEMS}
        for s in SYSTEMS:
            if s["same_runs_as"]:
                assert skipped[s["id"]] == f"the same runs as {s['same_runs_as']}"
    loo = mode(validation, "leave-one-out")
    assert len(loo["rows"]) >= 240
    # Every GPU type of the issue is predicted.
    devices = {r["device"] for r in loo["rows"]}
    assert {"a100-sxm-80gb", "a100-sxm-40gb", "a100-pcie-80gb", "h100-sxm", "h100-pcie", "h200", "xeon-amx"} <= devices
    # Leave-family-out: what it cannot predict is a class of one family (Google's TPU v4, Intel's CPUs, ...).
    lfo = mode(validation, "leave-family-out")
    assert len(lfo["rows"]) >= 215
    lone = {s["id"]: s["reason"] for s in lfo["skipped"] if "outside its family" in s["reason"]}
    assert "v2.0 Google cloud-tpu-v4-8192-TF" in lone and "v3.0 Intel 16-nodes-SPR-pytorch" in lone
    families = {r["family"] for r in lfo["rows"]}
    for r in lfo["rows"]:
        assert any(f.endswith(" " + r["device"]) and f != r["family"] for f in families), r["id"]
    # Forward-in-time: the logs time evals from v3.1 on, so only v4.0 and later are predicted.
    fit = mode(validation, "forward-in-time")
    assert {r["round"] for r in fit["rows"]} == {"v4.0", "v4.1", "v5.0"}
    reasons = {s["id"]: s["reason"] for s in fit["skipped"]}
    assert reasons[BAIDU] == "the rounds before v2.1 log no eval time (eval_start/eval_stop): no model to fit"
    # RCP samples: the mean of the result's ruleset at its batch, plus half an interval.
    baidu = next(r for r in loo["rows"] if r["id"] == BAIDU)
    _, pruned = rcp_module.rcp_tables("2.1.0")
    low, high = pruned[0], pruned[1]
    mean = low.mean + (high.mean - low.mean) * (3072 - low.bs) / (high.bs - low.bs)
    assert baidu["rcp_samples"] == pytest.approx(mean + 175000 / 2, abs=0.1)
    for r in loo["rows"]:
        assert r["expected_samples"] == pytest.approx(r["rcp_samples"] * r["sample_ratio"], rel=1e-12)


def predictions(report, name):
    return {r["id"]: r for r in mode(report, name)["rows"]}


def write_published(tmp_path, change):
    doc = json.loads(DATASET.read_text())
    for s in doc["systems"]:
        change(s)
    path = tmp_path / "published.json"
    path.write_text(json.dumps(doc))
    return path


def test_leave_one_out_is_real(tmp_path, validation):
    def double_baidu(s):
        if s["id"] == BAIDU:
            s["olympic_minutes"] *= 2
    changed = predictions(validate("--published", write_published(tmp_path, double_baidu), "--holdout",
                                   "leave-one-out"), "leave-one-out")
    before = predictions(validation, "leave-one-out")
    assert changed[BAIDU]["predicted_rcp_minutes"] == pytest.approx(before[BAIDU]["predicted_rcp_minutes"], rel=1e-12)
    assert changed[BAIDU]["error_rcp"] != pytest.approx(before[BAIDU]["error_rcp"], abs=1e-3)
    nvidia = "v2.1 NVIDIA dgxa100_n8_ngc22.09_pytorch"
    assert changed[nvidia]["predicted_rcp_minutes"] != pytest.approx(before[nvidia]["predicted_rcp_minutes"], rel=1e-6)

    # Its own samples (and the time they take): its ratio and its prediction at the RCP samples stay; the
    # ratios of the results at its batch move (it falls from above their median to below: medians move with
    # ranks only).
    def fewer_samples(s):
        if s["id"] == BAIDU:
            s["mean_samples"] *= 0.8
            s["olympic_minutes"] *= 0.8
    changed = predictions(validate("--published", write_published(tmp_path, fewer_samples), "--holdout",
                                   "leave-one-out"), "leave-one-out")
    assert changed[BAIDU]["sample_ratio"] == before[BAIDU]["sample_ratio"]
    assert changed[BAIDU]["predicted_rcp_minutes"] == pytest.approx(before[BAIDU]["predicted_rcp_minutes"], rel=1e-12)
    at_3072 = [i for i, r in before.items() if r["global_batch"] == 3072 and i != BAIDU]
    assert any(changed[i]["sample_ratio"] != before[i]["sample_ratio"] for i in at_3072)


def test_leave_family_out_is_real(tmp_path, validation):
    # Baidu's other A100 results (v2.0, one node) are its family: slowed 1.5x, they move Baidu's leave-one-out
    # prediction and not its leave-family-out one; the results of other families see them.
    family = {s["id"] for s in SYSTEMS if s["tree"].split("/")[1] == "Baidu" and "A100" in s["accelerator"]}
    assert BAIDU in family and len(family) >= 3

    def slow_family(s):
        if s["id"] in family and s["id"] != BAIDU:
            s["olympic_minutes"] *= 1.5
    changed = validate("--published", write_published(tmp_path, slow_family), "--holdout",
                       "leave-family-out,leave-one-out")
    lfo, loo = predictions(changed, "leave-family-out"), predictions(changed, "leave-one-out")
    lfo0, loo0 = predictions(validation, "leave-family-out"), predictions(validation, "leave-one-out")
    assert lfo[BAIDU]["family"] == "baidu a100-sxm-80gb"
    for i in family & set(lfo):
        assert lfo[i]["predicted_rcp_minutes"] == pytest.approx(lfo0[i]["predicted_rcp_minutes"], rel=1e-12), i
    assert loo[BAIDU]["predicted_rcp_minutes"] != pytest.approx(loo0[BAIDU]["predicted_rcp_minutes"], rel=1e-6)
    nvidia = "v2.1 NVIDIA dgxa100_n8_ngc22.09_pytorch"
    assert lfo[nvidia]["predicted_rcp_minutes"] != pytest.approx(lfo0[nvidia]["predicted_rcp_minutes"], rel=1e-6)


def test_forward_in_time_is_real(tmp_path, validation):
    # The v5.0 results twice as slow: no v4.0 or v4.1 prediction moves, nor any v5.0 one (its own round is
    # held out with it); the v4.0 ones twice as slow move the v5.0 predictions.
    def slow(round_name):
        def change(s):
            if s["round"] == round_name:
                s["olympic_minutes"] *= 2
        return change
    before = predictions(validation, "forward-in-time")
    after = predictions(validate("--published", write_published(tmp_path, slow("v5.0")), "--holdout",
                                 "forward-in-time"), "forward-in-time")
    assert after.keys() == before.keys()
    for i, r in before.items():
        assert after[i]["predicted_rcp_minutes"] == pytest.approx(r["predicted_rcp_minutes"], rel=1e-12), i
    after = predictions(validate("--published", write_published(tmp_path, slow("v4.0")), "--holdout",
                                 "forward-in-time"), "forward-in-time")
    moved = [i for i, r in before.items() if r["round"] == "v5.0"
             and after[i]["predicted_rcp_minutes"] != pytest.approx(r["predicted_rcp_minutes"], rel=1e-6)]
    assert moved


def test_median_errors_under_the_bounds(validation):
    for m in validation["modes"]:
        for key, bounds in (("bands", BOUND_RCP), ("bands_logged", BOUND_LOGGED)):
            for b in m[key]:
                assert b["median_abs_error"] < bounds[m["name"]][b["nodes"]], (m["name"], key, b)


def without_power_w(tmp_path):
    devices = json.loads((MLPERF / "reference" / "devices.json").read_text())
    for d in devices["devices"]:
        d.pop("power_w", None)
    path = tmp_path / "devices.json"
    path.write_text(json.dumps(devices))
    return path


@pytest.mark.parametrize("ablation", [["--without", "round"], ["--without", "fixed-step"],
                                      ["--without", "logged-costs"], ["--without", "samples"],
                                      ["--without", "network-efficiency"], ["--algo", "hierarchical"], ["power"]])
def test_each_term_of_the_model_helps(tmp_path, validation, ablation):
    # The leave-family-out validation without a term of the model (speed/RESULTS.md has the figures): its
    # medians at the RCP samples, the three bands together, are worse. "power": devices.json without the
    # classes' board power, so that no stated power scales a device.
    if ablation == ["power"]:
        ablation = ["--devices", without_power_w(tmp_path)]

    def total(v):
        return sum(b["median_abs_error"] for b in mode(v, "leave-family-out")["bands"])
    assert total(validate(*ablation, "--holdout", "leave-family-out")) > total(validation)


def mlperf_eval_interval(gbs):
    """The benchmark's eval interval: 5% of (230.23 x GBS + 3,000,000) samples, down to a multiple of 25,000."""
    return math.floor(0.05 * (230.23 * gbs + 3_000_000) / 25_000) * 25_000


def rcp_samples(round_name, gbs):
    """The RCP checker's (pruned) mean at the batch, interpolated, plus half an eval interval."""
    _, pruned = rcp_module.rcp_tables(round_name[1:] + ".0")
    points = sorted((p.bs, p.mean) for p in pruned)
    if gbs <= points[0][0]:
        mean = points[0][1]
    elif gbs >= points[-1][0]:
        mean = points[-1][1]
    else:
        (b0, m0), (b1, m1) = next((a, b) for a, b in zip(points, points[1:]) if a[0] <= gbs <= b[0])
        mean = m0 + (m1 - m0) * (gbs - b0) / (b1 - b0)
    return mean + mlperf_eval_interval(gbs) / 2


def test_sample_ratio_is_the_median_of_the_others(validation):
    # The fit set: every result with a time and samples that is not a copy, of a device class (the predicted
    # rows, and the lone MI300X result, which is fitted to but not predicted).
    loo = mode(validation, "leave-one-out")
    lone = {s["id"] for s in loo["skipped"] if s["reason"].startswith("the only result of device class")}
    device = {r["id"]: r["device"] for r in loo["rows"]} | {i: i for i in lone}
    fit = [s for s in SYSTEMS if s["id"] in device]
    for s in fit:
        s_ratio = math.log(s["mean_samples"] / rcp_samples(s["round"], s["global_batch"]))
        s["_log_ratio"] = s_ratio
    rows = {r["id"]: r for r in loo["rows"]}
    for r in rows.values():
        assert r["rcp_samples"] == pytest.approx(rcp_samples(r["round"], r["global_batch"]), abs=0.1)

    def median_if_enough(values):
        return statistics.median(values) if len(values) >= 3 else 0.0

    for row_id, r in rows.items():
        others = [s for s in fit if s["id"] != row_id]
        batch = {}
        for s in others:
            batch.setdefault(s["global_batch"], []).append(s["_log_ratio"])
        batch = {g: median_if_enough(v) for g, v in batch.items()}
        left = [s["_log_ratio"] - batch[s["global_batch"]] for s in others if device[s["id"]] == r["device"]]
        want = math.exp(batch.get(r["global_batch"], 0.0) + median_if_enough(left))
        # (rcp.json holds the checker's means to 0.1 sample: agreement to 1e-6, not to the last digit)
        assert r["sample_ratio"] == pytest.approx(want, rel=1e-6), row_id


def test_the_samples_term_moves_only_the_rcp_predictions(validation):
    plain = mode(validate("--without", "samples", "--holdout", "leave-one-out"), "leave-one-out")
    loo = mode(validation, "leave-one-out")
    assert plain["bands_logged"] == loo["bands_logged"]
    assert all(r["sample_ratio"] == 1 for r in plain["rows"])
    assert sum(b["median_abs_error"] for b in plain["bands"]) > sum(b["median_abs_error"] for b in loo["bands"])


def test_intel_cpu_results_are_predicted(validation):
    cpu = [r for r in mode(validation, "leave-one-out")["rows"] if r["device"] == "xeon-amx"]
    assert sorted(r["id"] for r in cpu) == sorted(f"{v} Intel {n}-nodes-SPR-pytorch" for v in ("v2.1", "v3.0")
                                                  for n in (8, 16))
    for r in cpu:
        assert r["gpus_per_node"] == 1 and r["cpu_node"]["cores"] == 112 and r["cpu_node"]["clock_ghz"] == 2.0
        assert r["cpu_node"]["assumed"] == (r["round"] == "v2.1")
        assert r["network"] == "1x 100 Gb/s Ethernet"
        assert abs(r["error_rcp"]) < 0.10 and abs(r["error_logged"]) < 0.10


CPU_CONFIG = MLPERF / "cpu_2c.json"


def predict_cpu(*args):
    out = run("predict", "--config", CPU_CONFIG, "--json", *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_planning_a_cpu_cluster():
    need_binary()
    # Intel's v3.0 16-node shape: 2 x 56 cores at 2.0 GHz, GBS 3072 on 16 nodes.
    report = predict_cpu("--device", "xeon-amx", "--cores", 112, "--clock-ghz", 2.0, "--nodes", 16, "--batch", 3072)
    assert report["device"] == "xeon-amx" and report["network"].startswith("1x 100 Gb/s Ethernet")
    assert report["cpu_node"]["cores"] == 112 and not report["cpu_node"]["assumed"]
    own = next(r for r in report["rows"] if r["config_system"])
    assert own["shape"] == "16x1" and own["local_batch"] == 192
    published = {p["id"]: p for p in own["published"]}
    assert set(published) == {"v2.1 Intel 16-nodes-SPR-pytorch", "v3.0 Intel 16-nodes-SPR-pytorch"}
    assert sorted(own["held_out"]) == sorted(published)
    # Each as the validation predicts it (leave-family-out: Intel's is the class's one family, so none).
    rows = predictions(validate("--holdout", "leave-one-out"), "leave-one-out")
    for pid, p in published.items():
        modes = {m["mode"]: m for m in p["modes"]}
        assert modes["leave-one-out"]["predicted_minutes"] == pytest.approx(rows[pid]["predicted_rcp_minutes"], rel=1e-9)
        assert modes["leave-family-out"]["predicted_minutes"] is None
        assert "outside its family" in modes["leave-family-out"]["reason"]
    # Half the cores: half the node's peak, half its rate; the node's own description when it is a CPU one
    # (cpu_2c: one socket of 2 cores, its clock not given: the class's 2.0 GHz, assumed).
    half = predict_cpu("--device", "xeon-amx", "--cores", 56, "--clock-ghz", 2.0, "--nodes", 16, "--batch", 3072)
    assert half["device_samples_per_s"] == pytest.approx(report["device_samples_per_s"] / 2, rel=1e-12)
    tiny = predict_cpu("--device", "xeon-amx")
    assert tiny["cpu_node"]["cores"] == 2 and tiny["cpu_node"]["assumed"]
    assert tiny["device_samples_per_s"] == pytest.approx(report["device_samples_per_s"] * 2 / 112, rel=1e-12)
    assert [r["shape"] for r in tiny["rows"]] == ["1x1", "8x1", "16x1", "64x1"]
    # On an accelerator system's description: the class's reference node and network, both assumed.
    other = predict_config("--device", "xeon-amx", "--nodes", 16, "--scale", "16x1")
    assert other["cpu_node"]["cores"] == 112 and other["cpu_node"]["assumed"]
    assert other["network"].startswith("1x 100 Gb/s Ethernet (assumed") and other["network_assumed"]
    assert other["device_samples_per_s"] == pytest.approx(report["device_samples_per_s"], rel=1e-12)


def test_cpu_node_scaling_from_the_other_node_count(tmp_path):
    need_binary()
    # Without Intel's 16-node results, the 8-node ones alone predict them (one batch a node: the class's fixed
    # step cost is the accelerators' prior, no class samples effect): 42.1 and 43.5 min against 47.9 and 47.3,
    # -12% and -8% (speed/RESULTS.md).
    doc = json.loads(DATASET.read_text())
    doc["systems"] = [s for s in doc["systems"] if "16-nodes-SPR" not in s["id"]]
    path = tmp_path / "published.json"
    path.write_text(json.dumps(doc))
    measured = {s["round"]: s["olympic_minutes"] for s in SYSTEMS
                if s["id"] in ("v2.1 Intel 16-nodes-SPR-pytorch", "v3.0 Intel 16-nodes-SPR-pytorch")}
    for round_name, minutes in measured.items():
        report = predict_cpu("--device", "xeon-amx", "--cores", 112, "--clock-ghz", 2.0, "--nodes", 16, "--batch",
                             3072, "--scale", "16x1", "--round", round_name, "--published", path)
        assert abs(report["rows"][0]["time_to_train_minutes"] / minutes - 1) < 0.15, round_name


def test_a_measured_core_rate_stands_in_for_a_class_without_results(tmp_path):
    need_binary()
    devices = json.loads((MLPERF / "reference" / "devices.json").read_text())
    zen4 = next(d for d in devices["devices"] if d["name"] == "epyc-zen4")
    # The committed table has the rate measured on the 2-core machine (speed/RESULTS.md): cpu_2c, whose
    # description gives 2 cores and no clock, is predicted at exactly that node's rate.
    measured = zen4["cpu"]["core_samples_per_s"]
    assert measured and 0 < measured < 1
    assert predict_cpu("--device", "epyc-zen4")["device_samples_per_s"] == pytest.approx(measured * 2, rel=1e-12)
    path = tmp_path / "devices.json"
    zen4["cpu"]["core_samples_per_s"] = None
    path.write_text(json.dumps(devices))
    out = run("predict", "--config", CPU_CONFIG, "--device", "epyc-zen4", "--devices", str(path))
    assert out.returncode == 2 and "core_samples_per_s" in out.stderr and out.stderr.count("\n") == 1
    zen4["cpu"]["core_samples_per_s"] = 0.05
    path.write_text(json.dumps(devices))
    # cpu_2c: 2 cores, its clock not given (the reference's); at 3.6 GHz, 1.5x the reference's 2.4.
    report = predict_cpu("--device", "epyc-zen4", "--devices", path)
    assert report["device_samples_per_s"] == pytest.approx(0.05 * 2, rel=1e-12)
    faster = predict_cpu("--device", "epyc-zen4", "--devices", path, "--clock-ghz", 3.6)
    assert faster["device_samples_per_s"] == pytest.approx(0.05 * 2 * 1.5, rel=1e-12)
    # --device-rate is the node's own rate, as measured.
    given = predict_cpu("--device", "epyc-zen4", "--device-rate", 0.3)
    assert given["device_samples_per_s"] == pytest.approx(0.3)


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


def test_predict_a100_8x8_beside_baidu(tmp_path, validation):
    need_binary()
    report = predict_config()
    own = [r for r in report["rows"] if r["config_system"]]
    assert len(own) == 1 and own[0]["shape"] == "8x8" and own[0]["global_batch"] == 3072
    published = {p["id"]: p for p in own[0]["published"]}
    baidu = {m["mode"]: m for m in published[BAIDU]["modes"]}
    assert published[BAIDU]["olympic_minutes"] == pytest.approx(2.476, abs=5e-4)
    # Within 3% in every mode that predicts it, each the validation's prediction (the config is Baidu's system
    # and recipe); forward-in-time has no model before v3.1's logs.
    for name in ("leave-one-out", "leave-family-out"):
        m = baidu[name]
        assert m["error"] == pytest.approx(m["predicted_minutes"] / published[BAIDU]["olympic_minutes"] - 1)
        assert abs(m["error"]) < 0.03, name
        assert m["predicted_minutes"] == pytest.approx(predictions(validation, name)[BAIDU]["predicted_rcp_minutes"],
                                                       rel=1e-9)
    assert baidu["forward-in-time"]["predicted_minutes"] is None
    # The headline row is predicted without the published results of its shape (the A100 8x8 results at
    # 3072): the figure of a data set that does not hold them; the in-sample figure only beside it.
    shape = [s["id"] for s in SYSTEMS if s["nodes"] == 8 and s["accelerators_per_node"] == 8 and
             s["global_batch"] == 3072 and "A100" in s["accelerator"] and not s["same_runs_as"]]
    assert sorted(own[0]["held_out"]) == sorted(shape) == sorted(published)
    path = write_published(tmp_path, lambda s: None)
    doc = json.loads(path.read_text())
    doc["systems"] = [s for s in doc["systems"] if s["id"] not in shape and s["same_runs_as"] not in shape]
    path.write_text(json.dumps(doc))
    without = next(r for r in predict_config("--published", path)["rows"] if r["config_system"])
    assert without["held_out"] == [] and without["in_sample_minutes"] is None
    assert own[0]["time_to_train_minutes"] == pytest.approx(without["time_to_train_minutes"], rel=1e-12)
    assert own[0]["in_sample_minutes"] != pytest.approx(own[0]["time_to_train_minutes"], rel=1e-4)
    assert abs(own[0]["time_to_train_minutes"] / published[BAIDU]["olympic_minutes"] - 1) < 0.03
    assert {"1x8", "8x8", "64x8", "512x8"} <= {r["shape"] for r in report["rows"]}
    text = run("predict", "--config", MLPERF / "a100_8x8.json").stdout
    assert f"published: {BAIDU} 2.476 min; leave-family-out" in text
    assert "with them (in-sample)" in text and "90% interval" in text


def test_every_row_has_an_interval_from_its_band_and_class(validation):
    need_binary()
    # A100 at one node: its class has 9 or more leave-family-out results there, so the interval is the class's;
    # at 32+ nodes it has fewer, so the band's, and the output says so. Each is the split-conformal interval
    # of the validation's rows.
    lfo = mode(validation, "leave-family-out")["rows"]
    report = predict_config()
    for r in report["rows"]:
        b = band(int(r["shape"].split("x")[0]))
        low, high, of_class = conformal(lfo, b, "a100-sxm-80gb")
        iv = r["interval"]
        assert (iv["low"], iv["high"], iv["of_class"]) == (pytest.approx(low), pytest.approx(high), of_class), r["shape"]
        assert iv["low_minutes"] < r["time_to_train_minutes"] * 1.2 and iv["high_minutes"] > r["time_to_train_minutes"]
    by_shape = {r["shape"]: r["interval"] for r in report["rows"]}
    assert by_shape["1x8"]["of_class"] and by_shape["1x8"]["from"].startswith("a100-sxm-80gb's")
    assert not by_shape["512x8"]["of_class"] and "fewer than 9" in by_shape["512x8"]["from"]
    # A system the table does not hold: an L40S cluster (3 published results, all at one node) gets its band's
    # interval at every shape, and the text says its class has too few.
    l40s = predict_config("--device", "l40s", "--scale", "1x8,8x8")
    for r in l40s["rows"]:
        assert r["held_out"] == [] and not r["interval"]["of_class"]
        assert "l40s has" in r["interval"]["from"] and "fewer than 9" in r["interval"]["from"]
    text = run("predict", "--config", MLPERF / "a100_8x8.json", "--device", "l40s", "--scale", "1x8,8x8").stdout
    assert "l40s has 3, fewer than 9" in text


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
    (["--validate", "--holdout", "leave-none-out"], "leave-none-out"),
    (["--config", "benchmarks/bert/mlperf/cpu_2c.json", "--device", "xeon-amx", "--gpus-per-node", "8"], "--gpus-per-node"),
    (["--config", "benchmarks/bert/mlperf/cpu_2c.json", "--device", "xeon-amx", "--scale", "8x8"], "--scale"),
    (["--config", "benchmarks/bert/mlperf/cpu_2c.json", "--device", "xeon-amx", "--clock-ghz", "0"], "--clock-ghz"),
    (["--config", "benchmarks/bert/mlperf/a100_8x8.json", "--cores", "56"], "--cores"),
    (["--config", "benchmarks/bert/mlperf/cpu_2c.json"], "AMD EPYC (virtual machine)"),
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
