"""Package, seed, system-description and RCP checks against the official package checker
(run live on copies of the shared trees, since it may write scaling.json), including
generated variants of a passing tree."""

import json
import logging
import shutil

import pytest

from compliance_support import (LOG_RULESETS, RULESETS, copy_tree, corpus_trees, official_package_verdict,
                                require_results)
from bertperf_compliance.check import rcp
from bertperf_compliance.check.package import check_benchmark_dir, check_package, check_system_description


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    require_results()
    base = tmp_path_factory.mktemp("trees")
    out = {}
    for tree in corpus_trees():
        name = f"{tree.parent.name}_{tree.name}"
        out[name] = copy_tree(tree, base / name)
    return out


# Per-log verdicts are compared under all six rulesets elsewhere; at tree level the oldest
# and newest ruleset cover the differences in system descriptions (status words), and the
# variants below cover the passing tree under 3.1.0.
@pytest.mark.parametrize("ruleset", ["1.1.0", "2.1.0", "5.0.0"])
def test_shared_trees_match_official(trees, ruleset):
    for name, tree in trees.items():
        ours = check_package(str(tree), ruleset)
        assert ours.passed == official_package_verdict(tree, ruleset), (name, ruleset)


def test_shared_trees_train_samples_mode_match_official(trees):
    for name, tree in trees.items():
        for ruleset in ("3.0.0", "1.1.0"):
            ours = check_package(str(tree), ruleset, rcp_train_samples=True)
            assert ours.passed == official_package_verdict(tree, ruleset, train_samples=True), (name, ruleset)


# ------------------------------------------------------------------------------------------
# Variants of the v4.0 tree (which passes 2.1.0 to 3.1.0 as published).

def _bert_dir(tree):
    return next((tree / "results").glob("*/bert"))


def _system_json(tree):
    return next((tree / "systems").glob("*.json"))


def _rewrite_log(path, change):
    lines = path.read_text(encoding="latin-1").splitlines()
    path.write_text("\n".join(change(lines)) + "\n", encoding="latin-1")


