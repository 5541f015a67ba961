"""The bertperf-check command line: exit status (0 pass, 1 fail, 2 usage), --json, and
messages that name file, line, key, rule and fix."""

import contextlib
import io
import json
import subprocess
import sys

from compliance_support import REPO, make_log_lines, mllog_line, write_lines
from bertperf_compliance.check import cli


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main(list(argv))
    return status, out.getvalue(), err.getvalue()


def test_exit_status_and_text(tmp_path):
    good = write_lines(tmp_path / "good.txt", make_log_lines())
    lines = make_log_lines()
    lines[-1] = lines[-1].replace('"status": "success"', '"x": 1')
    bad = write_lines(tmp_path / "bad.txt", lines)
    assert run("--ruleset", "2.1.0", str(good))[0] == 0
    status, out, _ = run("--ruleset", "2.1.0", str(good), str(bad))
    assert status == 1
    assert f"PASS {good}" in out and f"FAIL {bad}" in out
    assert f"{bad}:{len(lines)}: error: [2.1.0/common/run_stop:run-stop-status] run_stop:" in out
    assert "fix: add metadata" in out


def test_usage_errors(tmp_path):
    good = write_lines(tmp_path / "good.txt", make_log_lines())
    assert run("--ruleset", "6.0.0", str(good))[0] == 2
    status, _, err = run("--ruleset", "5.1.0", str(good))
    assert status == 2 and "retired" in err
    assert run(str(tmp_path / "missing.txt"))[0] == 2
    assert run("--bogus", str(good))[0] == 2
    assert run()[0] == 2


def test_json_output(tmp_path):
    lines = make_log_lines()
    lines.insert(3, lines[3][:-5])          # a broken JSON line
    bad = write_lines(tmp_path / "bad.txt", lines)
    status, out, _ = run("--json", "--ruleset", "5.0.0", str(bad))
    doc = json.loads(out, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))  # strict
    assert status == 1 and doc["passed"] is False
    [inp] = doc["inputs"]
    errors = [f for f in inp["result"]["findings"] if f["severity"] == "error"]
    assert any(f["line"] == 4 and "JSON" in f["message"] and f["fix"] for f in errors)


def test_result_directory_and_garbage(tmp_path):
    folder = tmp_path / "bert"
    folder.mkdir()
    for i in range(10):
        write_lines(folder / f"result_{i}.txt", make_log_lines(seed=100 + i))
    status, out, _ = run("--ruleset", "3.0.0", str(folder))
    assert status in (0, 1) and "10 of 10 runs comply" in out
    (tmp_path / "junk.bin").write_bytes(bytes(range(256)) * 10)
    assert run("--ruleset", "3.0.0", str(tmp_path / "junk.bin"))[0] == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run(str(empty))[0] == 1


def test_console_entry_point_runs(tmp_path):
    good = write_lines(tmp_path / "good.txt", make_log_lines())
    proc = subprocess.run([sys.executable, "-m", "bertperf_compliance.check", "--quiet", "--ruleset", "4.0.0",
                           str(good)], capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO / "compliance")})
    assert proc.returncode == 0, proc.stderr
