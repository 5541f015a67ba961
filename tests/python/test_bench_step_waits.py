"""bertperf bench-step's host waits (harness/train_step.h: no host wait in a step): the thread that runs the steps
waits for nothing between the reads of the step records that end each repeat, on cpu-async (captured, its worker
behind the host) and on cpu-bf16; the batch pipeline's reader on cpu-async waits for the uploads that last read its
pinned blocks (about one a step), and --losses, which reads every step's record, waits once a step."""
import json
import subprocess

import pytest

from bertperf_paths import find_binary

BERTPERF = find_binary("bertperf")
pytestmark = pytest.mark.skipif(BERTPERF is None, reason="build/bin/bertperf is not built")


def best(backend, *args):
    proc = subprocess.run([str(BERTPERF), "bench-step", "--model", "mini", "--batch", "2", "--warmup", "3",
                           "--steps", "6", "--repeats", "1", "--threads", "1", "--backend", backend, *args],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    return next(line for line in lines if line.get("summary") == "best")


@pytest.mark.parametrize("backend, captured, reader", [("cpu-async", True, True), ("cpu-bf16", False, False)])
def test_the_stepping_thread_waits_for_nothing_between_reads(backend, captured, reader):
    s = best(backend)
    assert s["captured"] is captured
    assert s["host_waits_per_step"] == 0
    if reader:  # a reader thread only where the backend is asynchronous
        assert 0 < s["reader_waits_per_step"] <= 1
    else:
        assert s["reader_waits_per_step"] == 0


def test_reading_every_record_waits_once_a_step():
    assert best("cpu-async", "--losses")["host_waits_per_step"] == 1


def test_the_ring_of_records_is_the_backend_options():
    # --backend-options record_slots=2: the ring fills twice in a repeat of 6 steps read once, and launch() reads it
    # for the stepping thread (2 waits in 6 steps); the default ring of 16 holds them all. A capture=false there keeps
    # the steps eager, as --eager does.
    assert best("cpu-async", "--backend-options", "record_slots=2")["host_waits_per_step"] == 0.33
    assert best("cpu-async", "--backend-options", "record_slots=16")["host_waits_per_step"] == 0
    assert best("cpu-async", "--backend-options", "capture=false")["captured"] is False
