#!/usr/bin/env bash
# The mini benchmark end to end, from a fresh machine: set up, build, prepare the corpus and the
# mini data set, run the result set (the benchmark's run count, or --runs N), check every log with
# bertperf-check and with the official mlperf-logging checker, and print the report with plots,
# compared with the committed result set of this machine type (results/mini_cpu_2c) as the baseline;
# then package the set as an MLPerf submitter tree beside it (DIR-submission/, bertperf-package).
# Usage: scripts/mini.sh [--runs N] [--out DIR] [--config FILE]
#   --out     where the new result set goes (default: results/mini_<system>-<UTC date-time>, a fresh
#             directory; a committed set is never overwritten)
#   --config  the train config (default: benchmarks/bert/mini/cpu_2c.json; cpu_2c_bf16.json is the same
#             recipe on the cpu-bf16 backend, reported beside the fp32 set)
set -euo pipefail
cd "$(dirname "$0")/.."

runs=""
config="benchmarks/bert/mini/cpu_2c.json"
baseline="results/mini_cpu_2c"
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="--runs $2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --config) config="$2"; shift 2 ;;
    *) echo "usage: scripts/mini.sh [--runs N] [--out DIR] [--config FILE]" >&2; exit 2 ;;
  esac
done
system=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["system"])' "$config")
[ -n "$out" ] || out="results/mini_$system-$(date -u +%Y%m%d-%H%M%S)"

step() { echo; echo "== $*"; }

step "setup (Debian packages, Python environment, corpus and vocabulary)"
scripts/setup.sh
step "build"
scripts/build.sh
bertperf=build/bin/bertperf

# The mini data set: the training text of five corpus sources made into 16 shards by one
# reference job (every shard an even mix, as the parts of the MLPerf Wikipedia dump are), and an
# eval set of 1,000 sequences picked from a sixth, held-out source (The Devil's Dictionary), all at
# sequence length 128 with 20 predictions, as the reference does at 128.
shards=16
first_shard=$(printf 'data/mini/train/part-00000-of-%05d.hdf5' "$shards")
if [ ! -f "$first_shard" ] || [ ! -f data/mini/eval_1000.hdf5 ]; then
  step "mini data set"
  rm -rf data/mini.tmp && mkdir -p data/mini.tmp
  "$bertperf" data --vocab data/vocab/vocab.txt --out data/mini.tmp/train --max-seq-length 128 \
    --max-predictions 20 --dupe-factor 1 --shards "$shards" \
    data/corpus/gcide.txt data/corpus/wn.txt data/corpus/foldoc.txt data/corpus/jargon.txt data/corpus/fortunes.txt
  "$bertperf" data --vocab data/vocab/vocab.txt --out data/mini.tmp --max-seq-length 128 \
    --max-predictions 20 --dupe-factor 5 --eval-samples 1000 data/corpus/devil.txt
  rm -rf data/mini && mv data/mini.tmp data/mini
fi

step "result set: $out"
# shellcheck disable=SC2086
"$bertperf" run --config "$config" --out "$out" $runs

# Both checkers and the report always run; the script's exit status says whether all checks passed.
status=0
# The mini benchmark has no official RCP data: its convergence is checked against ten runs of
# the PyTorch implementation of the same recipe (scripts/pytorch_mini_recipe.py --out).
step "bertperf-check (with the PyTorch reference runs as RCP)"
.venv/bin/bertperf-check --ruleset 5.0.0 --rcp-reference benchmarks/bert/mini/reference/pytorch_cpu_2c.json "$out" \
  | tee "$out/CHECK.txt" || status=1

step "official checker (mlperf-logging, ruleset 5.0.0)"
for log in "$out"/results/*/bert/result_*.txt; do
  if .venv/bin/python -m mlperf_logging.compliance_checker --usage training --ruleset 5.0.0 "$log" >/dev/null 2>&1; then
    echo "PASS $log"
  else
    echo "FAIL $log"
    status=1
  fi
done

step "report"
target=$(.venv/bin/python -c 'import json; print(json.load(open("benchmarks/bert/mini/benchmark.json"))["target_accuracy"])')
# The new set beside the committed one of this machine type (the baseline, first row), with the
# regression flag: a slower result beyond noise is reported, but is no failed check.
trees=("$out")
if [ -d "$baseline/results" ] && [ "$(realpath "$baseline")" != "$(realpath "$out")" ]; then
  trees=("$baseline" "$out")
fi
.venv/bin/bertperf-report "${trees[@]}" --ruleset 5.0.0 --target "$target" --plots "$out/plots" || status=1
regression=0
.venv/bin/bertperf-report "${trees[@]}" --ruleset 5.0.0 --target "$target" --format markdown --output "$out/REPORT.md" \
  --fail-on-regression || { [ $? -eq 1 ] && regression=1; } || status=1
if [ "$regression" = 1 ]; then
  echo "mini: slower than the baseline $baseline beyond the noise between its runs (see the regression column of the"
  echo "  report); sets run hours apart on one machine have drifted by up to 5% with the same build (speed/RESULTS.md),"
  echo "  so time the step of both builds side by side (bertperf bench-step, alternating) before calling it a regression"
fi
# A result set is only a result when it has an MLPerf score (at most one run may miss the target).
if ! .venv/bin/bertperf-report "$out" --ruleset 5.0.0 --target "$target" --format json \
    | .venv/bin/python -c 'import json, sys; sys.exit(0 if all(s["score_min"] is not None for s in json.load(sys.stdin)["systems"]) else 1)'; then
  echo "mini: the result set has no score (see the note column above)" >&2
  status=1
fi

# The set as an MLPerf submission: the code of the commit that built the runs, the results and the system
# description, checked by bertperf-check and by the official package checker, repository checker and summarizer.
submission="$out-submission"
submitter=$(.venv/bin/python -c 'import json, sys; print(json.load(open(sys.argv[1]))["submitter"])' \
  "$out/systems/$system.json")
step "submission package: $submission/$submitter"
set -- "$out"/results/"$system"/bert/result_*.txt
if [ $# -ne 10 ]; then
  echo "skipped: a BERT submission holds 10 runs, this set $# (--runs)"
else
  .venv/bin/bertperf-package --submitter "$submitter" --implementation bertperf --out "$submission" \
    --rcp-reference benchmarks/bert/mini/reference/pytorch_cpu_2c.json "$out" || status=1
fi

echo
echo "report: $out/REPORT.md, checks: $out/CHECK.txt, plots: $out/plots/"
if [ -d "$submission/$submitter" ]; then echo "submission: $submission/$submitter/"; fi
exit $status
