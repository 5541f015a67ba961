"""Generated mutations of a passing BERT log: each one must get the official checker's
verdict (computed live) under every BERT ruleset, and failures must point at the line."""

import json

import pytest

from compliance_support import (LOG_RULESETS, corpus_logs, find_index, make_log_lines, mllog_line,
                                official_log_verdict, write_lines)
from bertperf_compliance.check.engine import check_log

TOKEN = ":::MLLOG "


def _rec(line):
    return json.loads(line[line.index(TOKEN) + len(TOKEN):])


def _dump(rec):
    return TOKEN + json.dumps(rec)


def drop(key, nth=None):
    def f(lines):
        if nth is None:
            return [l for l in lines if f'"key": "{key}"' not in l]
        i = find_index(lines, key, nth)
        return lines[:i] + lines[i + 1:]
    return f


def edit(key, change, nth=0):
    def f(lines):
        i = find_index(lines, key, nth)
        rec = _rec(lines[i])
        change(rec)
        return lines[:i] + [_dump(rec)] + lines[i + 1:]
    return f


def edit_all(key, change):
    def f(lines):
        out = []
        for line in lines:
            if f'"key": "{key}"' in line:
                rec = _rec(line)
                change(rec)
                line = _dump(rec)
            out.append(line)
        return out
    return f


def duplicate(key, change=None, nth=0):
    def f(lines):
        i = find_index(lines, key, nth)
        rec = _rec(lines[i])
        if change:
            change(rec)
        return lines[:i + 1] + [_dump(rec)] + lines[i + 1:]
    return f


def move_before(key, anchor):
    def f(lines):
        i = find_index(lines, key)
        line = lines.pop(i)
        j = find_index(lines, anchor)
        return lines[:j] + [line] + lines[j:]
    return f


def move_after(key, anchor):
    def f(lines):
        i = find_index(lines, key)
        line = lines.pop(i)
        j = find_index(lines, anchor)
        return lines[:j + 1] + [line] + lines[j + 1:]
    return f


def set_value(value):
    return lambda rec: rec.__setitem__("value", value)


def set_meta(**kw):
    return lambda rec: rec["metadata"].update(kw)


def del_meta(name):
    return lambda rec: rec["metadata"].pop(name, None)


def replace_line(key, text, nth=0):
    def f(lines):
        i = find_index(lines, key, nth)
        return lines[:i] + [text] + lines[i + 1:]
    return f


def to_bytes(lines, newline="\n"):
    return (newline.join(lines) + newline).encode("latin-1")


def accuracies(*values):
    def f(lines):
        for n, v in enumerate(values):
            lines = edit("eval_accuracy", set_value(v), nth=n)(lines)
        return lines
    return f


def blocks_to_epochs(lines):
    out = []
    for line in lines:
        if '"key": "block_start"' in line or '"key": "block_stop"' in line:
            rec = _rec(line)
            rec["key"] = "epoch_start" if rec["key"] == "block_start" else "epoch_stop"
            rec["metadata"] = {"file": "x", "lineno": 1, "epoch_num": 0}
            line = _dump(rec)
        out.append(line)
    return out


def init_stop_late(minutes):
    def change(rec):
        rec["time_ms"] += int(minutes * 60_000)
    return edit("init_stop", change)