def _edit_json(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _scale_epoch_num(factor):
    def change(lines):
        out = []
        for line in lines:
            if '"key": "eval_accuracy"' in line:
                head, body = line.split(":::MLLOG ", 1)
                rec = json.loads(body)
                rec["metadata"]["epoch_num"] = int(rec["metadata"]["epoch_num"] * factor)
                line = head + ":::MLLOG " + json.dumps(rec)
            out.append(line)
        return out
    return change


def _drop_key(key):
    return lambda lines: [l for l in lines if f'"key": "{key}"' not in l]


def _null_accuracy(lines):
    return [l.replace('"key": "eval_accuracy", "value": ', '"key": "eval_accuracy", "value": null, "x": ', 1)
            for l in lines]


VARIANTS = {
    "as_published": lambda t: None,
    "nine_runs": lambda t: (_bert_dir(t) / "result_9.txt").unlink(),
    "one_run_fails": lambda t: _rewrite_log(_bert_dir(t) / "result_3.txt", _drop_key("cache_clear")),
    "two_runs_fail": lambda t: [_rewrite_log(_bert_dir(t) / f"result_{i}.txt", _drop_key("cache_clear"))
                                for i in (3, 4)],
    "two_runs_not_converged": lambda t: [_rewrite_log(_bert_dir(t) / f"result_{i}.txt", lambda ls: [
        l.replace('"status": "success"', '"status": "aborted"') for l in ls]) for i in (2, 5)],
    "duplicate_seed": lambda t: shutil.copy(_bert_dir(t) / "result_0.txt", _bert_dir(t) / "result_1.txt"),
    "seed_missing": lambda t: _rewrite_log(_bert_dir(t) / "result_6.txt", _drop_key("seed")),
    "seed_not_integer": lambda t: _rewrite_log(_bert_dir(t) / "result_6.txt", lambda ls: [
        l.replace('"key": "seed", "value": ', '"key": "seed", "value": "abc", "x": ') for l in ls]),
    "rcp_too_fast": lambda t: [_rewrite_log(p, _scale_epoch_num(0.5)) for p in _bert_dir(t).glob("result_*.txt")],
    "rcp_too_fast_params_bypass": lambda t: ([_rewrite_log(p, _scale_epoch_num(0.5))
                                              for p in _bert_dir(t).glob("result_*.txt")],
                                             (_bert_dir(t) / "package_checker_params").write_text("rcp-bypass")),
    "rcp_too_fast_params_newline": lambda t: ([_rewrite_log(p, _scale_epoch_num(0.5))
                                               for p in _bert_dir(t).glob("result_*.txt")],
                                              (_bert_dir(t) / "package_checker_params").write_text("rcp-bypass\n")),
    "system_field_missing": lambda t: _edit_json(_system_json(t), lambda d: d.pop("cooling")),
    "system_field_int": lambda t: _edit_json(_system_json(t), lambda d: d.update(accelerators_per_node=8)),
    "system_status_new_word": lambda t: _edit_json(_system_json(t), lambda d: d.update(status="Available on-premise")),
    "system_json_missing": lambda t: _system_json(t).unlink(),
    "system_json_broken": lambda t: _system_json(t).write_text("{not json"),
    "division_open_seed_missing": lambda t: (_edit_json(_system_json(t), lambda d: d.update(division="open")),
                                             _rewrite_log(_bert_dir(t) / "result_6.txt", _drop_key("seed"))),
    "crashing_log": lambda t: _rewrite_log(_bert_dir(t) / "result_4.txt", _null_accuracy),
    "unknown_benchmark_dir": lambda t: (_bert_dir(t).parent / "foo").mkdir(),
    "empty_results": lambda t: shutil.rmtree(_bert_dir(t).parent),
}


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    require_results()
    source = next((t for t in corpus_trees() if t.parent.name == "v4.0"), None)
    if source is None:
        pytest.skip("v4.0 tree not in the shared results")
    base = tmp_path_factory.mktemp("variants")
    out = {}
    for name, make in VARIANTS.items():
        tree = copy_tree(source, base / name)
        make(tree)
        out[name] = tree
    return out


# Every variant under 3.1.0; under 5.0.0 (new status words, no org/status log rules) the
# ones whose outcome depends on the ruleset.
RULESET_VARIANTS = {
    "3.1.0": tuple(VARIANTS),
    "5.0.0": ("as_published", "system_status_new_word", "crashing_log"),
}


@pytest.mark.parametrize("ruleset", sorted(RULESET_VARIANTS))
def test_tree_variants_match_official(variants, ruleset):
    verdicts = {}
    mismatches = []
    for name in RULESET_VARIANTS[ruleset]:
        tree = variants[name]
        ours = check_package(str(tree), ruleset)
        theirs = official_package_verdict(tree, ruleset)
        verdicts[name] = theirs
        if ours.passed != theirs:
            mismatches.append((name, ours.passed, theirs))
    assert not mismatches
    if ruleset == "3.1.0":
        assert verdicts["as_published"] and not verdicts["nine_runs"] and not verdicts["duplicate_seed"]


def test_bypass_flags_match_official(variants):
    for name, flags in (("rcp_too_fast", dict(rcp_bypass=True)), ("seed_missing", dict(seed_bypass=True)),
                        ("duplicate_seed", dict(rcp_bypass=True))):
        tree = variants[name]
        if True:
            ours = check_package(str(tree), "3.1.0", **flags)
            assert ours.passed == official_package_verdict(tree, "3.1.0", **flags), (name, flags)


def test_package_messages(variants):
    res = check_package(str(variants["duplicate_seed"]), "3.1.0")
    msgs = [f for f in res.all_findings() if f.severity == "error"]
    assert any("seed" in f.rule and "already logged" in f.message and f.line for f in msgs)
    res = check_package(str(variants["nine_runs"]), "3.1.0")
    assert any("found 9" in f.message for f in res.all_findings())
    res = check_package(str(variants["system_field_missing"]), "3.1.0")
    assert any(f.key == "cooling" and f.fix for f in res.all_findings())


# ------------------------------------------------------------------------------------------
# System descriptions alone.

def _official_sysdesc(path, ruleset):
    from mlperf_logging.system_desc_checker import system_desc_checker as sd
    logging.disable(logging.CRITICAL)
    try:
        return sd.check_system_desc(str(path), "training", ruleset)[0]
    except Exception:
        return False
    finally:
        logging.disable(logging.NOTSET)


def test_system_descriptions_match_official(tmp_path):
    require_results()
    pytest.importorskip("mlperf_logging.system_desc_checker.system_desc_checker")
    sources = [next((t / "systems").glob("*.json")) for t in corpus_trees()]
    cases = list(sources)
    base = json.loads(sources[0].read_text())
    edits = {
        "missing_two": lambda d: (d.pop("sw_notes"), d.pop("hw_notes")),
        "status_new": lambda d: d.update(status="Available cloud"),
        "status_bad": lambda d: d.update(status="cloudy"),
        "no_status": lambda d: d.pop("status"),
        "int_nodes": lambda d: d.update(number_of_nodes=8),
        "int_accelerators": lambda d: d.update(accelerators_per_node=8),
        "dict_stack": lambda d: d.update(other_software_stack={"cuda": "12"}),
        "empty_values": lambda d: d.update({k: "" for k in d}),
    }
    for name, change in edits.items():
        data = dict(base)
        change(data)
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(data))
        cases.append(path)
    for raw_name, raw in (("list", "[1, 2]"), ("broken", "{"), ("empty", "")):
        path = tmp_path / f"{raw_name}.json"
        path.write_text(raw)
        cases.append(path)
    for path in cases:
        for ruleset in RULESETS:
            assert check_system_description(str(path), ruleset).passed == _official_sysdesc(path, ruleset), \
                (path.name, ruleset)


