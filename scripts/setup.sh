#!/usr/bin/env bash
# Installs everything bertperf needs on a fresh Debian 12 machine, idempotently:
#   - Debian packages: compilers and CMake, OpenBLAS, oneDNN (cpu-bf16's GEMMs), HDF5, nlohmann-json,
#     Open MPI, Slurm (for the sbatch test, tests/python/test_slurm.py, which starts its own daemons),
#     GoogleTest, Google Benchmark, and the English text packages the corpus is made from;
#   - data/corpus and data/vocab: the real text corpus and the BERT vocabulary
#     (scripts/prepare_corpus.py), once;
#   - .venv: the pinned Python packages of requirements.txt plus the compliance package (editable);
#   - with --reference, also .venv-ref: the pinned reference tools of requirements-reference.txt
#     (PyTorch, transformers, tensorflow-cpu), used only to regenerate golden files and to run the
#     side-by-side benchmarks; CI does not need them.
# Usage: scripts/setup.sh [--reference]
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(
  build-essential cmake pkg-config git
  libopenblas-dev libdnnl-dev libhdf5-dev nlohmann-json3-dev
  libopenmpi-dev openmpi-bin
  slurmctld slurmd slurm-client
  libgtest-dev libbenchmark-dev
  clang libomp-dev
  python3 python3-venv
  dict-gcide dict-wn dict-foldoc dict-jargon dict-devil fortunes fortunes-min
)

missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

make_venv() {  # make_venv DIR REQUIREMENTS
  local dir=$1 req=$2 stamp="$1/.requirements.sha"
  local want; want=$(sha256sum "$req" compliance/pyproject.toml 2>/dev/null | sha256sum | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return; fi
  echo "setup: creating $dir from $req"
  [ -x "$dir/bin/python" ] || python3 -m venv "$dir"
  # Lines marked "headers only" are installed without their dependencies (cudnn-frontend's Python side pulls in
  # large GPU packages that the C++ build does not use); lines marked "own venv" are pins for a tool that needs an
  # environment of its own (TensorFlow's h5py and numpy conflict with the reference's).
  "$dir/bin/python" -m pip install -q --disable-pip-version-check -r <(grep -v -e 'headers only' -e 'own venv' "$req")
  { grep 'headers only' "$req" || true; } | cut -d' ' -f1 | xargs -r "$dir/bin/python" -m pip install -q \
    --disable-pip-version-check --no-deps
  if [ -f compliance/pyproject.toml ]; then
    "$dir/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e compliance
  fi
  echo "$want" > "$stamp"
}

make_venv .venv requirements.txt
if [ ! -f data/vocab/vocab.txt ] || [ ! -f data/corpus/MANIFEST.json ]; then
  .venv/bin/python scripts/prepare_corpus.py --out data/corpus
fi
if [ "${1:-}" = "--reference" ]; then
  make_venv .venv-ref requirements-reference.txt
fi
echo "setup: done"
