"""scripts/bench_data.py, with stand-ins for `bertperf bench-data` and the PyTorch peer that report given rates round
by round: the two read paths alternate, each row keeps its best round's record, and the table and the JSON report
the spread of the rounds (every round's rate in the order run, their worst, median and best) as they were given."""
import json
import statistics
import subprocess
import sys

from bertperf_paths import REPO

SCRIPT = REPO / "scripts" / "bench_data.py"

# samples/s per core of each round, per read path (ranks 1 and 4 of bertperf, the peer)
RATES = {"1": [210.0, 190.0, 230.0], "4": [120.0, 160.0, 140.0], "peer": [95.0, 80.0, 90.0]}

STAND_IN = """#!{python}
# `bertperf bench-data ... --ranks R ...` or `PYTHON bench_data_peer.py --ranks R ...`: logs the call and prints the
# next rate of its read path (RATES) in the last JSON line, as the real programs print their record.
import json, sys
rates = json.loads({rates!r})
log = {log!r}
key = sys.argv[sys.argv.index("--ranks") + 1] if sys.argv[1] == "bench-data" else "peer"
with open(log, "a") as f:
    f.write(key + "\\n")
calls = open(log).read().split().count(key)
record = {{"samples_per_s_per_core": rates[key][calls - 1], "round": calls, "samples": 560, "steps": 10,
          "tokens_per_step": 14000, "shard_bytes_per_step": 5000, "value_bytes_per_step": 4800,
          "index_bytes_per_step": 150, "index_open_bytes": 2000, "files": 3, "ranks": 4}}
print("a line that is not JSON")
print(json.dumps(record))
"""


def test_the_rounds_alternate_and_their_spread_is_reported(tmp_path):
    log = tmp_path / "calls.log"
    stand_in = tmp_path / "stand_in"
    stand_in.write_text(STAND_IN.format(python=sys.executable, rates=json.dumps(RATES), log=str(log)))
    stand_in.chmod(0o755)
    data = tmp_path / "shards"
    data.mkdir()
    (data / "part_0.hdf5").write_bytes(b"")  # shards already made: the script makes none
    got = subprocess.run([sys.executable, str(SCRIPT), "--ranks", "1", "4", "--batch", "28", "--steps", "10",
                          "--rounds", "3", "--data", str(data), "--bertperf", str(stand_in), "--python-ref",
                          str(stand_in), "--json"], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    assert log.read_text().split() == ["1", "4", "peer"] * 3

    report = json.loads(got.stdout[got.stdout.index("\n{\n") + 1:])
    records = {"1": report["bertperf"][0], "4": report["bertperf"][1], "peer": report["peer"]}
    table = [line for line in got.stdout.splitlines() if line.startswith("| ")]
    assert "worst / median / best (3)" in table[0]
    for key, rates in RATES.items():
        record = records[key]
        assert record["samples_per_s_per_core"] == max(rates)
        assert record["round"] == rates.index(max(rates)) + 1, "the row keeps its best round's record"
        assert record["spread"] == {"rounds": rates, "min": min(rates), "median": statistics.median(rates),
                                    "max": max(rates)}
        row = next(line for line in table[2:] if (key == "peer") == line.startswith("| PyTorch peer")
                   and (key == "peer" or line.split("|")[2].strip() == key))
        cells = [c.strip() for c in row.split("|")]
        assert cells[3] == f"{max(rates):,.0f}"
        assert cells[4] == f"{min(rates):,.0f} / {statistics.median(rates):,.0f} / {max(rates):,.0f}"