# ------------------------------------------------------------------------------------------
# RCP.

def test_rcp_data_and_statistics_match_official():
    oc = pytest.importorskip("mlperf_logging.rcp_checker.rcp_checker")
    logging.disable(logging.CRITICAL)
    try:
        for ruleset in LOG_RULESETS:
            official = oc.RCP_Checker("training", ruleset, "bert", False)
            theirs = {r["BS"]: r for r in official.rcp_data.values()}
            full, pruned = rcp.rcp_tables(ruleset)
            assert sorted(theirs) == [r.bs for r in full]
            refs = rcp.reference_records(ruleset)
            for rec in full:
                o = theirs[rec.bs]
                assert sorted(refs[rec.bs]["runs"]) == sorted(o["Epochs to converge"])
                for name, value in o["Hyperparams"].items():
                    assert refs[rec.bs]["Hyperparams"][name] == value
                assert rec.mean == pytest.approx(o["RCP Mean"], rel=1e-12)
                assert rec.stdev == pytest.approx(o["RCP Stdev"], rel=1e-9)
                assert rec.min_mean == pytest.approx(o["Min Epochs"], abs=1e-3)
            assert sorted(r["BS"] for r in official.pruned_rcp_data.values()) == [r.bs for r in pruned]
            for bs in (32, 300, 512, 1024, 2048, 3072, 5000, 8192, 14000):
                lo = official._find_top_min_rcp(bs, "pruned_rcps")
                hi = official._find_bottom_max_rcp(bs, "pruned_rcps")
                if lo and hi:
                    _, o = official._create_interp_rcp(bs, lo, hi)
                    ours = rcp._interp(bs, [r for r in pruned if r.bs < bs][-1], [r for r in pruned if r.bs > bs][0])
                    assert ours.mean == pytest.approx(o["RCP Mean"], rel=1e-12)
                    assert ours.min_mean == pytest.approx(o["Min Epochs"], abs=1e-3)
    finally:
        logging.disable(logging.NOTSET)


def _official_rcp(folder, train_samples, ruleset="5.0.0"):
    from mlperf_logging.rcp_checker import rcp_checker as oc
    logging.disable(logging.CRITICAL)
    try:
        return oc.check_directory(str(folder), "training", ruleset, False, train_samples,
                                  rcp_pass="pruned_rcps")[:2]
    except Exception:
        return (False, "crash")
    finally:
        logging.disable(logging.NOTSET)


@pytest.mark.parametrize("ruleset", ["5.0.0", "2.0.0", "1.1.0"])
def test_rcp_directories_match_official(tmp_path, ruleset):
    require_results()
    pytest.importorskip("mlperf_logging.rcp_checker.rcp_checker")
    dirs = [next((t / "results").glob("*/bert")) for t in corpus_trees()]
    source = next(d for d in dirs if "v4.0" in str(d))
    # Batch sizes around the RCP table (exact, interpolated, below, above) and speeds; for the
    # older rulesets only the batch sizes whose data differ from 2.1.0's.
    sizes = {"5.0.0": (448, 3072, 32, 20000), "2.0.0": (448,), "1.1.0": (448, 4608, 16384)}[ruleset]
    if ruleset != "5.0.0":
        dirs = []
    for bs in sizes:
        for factor in (0.9, 1.2):
            target = tmp_path / f"bs{bs}_{factor}"
            target.mkdir()
            for log in source.glob("result_*.txt"):
                lines = log.read_text(encoding="latin-1").splitlines()
                lines = [l.replace('"key": "global_batch_size", "value": ', f'"key": "global_batch_size", "value": {bs}, "x": ')
                         for l in lines]
                lines = _scale_epoch_num(factor * 2545476.7 / 2492562.9 if bs == 3072 else factor)(lines)
                (target / log.name).write_text("\n".join(lines) + "\n", encoding="latin-1")
            dirs.append(target)
    for n, folder in enumerate(dirs):
        for train_samples in ((False, True) if n < 3 else (False,)):
            ours = rcp.check_directory(str(folder), train_samples, ruleset=ruleset)
            theirs = _official_rcp(folder, train_samples, ruleset)
            assert ours.passed == theirs[0], (folder.name, train_samples, ours.message, theirs)
            if theirs[1] != "crash":
                assert ours.message == theirs[1]


