"""bertperf bench-step --roofline: the step's figures are the sum of its ops' (each priced on the device of the
table), the samples a second are the step's sequences over its time, the op named as holding the step back is the
one that takes longest, FP8 prices only the encoder's linears lower, and a device without the figures, an unknown
device or --device without --roofline is one line."""
import json
import subprocess

import pytest

from bertperf_paths import REPO, find_binary

BERTPERF = find_binary("bertperf")
pytestmark = pytest.mark.skipif(BERTPERF is None, reason="build/bin/bertperf is not built")
DEVICES = REPO / "benchmarks/bert/mlperf/reference/devices.json"


def roofline(*args):
    proc = subprocess.run([str(BERTPERF), "bench-step", "--model", "mini", "--batch", "8", "--roofline",
                           "--devices", str(DEVICES), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    ops = [line for line in lines if "op" in line]
    summaries = {line["summary"]: line for line in lines if "summary" in line}
    return ops, summaries


@pytest.mark.parametrize("device, name, bandwidth", [("h200", "h200", 4.8e12), ("h100", "h100-sxm", 3.35e12)])
def test_the_step_is_the_sum_of_its_ops(device, name, bandwidth):
    ops, summaries = roofline("--device", device)
    assert {op["device"] for op in ops} == {name}
    for precision, key in (("bf16", "bf16_us"), ("fp8", "fp8_us")):
        s = summaries[precision]
        assert s["ops"] == sum(op["count"] for op in ops)
        assert s["step_ms"] == pytest.approx(sum(op[key] for op in ops) / 1e3, abs=1e-4 + 0.005e-3 * len(ops))
        assert s["samples_per_s"] == pytest.approx(s["sequences"] / (s["step_ms"] / 1e3), rel=1e-3)
        longest = max(ops, key=lambda op: op[key])
        assert s["holds_back"] == f"{longest['op']} {longest['shape']}"
    for op in ops:
        # memory-bound ops take their bytes over the bandwidth, plus the 2 us launch
        if op["bound"] == "memory":
            assert op["bf16_us"] == pytest.approx(op["mib"] * 1048576 / bandwidth * 1e6 + 2 * op["count"], abs=0.11)
        # FP8 reprices the encoder's linears (over all 8 x 128 tokens) and nothing else
        if op["op"].startswith("linear") and op["shape"].startswith("N=1024 "):
            assert op["fp8_us"] < op["bf16_us"]
        else:
            assert op["fp8_us"] == op["bf16_us"]
    assert summaries["fp8"]["step_ms"] < summaries["bf16"]["step_ms"]


@pytest.mark.parametrize("args, needle", [
    (["--roofline", "--device", "a30", "--devices", DEVICES], "device 'a30' has no peak_flops, fp8_peak_flops"),
    (["--roofline", "--device", "tpu-v9", "--devices", DEVICES], "unknown device 'tpu-v9'"),
    (["--device", "h200"], "--device and --devices go with --roofline"),
])
def test_bad_devices_are_one_line(args, needle):
    proc = subprocess.run([str(BERTPERF), "bench-step", "--model", "mini", *map(str, args)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
