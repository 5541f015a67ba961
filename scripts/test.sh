#!/usr/bin/env bash
# Runs every test of bertperf from a fresh machine: setup, build, the C++ suite (CTest) and the
# Python suite (pytest). GPU tests report "skipped" where no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
echo "== C++ tests (ctest)"
(cd build && ctest --output-on-failure -j"$(nproc)")
echo "== Python tests (pytest)"
.venv/bin/python -m pytest -q tests/python

echo "== Fuzzing (libFuzzer, 20 s per target over tests/fuzz/corpus)"
scripts/fuzz.sh 20
