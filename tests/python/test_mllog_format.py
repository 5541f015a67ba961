"""Our :::MLLOG lines against the official library's encoder.

The official `mlperf_logging.mllog` writes ':::MLLOG ' + json.dumps(record) with the defaults. The
C++ encoder (tests/cpp/test_mllog_format.cpp) writes lines for values chosen here (random float bit
patterns, integers up to 64 bits, arbitrary Unicode, nested structures) and for its own fixed
examples spelled the C++ way; every line must equal what json.dumps makes of the same values.
"""
import json
import math
import os
import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bertperf_paths import find_binary  # noqa: E402

ENCODER = find_binary("test_mllog_format")
pytestmark = pytest.mark.skipif(ENCODER is None, reason="test_mllog_format not built")


def expected_line(key, value, lineno):
    record = {
        "namespace": "",
        "time_ms": 1600000000000,
        "event_type": "POINT_IN_TIME",
        "key": key,
        "value": value,
        "metadata": {"file": "encode.cpp", "lineno": lineno, "copy": value, "nested": {"list": [value]}},
    }
    return ":::MLLOG " + json.dumps(record)


def run_encoder(tmp_path, inputs=None):
    env = dict(os.environ, BERTPERF_MLLOG_OUT=str(tmp_path))
    if inputs is not None:
        vectors = tmp_path / "vectors.in"
        vectors.write_text("\n".join(inputs) + "\n")
        env["BERTPERF_MLLOG_VECTORS"] = str(vectors)
    subprocess.run([str(ENCODER), "--gtest_brief=1"], env=env, check=True, capture_output=True, timeout=60)


# The C++ examples, spelled the Python way.
EXAMPLES = [
    ("one_micro", 1e-06),
    ("ten_micro", 1e-05),
    ("tenth_milli", 0.0001),
    ("int_float", 6700.0),
    ("one", 1.0),
    ("e16", 1e16),
    ("below_e16", 9999999999999998.0),
    ("third", 1 / 3),
    ("lr", 0.0020992),
    ("neg_zero", -0.0),
    ("tiny", 5e-324),
    ("huge", sys.float_info.max),
    ("nan", math.nan),
    ("inf", math.inf),
    ("neg_inf", -math.inf),
    ("int_2_53_plus_1", 2**53 + 1),
    ("int_min", -(2**63)),
    ("uint_max", 2**64 - 1),
    ("true", True),
    ("null", None),
    ("unicode", "caf\u00e9 \u20ac \U0001F600"),
    ("escapes", 'q" b\\ n\n r\r t\t b\b f\f nul\x01 del\x7f /'),
    ("nested", {"a": 1, "b": [1.5, "x", None, True, False], "c": {}, "d": []}),
]


def test_fixed_examples_match_json_dumps(tmp_path):
    run_encoder(tmp_path)
    lines = (tmp_path / "examples.txt").read_text(encoding="ascii").splitlines()
    assert len(lines) == len(EXAMPLES)
    for lineno, ((key, value), line) in enumerate(zip(EXAMPLES, lines), start=1):
        assert line == expected_line(key, value, lineno), key


def random_float(rng):
    kind = rng.random()
    if kind < 0.6:  # any bit pattern: subnormals, huge and tiny exponents, NaN, infinities
        return struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
    if kind < 0.8:  # around the fixed/exponent switch points 1e-4 and 1e16
        return rng.choice([1, -1]) * rng.uniform(0.5, 2) * 10.0 ** rng.choice([-6, -5, -4, -3, 14, 15, 16, 17])
    if kind < 0.9:  # integral floats
        return float(rng.randint(-(10**17), 10**17))
    return round(rng.uniform(0, 1), rng.randint(1, 8))  # short decimals like hyperparameters


def random_string(rng):
    chars = []
    for _ in range(rng.randint(0, 12)):
        plane = rng.random()
        if plane < 0.3:
            cp = rng.randint(0, 0x7F)
        elif plane < 0.6:
            cp = rng.randint(0x80, 0xFFFF)
        else:
            cp = rng.randint(0x10000, 0x10FFFF)
        if 0xD800 <= cp <= 0xDFFF:  # lone surrogates are not text
            cp = 0xFFFD
        chars.append(chr(cp))
    return "".join(chars)


def random_structure(rng, depth=0):
    choice = rng.random()
    if depth >= 3 or choice < 0.4:
        return rng.choice([None, True, False, rng.randint(-(2**63), 2**63 - 1), random_string(rng),
                           random_float(rng) if rng.random() < 0.5 else round(rng.random(), 4)])
    if choice < 0.7:
        return [random_structure(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {random_string(rng): random_structure(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def finite_only(value):
    """JSON text cannot carry NaN/Infinity into the C++ parser: replace them."""
    if isinstance(value, float) and not math.isfinite(value):
        return 0.5
    if isinstance(value, list):
        return [finite_only(v) for v in value]
    if isinstance(value, dict):
        return {k: finite_only(v) for k, v in value.items()}
    return value


def test_random_vectors_match_json_dumps(tmp_path):
    rng = random.Random(20240521)
    inputs, values = [], []
    for _ in range(3000):
        x = random_float(rng)
        inputs.append("float %016x" % struct.unpack("<Q", struct.pack("<d", x))[0])
        values.append(x)
    for n in [0, -1, 2**53 + 1, -(2**53) - 1, 2**63 - 1, -(2**63), 2**63, 2**64 - 1] + [
        rng.randint(-(2**63), 2**64 - 1) for _ in range(500)
    ]:
        inputs.append("int %d" % n)
        values.append(n)
    for _ in range(500):
        s = random_string(rng)
        inputs.append("str " + s.encode("utf-8").hex())
        values.append(s)
    for _ in range(300):
        v = finite_only(random_structure(rng))
        inputs.append("json " + json.dumps(v, ensure_ascii=False))
        values.append(v)

    run_encoder(tmp_path, inputs)
    lines = (tmp_path / "vectors.txt").read_text(encoding="ascii").splitlines()
    assert len(lines) == len(values)
    mismatches = []
    for lineno, (value, line) in enumerate(zip(values, lines), start=1):
        want = expected_line("value", value, lineno)
        if line != want:
            mismatches.append((inputs[lineno - 1], line, want))
    assert not mismatches, "first mismatches:\n" + "\n".join(
        f"input {i}\n  got  {g}\n  want {w}" for i, g, w in mismatches[:5]
    )


def test_lines_parse_back_to_the_values(tmp_path):
    """The reading side: the checker's parser (json.loads) gets the same values back."""
    run_encoder(tmp_path)
    lines = (tmp_path / "examples.txt").read_text(encoding="ascii").splitlines()
    for (key, value), line in zip(EXAMPLES, lines):
        record = json.loads(line[len(":::MLLOG "):])
        assert list(record) == ["namespace", "time_ms", "event_type", "key", "value", "metadata"]
        got = record["value"]
        if isinstance(value, float) and math.isnan(value):
            assert math.isnan(got)
        else:
            assert got == value and type(got) is type(value), key