# ------------------------------------------------------------------------------------------
# An RCP reference of one's own (--rcp-reference): how the mini benchmark is checked against
# the PyTorch implementation of its recipe.

def test_rcp_reference_bounds_are_the_t_test_at_alpha():
    stats = pytest.importorskip("scipy.stats")
    runs = [8000, 12000, 8000, 12000, 12000, 8000, 16000, 12000, 8000, 12000]
    record = rcp.record_from_runs(32, runs)
    ref_n = len(runs) - 2
    low, high = record.min_mean, rcp.max_acceptable_mean(record)
    assert low < record.mean < high
    # At either bound a submission of 8 olympic runs is exactly significant at alpha = 0.05.
    p_low = stats.ttest_ind_from_stats(low, record.stdev, ref_n, record.mean, record.stdev, 8,
                                       alternative="less").pvalue
    p_high = stats.ttest_ind_from_stats(high, record.stdev, ref_n, record.mean, record.stdev, 8,
                                        alternative="greater").pvalue
    assert p_low == pytest.approx(rcp.ALPHA, abs=1e-6)
    assert p_high == pytest.approx(rcp.ALPHA, abs=1e-6)


def test_rcp_reference_file_judges_a_directory_both_ways(trees, tmp_path):
    from bertperf_compliance.check import cli
    bert = _bert_dir(trees["v4.0_NVIDIA"])  # passes ruleset 3.1.0 as published
    runs = [rcp.read_run(str(p)) for p in sorted(bert.glob("result_*.txt"))]
    bs = runs[0].bs

    def reference(scale, name):
        path = tmp_path / name
        path.write_text(json.dumps({"global_batch_size": bs, "runs": [
            {"seed": i, "samples_to_converge": r.samples * scale} for i, r in enumerate(runs)] + [
            {"seed": 99, "samples_to_converge": None}]}))
        return str(path)

    same = rcp.read_reference(reference(1.0, "same.json"))
    assert same.runs == len(runs)  # the run that missed the target is left out
    result = rcp.check_directory(str(bert), reference=same)
    assert result.passed and result.message == "within the reference's bounds"
    assert not rcp.check_directory(str(bert), reference=rcp.read_reference(reference(1.5, "slow.json"))).passed
    slower = rcp.check_directory(str(bert), reference=rcp.read_reference(reference(0.6, "fast.json")))
    assert slower.passed and slower.slower and slower.message == "slower than the reference beyond its spread"
    warned = check_benchmark_dir(str(bert), "3.1.0", True, rcp_reference=rcp.read_reference(reference(0.6, "f.json")))
    assert warned.passed and any(f.rule.endswith(":rcp-slower") and f.severity == "warning" for f in warned.findings)
    few = rcp.check_runs([str(p) for p in sorted(bert.glob("result_*.txt"))[:2]], reference=same)
    assert not few.passed and few.message == "2 run(s): an olympic mean needs at least 3"
    # Through the command line, in the tree's own division, and with a wrong batch size.
    assert cli.main(["--ruleset", "3.1.0", "--rcp-reference", reference(1.0, "same.json"), str(bert)]) == 0
    assert cli.main(["--ruleset", "3.1.0", "--rcp-reference", reference(1.5, "slow.json"), str(bert)]) == 1
    other = tmp_path / "other_bs.json"
    other.write_text(json.dumps({"global_batch_size": bs + 1, "runs": [
        {"samples_to_converge": r.samples} for r in runs]}))
    assert cli.main(["--ruleset", "3.1.0", "--rcp-reference", str(other), str(bert)]) == 1


@pytest.mark.parametrize("content, why", [
    ("not json", "not valid JSON"),
    ('{"runs": []}', "'global_batch_size' must be a positive integer"),
    ('{"global_batch_size": 32, "runs": [{"seed": 1}]}', "'runs' must be a list of objects"),
    ('{"global_batch_size": 32, "runs": [{"samples_to_converge": -3}]}', "runs[0].samples_to_converge"),
    ('{"global_batch_size": 32, "runs": [{"samples_to_converge": 8000}, {"samples_to_converge": null}]}',
     "1 converged reference runs; the RCP test needs at least 4"),
])
def test_rcp_reference_file_errors_are_one_line_usage_errors(tmp_path, capsys, content, why):
    from bertperf_compliance.check import cli
    path = tmp_path / "ref.json"
    path.write_text(content)
    log = tmp_path / "result_0.txt"
    log.write_text("")
    assert cli.main(["--rcp-reference", str(path), str(log)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and why in err[0]
