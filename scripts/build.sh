#!/usr/bin/env bash
# Configures and builds bertperf into build/ (Release; CUDA, MPI and NCCL are used when found).
# Usage: scripts/build.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(nproc)"
