#!/usr/bin/env bash
# The GPU check, on a bare machine with an NVIDIA GPU, CUDA, cuDNN, PyTorch and transformers but none of our Debian
# packages and no network: unpacks what scripts/device_bundle.sh prepared (.device-bundle/bundle.tar.gz, carried
# along), builds bertperf with the CUDA backend, runs the GPU tests (the backend-conformance test with both attention
# implementations, the whole step against the CPU, determinism, the captured step), compute-sanitizer's memcheck and
# racecheck on one step, then BERT-large at MLPerf phase-2 shapes side by side with PyTorch, and writes a short
# table. About 8 minutes on one H200.
#
#   scripts/device_check.sh [--dry-run] [--out DIR] [--batch ROWS] [--arch 90] [--budget 540]
#
#   --dry-run  build and run here as far as this machine allows (no GPU: the GPU tests report skipped), to catch
#              mistakes before a GPU minute is spent
#   --out      where the table and logs go (default: $OUT if set, else build-device/check)
#   --batch    packed rows of 512 tokens per step in the benchmark (default 32, about 64 sequences)
#   --arch     CUDA architectures to build (default 90: H100/H200; 80 for A100)
#   --budget   seconds for the whole check (default 540); a step that would start later is reported, not run
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

dry=0; out=${OUT:-$root/build-device/check}; rows=32; arch=90
budget=540   # seconds for everything; each step's time limit is cut to what is left
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) dry=1 ;;
    --out) out=$2; shift ;;
    --batch) rows=$2; shift ;;
    --arch) arch=$2; shift ;;
    --budget) budget=$2; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "device_check: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ $dry -eq 1 ] && budget=$(( budget * 20 ))
mkdir -p "$out"
log=$out/device_check.log
: > "$log"
start=$(date +%s)
results=()  # "name|status|detail"

say() { echo "[device_check $(( $(date +%s) - start ))s] $*" | tee -a "$log"; }
record() { results+=("$1|$2|$3"); say "$1: $2 ${3:+($3)}"; }
# step NAME SECONDS COMMAND...: runs with a time limit, its output in the log and in $out/NAME.txt.
step() {
  local name=$1 limit=$2; shift 2
  local left=$(( budget - ($(date +%s) - start) ))
  if [ "$left" -lt 15 ]; then
    echo "out of time: the check's budget of $budget s is spent" > "$out/$name.txt"
    say "$name: not run, out of time"
    return 124
  fi
  [ $dry -eq 1 ] && limit=$(( limit * 20 ))  # a dry run builds on whatever this machine is
  [ "$limit" -gt "$left" ] && limit=$left
  say "$name (up to $limit s): $*"
  timeout --kill-after=10 "$limit" "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  cat "$out/$name.txt" >> "$log"
  return $rc
}
# gtest NAME SECONDS COMMAND...: a GoogleTest run, recorded as passed, skipped (every test skipped) or failed.
gtest() {
  local name=$1
  step "$@"
  local rc=$? f=$out/$1.txt
  local passed skipped failed
  passed=$(grep -c '^\[       OK \]' "$f"); skipped=$(grep -c '^\[  SKIPPED \]' "$f"); failed=$(grep -c '^\[  FAILED  \]' "$f")
  if [ $rc -ne 0 ]; then record "$name" FAILED "exit $rc, $failed failed: $(grep '^\[  FAILED  \]' "$f" | head -3 | tr '\n' ' ')"
  elif [ "$passed" -eq 0 ] && [ "$skipped" -gt 0 ]; then record "$name" skipped "$(grep -m1 -A1 'Skipped' "$f" | tail -1 | cut -c1-100)"
  else record "$name" passed "$passed passed, $skipped skipped"; fi
}

# ---- what is here ----
export PATH=$PATH:/usr/local/cuda/bin
gpu=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L > "$out/gpu.txt" 2>&1; then gpu=1; fi
say "GPU: $(head -1 "$out/gpu.txt" 2>/dev/null || echo none); nvcc: $(command -v nvcc || echo none)"
if [ $gpu -eq 0 ] && [ $dry -eq 0 ]; then
  echo "device_check: no GPU here (nvidia-smi -L failed); --dry-run builds and runs the skip path" >&2
  exit 2
fi
py=$(command -v python3)

