"""Seeded fuzzing of bertperf-check: random bytes and random edits of real (or synthetic)
logs.  No exception may escape, every input gets a verdict, and on edited logs the
verdict equals the official checker's."""

import io
import json
import random
import contextlib

import pytest

from compliance_support import corpus_logs, make_log_lines, official_log_verdict
from bertperf_compliance.check import cli
from bertperf_compliance.check.engine import LogResult, check_log

SEED = 20240601
N_RANDOM = 40
N_EDITS = 70
TOKEN = b":::MLLOG "
JSON_ODDITIES = [b"null", b'"x"', b"-1", b"0", b"1e400", b"NaN", b"[]", b"{}", b"true", b'""',
                 b"0.72", b"1.0", b'"closed"', b'"open"', b'"bert"']
KEYS = [b"run_start", b"run_stop", b"init_start", b"init_stop", b"eval_accuracy", b"block_start",
        b"block_stop", b"submission_division", b"submission_benchmark", b"seed", b"weights_initialization",
        b"opt_lamb_epsilon", b"train_samples", b"cache_clear"]


def _base_logs():
    real = [p for p in corpus_logs() if "/v4.0/" in str(p) or "/v2.1/Baidu" in str(p)]
    bases = [p.read_bytes() for p in real[:1] + real[-1:]]
    bases.append(("\n".join(make_log_lines()) + "\n").encode())
    return bases


def _edit(rng: random.Random, data: bytes) -> bytes:
    lines = data.split(b"\n")
    for _ in range(rng.randint(1, 3)):
        if not lines:
            lines = [b""]
        op = rng.randrange(9)
        i = rng.randrange(len(lines))
        if op == 0:
            del lines[i]
        elif op == 1:
            lines.insert(i, lines[rng.randrange(len(lines))])
        elif op == 2:
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == 3 and lines[i]:
            b = bytearray(lines[i])
            b[rng.randrange(len(b))] = rng.randrange(256)
            lines[i] = bytes(b)
        elif op == 4:
            lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
        elif op == 5:
            # Replace one JSON scalar (a number, a value) with an odd token.
            line = lines[i]
            spots = [k for k in range(len(line)) if line[k:k + 2] == b": "]
            if spots:
                k = rng.choice(spots) + 2
                end = k
                while end < len(line) and line[end:end + 1] not in (b",", b"}"):
                    end += 1
                lines[i] = line[:k] + rng.choice(JSON_ODDITIES) + line[end:]
        elif op == 6:
            line = lines[i]
            start = line.find(b'"key": "')
            if start >= 0:
                start += 8
                end = line.find(b'"', start)
                lines[i] = line[:start] + rng.choice(KEYS) + line[end:]
        elif op == 7:
            lines.insert(i, bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))))
        else:
            lines[i] = rng.choice([b"", b"0: ", b"junk ", TOKEN]) + lines[i]
    out = b"\n".join(lines)
    if rng.random() < 0.1:
        out = out[: rng.randrange(len(out) + 1)]
    return out


def _random_bytes(rng: random.Random) -> bytes:
    n = rng.randrange(0, 3000)
    data = bytearray(rng.randrange(256) for _ in range(n))
    for _ in range(rng.randrange(0, 6)):
        k = rng.randrange(len(data) + 1)
        data[k:k] = TOKEN + rng.choice([b"{", b"{}", b'{"key": "run_stop"}', b"\xff\xfe", b""])
    return bytes(data)


def _cases():
    rng = random.Random(SEED)
    bases = _base_logs()
    cases = [("random", _random_bytes(rng)) for _ in range(N_RANDOM)]
    cases += [("edit", _edit(rng, rng.choice(bases))) for _ in range(N_EDITS)]
    return cases


def test_fuzz_never_raises_and_matches_official(tmp_path):
    mismatches = []
    for n, (kind, data) in enumerate(_cases()):
        path = tmp_path / f"case_{n}.txt"
        path.write_bytes(data)
        for ruleset in ("2.1.0", "5.0.0"):
            res = check_log(path, ruleset)            # must not raise
            assert isinstance(res, LogResult) and isinstance(res.passed, bool)
            if not res.passed:
                assert res.errors and all(f.rule and f.file for f in res.errors)
            # The oracle is slow on real logs: each case is compared under one ruleset.
            if (kind == "edit" or n % 4 == 0) and ruleset == ("2.1.0", "5.0.0")[n % 2]:
                theirs = official_log_verdict(path, ruleset)
                if theirs != res.passed:
                    mismatches.append((n, ruleset, res.passed, theirs))
        # Bytes and text input give the same verdict as the file.
        assert check_log(data, "5.0.0").passed == check_log(path, "5.0.0").passed
    assert not mismatches


def test_fuzz_cli_exit_status(tmp_path):
    rng = random.Random(SEED + 1)
    for n in range(10):
        path = tmp_path / f"cli_{n}.txt"
        path.write_bytes(_random_bytes(rng))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = cli.main(["--json", "--ruleset", "2.1.0", str(path)])
        assert status in (0, 1)
        doc = json.loads(out.getvalue())
        assert doc["passed"] is (status == 0)


def test_fuzz_parser_agrees_with_official_parser(tmp_path):
    parser = pytest.importorskip("mlperf_logging.compliance_checker.mlp_parser")
    from bertperf_compliance.mllog_parse import parse_file
    for n, (kind, data) in enumerate(_cases()):
        path = tmp_path / f"p_{n}.txt"
        path.write_bytes(data)
        ours = parse_file(path)
        try:
            lines, errors = parser.parse_file(str(path), ruleset="5.0.0")
        except Exception:
            assert ours.official_crash is not None, n
            continue
        assert ours.official_crash is None, n
        assert [(r.key, r.time_ms, r.index) for r in ours.records] == \
            [(l.key, l.timestamp, l.lineno) for l in lines], n
        assert [r.value for r in ours.records] == [l.value["value"] for l in lines] or \
            any(r.value != r.value for r in ours.records), n    # NaN values never compare equal
        assert [e.text for e in ours.errors] == [line for line, _ in errors], n