# name -> (mutation of the line list, or of the bytes when it returns bytes)
MUTATIONS = {
    "baseline": lambda l: l,
    "drop_cache_clear": drop("cache_clear"),
    "drop_init_start": drop("init_start"),
    "drop_init_stop": drop("init_stop"),
    "drop_run_start": drop("run_start"),
    "drop_run_stop": drop("run_stop"),
    "drop_all_eval_accuracy": drop("eval_accuracy"),
    "drop_submission_division": drop("submission_division"),
    "drop_submission_benchmark": drop("submission_benchmark"),
    "drop_submission_org": drop("submission_org"),
    "drop_submission_status": drop("submission_status"),
    "drop_opt_lamb_epsilon": drop("opt_lamb_epsilon"),
    "drop_opt_epsilon": drop("opt_epsilon"),
    "drop_gradient_accumulation": drop("gradient_accumulation_steps"),
    "drop_train_samples": drop("train_samples"),
    "drop_eval_samples": drop("eval_samples"),
    "drop_blocks": lambda l: drop("block_stop")(drop("block_start")(l)),
    "drop_blocks_and_evals": lambda l: drop("eval_stop")(drop("eval_start")(drop("block_stop")(drop("block_start")(l)))),
    "blocks_as_epochs": blocks_to_epochs,
    "drop_eval_start_stop": lambda l: drop("eval_stop")(drop("eval_start")(l)),
    "drop_one_tensor": drop("weights_initialization", nth=7),
    "drop_all_tensors": drop("weights_initialization"),
    "duplicate_tensor": duplicate("weights_initialization", nth=3),
    "renamed_tensor": edit("weights_initialization", set_meta(tensor="bert/extra"), nth=5),
    "tensor_without_name": edit("weights_initialization", del_meta("tensor"), nth=5),
    "duplicate_beta2_same": duplicate("opt_lamb_beta_2"),
    "duplicate_beta2_other": duplicate("opt_lamb_beta_2", set_value(0.99)),
    "duplicate_run_start": duplicate("run_start"),
    "duplicate_init_start_late": move_after("init_start", "run_start"),
    "duplicate_division_other": duplicate("submission_division", set_value("open")),
    "run_stop_before_run_start": move_before("run_stop", "run_start"),
    "run_start_before_init_stop": move_before("run_start", "init_stop"),
    "division_after_init_stop": move_after("submission_division", "init_stop"),
    "init_stop_31_min": init_stop_late(31),
    "init_stop_29_min": init_stop_late(29),
    "open_init_stop_31_min": lambda l: init_stop_late(31)(edit("submission_division", set_value("open"))(l)),
    "run_stop_without_status": edit("run_stop", del_meta("status")),
    "run_stop_aborted": edit("run_stop", set_meta(status="aborted")),
    "eval_accuracy_no_epoch_num": edit("eval_accuracy", del_meta("epoch_num"), nth=1),
    "eval_accuracy_samples_count_only": edit_all("eval_accuracy", lambda r: r.__setitem__(
        "metadata", {"file": "x", "lineno": 1, "samples_count": 5})),
    "best_accuracy_0719": accuracies(0.40, 0.65, 0.71, 0.719),
    "accuracy_exactly_target": accuracies(0.40, 0.65, 0.71, 0.720),
    "accuracy_one": accuracies(0.40, 0.65, 0.71, 1.0),
    "accuracy_null": edit("eval_accuracy", set_value(None), nth=2),
    "accuracy_string": edit("eval_accuracy", set_value("0.75"), nth=3),
    "accuracy_nan": lambda l: [x.replace('"value": 0.7205', '"value": NaN') for x in l],
    "block_start_no_epoch_count": edit("block_start", del_meta("epoch_count")),
    "block_start_epoch_count_zero": edit("block_start", set_meta(epoch_count=0)),
    "block_start_samples_count": edit("block_start", lambda r: r.__setitem__(
        "metadata", {"file": "x", "lineno": 1, "samples_count": 0})),
    "block_stop_step_num": edit("block_stop", lambda r: r.__setitem__(
        "metadata", {"file": "x", "lineno": 1, "step_num": 0})),
    "epoch_start_samples_count": lambda l: edit("epoch_start", lambda r: r.__setitem__(
        "metadata", {"file": "x", "lineno": 1, "samples_count": 0}))(blocks_to_epochs(l)),
    "accumulation_string": edit("gradient_accumulation_steps", set_value("1")),
    "accumulation_zero": edit("gradient_accumulation_steps", set_value(0)),
    "status_available": edit("submission_status", set_value("available")),
    "org_empty": edit("submission_org", set_value("")),
    "eval_samples_empty": edit("eval_samples", set_value("")),
    "division_open": edit("submission_division", set_value("open")),
    "division_bogus": edit("submission_division", set_value("bogus")),
    "benchmark_resnet": edit("submission_benchmark", set_value("resnet")),
    "benchmark_bertx": edit("submission_benchmark", set_value("bertx")),
    "metadata_string": edit("run_stop", lambda r: r.__setitem__("metadata", "status")),
    "metadata_list": edit("block_start", lambda r: r.__setitem__("metadata", ["epoch_count"])),
    "key_not_string": edit("eval_samples", lambda r: r.__setitem__("key", 7)),
    "extra_unknown_keys": lambda l: l[:3] + [mllog_line("tracked_stats", {"a": 1}), "plain text"] + l[3:],
    "broken_json": lambda l: l[:5] + [l[5][:-3]] + l[6:],
    "missing_value_member": replace_line("eval_samples", TOKEN + json.dumps(
        {"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": "eval_samples", "metadata": {}})),
    "time_ms_text": edit("train_samples", lambda r: r.__setitem__("time_ms", "soon")),
    "time_ms_null": edit("train_samples", lambda r: r.__setitem__("time_ms", None)),
    "time_ms_huge_int": lambda l: l[:-1] + [l[-1].replace('"time_ms": ', '"time_ms": 9' + "0" * 400 + ', "x": ', 1)],
    "json_array_line": lambda l: l + [TOKEN + "[1, 2, 3]"],
    "deeply_nested": lambda l: l + [TOKEN + "[" * 3000 + "]" * 3000],
    "token_without_json": lambda l: l + [TOKEN],
    "mpirun_prefix": lambda l: ["0: " + x for x in l],
    "text_before_token_twice": lambda l: ["junk :::MLLOG noise " + x for x in l],
    "crlf": lambda l: to_bytes(l, "\r\n"),
    "cr_only": lambda l: to_bytes(l, "\r"),
    "binary_garbage": lambda l: to_bytes(l) + bytes(range(256)) * 4,
    "binary_garbage_with_token": lambda l: to_bytes(l) + b":::MLLOG \x00\xff\xfe{\x01}\n",
    "truncated_mid_line": lambda l: to_bytes(l)[:-40],
    "truncated_half": lambda l: to_bytes(l)[: len(to_bytes(l)) // 2],
    "empty_file": lambda l: b"",
    "no_mllog_lines": lambda l: b"hello\nworld\n",
    "missing_run_stop_and_tail": lambda l: l[:-6],
}


@pytest.fixture(scope="module")
def mutated_logs(tmp_path_factory):
    base = make_log_lines()
    folder = tmp_path_factory.mktemp("mutations")
    paths = {}
    for name, mutate in MUTATIONS.items():
        out = mutate(list(base))
        path = folder / f"{name}.txt"
        if isinstance(out, bytes):
            path.write_bytes(out)
        else:
            write_lines(path, out)
        paths[name] = path
    return paths


def test_enough_mutations():
    assert len(MUTATIONS) - 1 >= 30


@pytest.mark.parametrize("ruleset", LOG_RULESETS)
def test_mutations_match_official(mutated_logs, ruleset):
    mismatches = []
    verdicts = {}
    for name, path in mutated_logs.items():
        ours = check_log(path, ruleset)
        theirs = official_log_verdict(path, ruleset)
        verdicts[name] = theirs
        if ours.passed != theirs:
            mismatches.append((name, ours.passed, theirs, [f.render() for f in ours.errors][:2]))
    assert not mismatches
    assert verdicts["baseline"] is True
    assert sum(not v for v in verdicts.values()) >= 30


def test_werror_matches_official(mutated_logs):
    for name in ("baseline", "duplicate_beta2_same", "duplicate_run_start"):
        path = mutated_logs[name]
        for ruleset in ("2.1.0", "5.0.0"):
            assert check_log(path, ruleset, werror=True).passed == \
                official_log_verdict(path, ruleset, werror=True), (name, ruleset)


def _only_error(result):
    errors = result.errors
    assert errors, result
    return errors


def test_messages_point_at_line_key_rule_and_fix(mutated_logs):
    res = check_log(mutated_logs["run_stop_without_status"], "5.0.0")
    [err] = _only_error(res)
    lines = mutated_logs["run_stop_without_status"].read_text().splitlines()
    assert err.key == "run_stop" and err.line == len(lines)
    assert "status" in err.message and "status" in err.fix and "run-stop-status" in err.rule

    res = check_log(mutated_logs["division_after_init_stop"], "2.1.0")
    [err] = _only_error(res)
    assert err.key == "init_stop" and "submission_division" in err.message

    res = check_log(mutated_logs["broken_json"], "2.1.0")
    [err] = [f for f in _only_error(res) if "parse" in f.rule]
    assert err.line == 6 and "JSON" in err.message

    res = check_log(mutated_logs["accuracy_null"], "5.0.0")
    assert not res.passed and res.official_crash
    assert any(f.key == "eval_accuracy" and f.line for f in res.errors)

    res = check_log(mutated_logs["duplicate_beta2_other"], "3.0.0")
    [err] = _only_error(res)
    assert err.key == "opt_lamb_beta_2" and "0.99" in err.message and len(err.lines) == 2

    res = check_log(mutated_logs["best_accuracy_0719"], "4.1.0")
    [err] = _only_error(res)
    assert "0.719" in err.message and "0.720" in err.message

    res = check_log(mutated_logs["missing_value_member"], "2.1.0")
    assert res.official_crash and "value" in res.errors[0].message


def test_real_log_mutations_match_official(tmp_path):
    logs = [p for p in corpus_logs() if "/v4.0/" in str(p)]
    if not logs:
        pytest.skip("shared MLPerf results not found (set BERTPERF_SHARED_DIR)")
    base = logs[0].read_text(encoding="latin-1").splitlines()
    picks = ("drop_opt_lamb_epsilon", "run_stop_without_status", "best_accuracy_0719",
             "duplicate_beta2_other", "drop_one_tensor", "mpirun_prefix", "division_after_init_stop")
    for name in picks:
        out = MUTATIONS[name](list(base))
        path = tmp_path / f"{name}.txt"
        if isinstance(out, bytes):
            path.write_bytes(out)
        else:
            write_lines(path, out)
        for ruleset in ("2.1.0", "5.0.0"):
            assert check_log(path, ruleset).passed == official_log_verdict(path, ruleset), (name, ruleset)


def test_self_queueing_benchmark_fails_without_hanging(tmp_path):
    # The official checker never finishes on this log (closed_common keeps queueing itself),
    # so it is not run here; ours must stop and fail.
    lines = edit("submission_benchmark", set_value("common"))(make_log_lines())
    path = write_lines(tmp_path / "loop.txt", lines)
    res = check_log(path, "5.0.0")
    assert not res.passed and any("queue" in f.rule for f in res.errors)