# ---- dependencies: the bundle, cuDNN ----
bundle=$root/.device-bundle
if [ ! -f "$bundle/bundle.tar.gz" ]; then
  echo "device_check: $bundle/bundle.tar.gz is missing: run scripts/device_bundle.sh on the build machine" >&2
  exit 2
fi
deps=$root/build-device/deps
if [ ! -f "$deps/.unpacked" ] || [ "$bundle/bundle.tar.gz" -nt "$deps/.unpacked" ]; then
  rm -rf "$deps"; mkdir -p "$deps"
  tar -C "$deps" -xzf "$bundle/bundle.tar.gz" && touch "$deps/.unpacked"
fi
export LD_LIBRARY_PATH=$deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# cuDNN: the CUDA install's, else the one pip installed for PyTorch (nvidia-cudnn-cu*).
cudnn_inc=""; cudnn_lib=""
for d in /usr/local/cuda/include /usr/include /usr/include/x86_64-linux-gnu; do
  [ -f "$d/cudnn.h" ] && { cudnn_inc=$d; break; }
done
for f in /usr/local/cuda/lib64/libcudnn.so /usr/local/cuda/lib/libcudnn.so /usr/lib/x86_64-linux-gnu/libcudnn.so \
         /usr/lib/x86_64-linux-gnu/libcudnn.so.9; do
  [ -e "$f" ] && { cudnn_lib=$f; break; }
done
if [ -z "$cudnn_inc" ] || [ -z "$cudnn_lib" ]; then
  pip_cudnn=$("$py" -c 'import importlib.util as u; s = u.find_spec("nvidia.cudnn"); print(list(s.submodule_search_locations)[0] if s else "")' 2>/dev/null)
  if [ -n "$pip_cudnn" ]; then
    [ -z "$cudnn_inc" ] && [ -f "$pip_cudnn/include/cudnn.h" ] && cudnn_inc=$pip_cudnn/include
    [ -z "$cudnn_lib" ] && cudnn_lib=$(ls "$pip_cudnn"/lib/libcudnn.so* 2>/dev/null | head -1)
    export LD_LIBRARY_PATH=$pip_cudnn/lib:$LD_LIBRARY_PATH
  fi
fi
say "cuDNN: headers ${cudnn_inc:-none}, library ${cudnn_lib:-none}"

# ---- build ----
cuda=ON
if ! command -v nvcc >/dev/null || [ -z "$cudnn_inc" ] || [ -z "$cudnn_lib" ]; then
  [ $dry -eq 1 ] || { echo "device_check: nvcc or cuDNN not found" >&2; exit 2; }
  cuda=OFF
fi
generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
# A dry run finds nothing in /usr, as on the bare machine (the compiler's own include path aside).
ignore_system=(); [ $dry -eq 1 ] && ignore_system=("-DCMAKE_SYSTEM_IGNORE_PREFIX_PATH=/usr;/")
build=$root/build-device/build
if ! step configure 120 cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DBERTPERF_WITH_CUDA=$cuda -DBERTPERF_WITH_MPI=OFF -DBERTPERF_WITH_NCCL=OFF -DBERTPERF_BUILD_BENCHMARKS=OFF \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" \
    -DBERTPERF_CUDNN_FRONTEND_DIR="$deps/cudnn-frontend/include" -DCUDNN_INCLUDE_DIR="$cudnn_inc" \
    -DBERTPERF_CUDNN_LIBRARY="$cudnn_lib" \
    -DCMAKE_PREFIX_PATH="$deps" -DBLA_VENDOR=OpenBLAS -DHDF5_ROOT="$deps" \
    -DHDF5_C_COMPILER_EXECUTABLE=HDF5_C_COMPILER_EXECUTABLE-NOTFOUND -DGTEST_ROOT="$deps" \
    -Dnlohmann_json_DIR="$deps/share/cmake/nlohmann_json" "${ignore_system[@]}"; then
  record build FAILED "cmake configure: see configure.txt"
fi
jobs=$(nproc)
if [ -f "$build/CMakeCache.txt" ] && step build 300 cmake --build "$build" -j "$jobs" --target \
    bertperf_cli test_backend_ops test_gpu_step; then
  record build passed "CUDA $cuda, sm_$arch"
else
  record build FAILED "see build.txt: $(grep -m1 -E 'error:|Error [0-9]|CMake Error' "$out/build.txt" | cut -c1-160)"
fi
bin=$build/bin

# ---- GPU tests ----
if [ -x "$bin/test_gpu_step" ]; then
  gtest conformance 120 "$bin/test_backend_ops" --gtest_filter='*/cuda'
  BERTPERF_CUDA_ATTENTION=kernel gtest conformance_kernel 60 "$bin/test_backend_ops" \
    --gtest_filter='*AttentionForwardAndBackward/cuda:*DropoutMasks*/cuda'
  gtest step 90 "$bin/test_gpu_step"
fi

# ---- benchmark: BERT-large, MLPerf phase-2 shapes, side by side ----
ours_sps=""; torch_sps=""
if [ $gpu -eq 1 ] && [ -x "$bin/bertperf" ]; then
  if step bench_bertperf 90 "$bin/bertperf" bench-step --model large --packed --batch "$rows" --backend cuda \
      --warmup 3 --steps 10 --repeats 3; then
    ours_sps=$(grep '"summary"' "$out/bench_bertperf.txt" | "$py" -c 'import json,sys; print(json.loads(sys.stdin.read())["seqs_per_s"])')
    record bench_bertperf passed "$ours_sps sequences/s"
  else
    record bench_bertperf FAILED "see bench_bertperf.txt"
  fi
  if step bench_pytorch 180 env PYTHONUNBUFFERED=1 "$py" "$root/scripts/bench_pytorch_gpu.py" --batch "$rows" \
      --warmup 3 --steps 10 --repeats 3; then
    torch_sps=$(grep '"summary"' "$out/bench_pytorch.txt" | "$py" -c 'import json,sys; print(json.loads(sys.stdin.read())["seqs_per_s"])')
    record bench_pytorch passed "$torch_sps sequences/s"
  else
    record bench_pytorch FAILED "see bench_pytorch.txt"
  fi
else
  record benchmark skipped "no GPU here"
fi

# ---- compute-sanitizer on one step (last: the slowest, and the budget may cut it) ----
if command -v compute-sanitizer >/dev/null && [ $gpu -eq 1 ] && [ -x "$bin/test_gpu_step" ]; then
  for tool in memcheck racecheck; do
    gtest "sanitizer_$tool" 90 compute-sanitizer --tool "$tool" --error-exitcode 1 \
      "$bin/test_gpu_step" --gtest_filter=GpuStep.ForwardBackwardMatchesTheCpuBackend
  done
else
  record sanitizer skipped "no compute-sanitizer or no GPU here"
fi

# ---- the table ----
table=$out/device_check.md
{
  echo "# device_check $(date -u +%Y-%m-%d) on $(head -1 "$out/gpu.txt" 2>/dev/null || echo 'no GPU') ($(( $(date +%s) - start )) s)"
  echo
  echo "| check | result | detail |"
  echo "| --- | --- | --- |"
  for r in "${results[@]}"; do IFS='|' read -r a b c <<< "$r"; echo "| $a | $b | $c |"; done
  if [ -n "$ours_sps" ] && [ -n "$torch_sps" ]; then
    echo
    "$py" - "$ours_sps" "$torch_sps" "$rows" <<'EOF'
import sys
ours, torch, rows = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
flop = 0.487e12  # useful FLOPs per MLPerf phase-2 sample (about 254 real tokens)
peak = 989e12    # H100/H200 SXM dense bf16
print("| BERT-large phase-2, %d packed rows of 512 | sequences/s | useful TFLOP/s | MFU (bf16 peak 989) |" % rows)
print("| --- | --- | --- | --- |")
for name, sps in (("bertperf bench-step (cuda)", ours), ("PyTorch (bf16, SDPA, compile, fused Adam)", torch)):
    print("| %s | %.1f | %.0f | %.1f%% |" % (name, sps, sps * flop / 1e12, 100 * sps * flop / peak))
print()
print("bertperf / PyTorch: %.2fx" % (ours / torch))
EOF
  fi
} > "$table"
cat "$table" | tee -a "$log"
failed=$(printf '%s\n' "${results[@]}" | grep -c '|FAILED|')
exit $(( failed > 0 ))
