#!/usr/bin/env bash
# The GPU check, on a bare machine with an NVIDIA GPU, CUDA, cuDNN, PyTorch and transformers but none of our Debian
# packages and no network: unpacks what scripts/device_bundle.sh prepared (.device-bundle/bundle.tar.gz, carried
# along), builds bertperf with the CUDA backend and runs, most telling first, each step with its own time limit and
# all of them within --budget (450 s by default, about 7.5 minutes on one H200):
#
#    1  build                  configure and build the CUDA backend, the GPU tests and the CLI
#    2  conformance_<family>   every op against the CPU in fp64, one run per op family (attention first: BERT-base
#                              and BERT-large shapes); conformance_other runs any CUDA case no family names
#    3  step                   one forward and backward of a small BERT against the CPU (loss, every gradient)
#    4  bench_bertperf, bench_pytorch   BERT-large at MLPerf phase-2 shapes, side by side with PyTorch (fewer steps
#                              where cuDNN is older than 9.25 and the attention runs on this backend's kernel)
#    5  determinism            two runs from one seed bit-identical; captured steps equal to eager ones
#    6  conformance_kernel     the attention on this backend's kernel (the backend option "attention": "kernel")
#    7  eval_async             a session's eval over distinct batches (two staging buffers taking turns, uploads
#                              reading pinned memory when they run) against the same eval with blocking uploads
#    8  sanitizer_memcheck, sanitizer_racecheck   compute-sanitizer on a few training steps with no CPU comparison;
#                              "ERROR SUMMARY" tells a sanitizer finding from a failing test
#    9  conformance_cudnn_forced   only where the runtime cuDNN is older than 9.25 (AUTO then keeps the attention off
#                              cuDNN): the attention forced onto cuDNN, to see what the old version does with
#                              zero-length sequences
#
# Its table (device_check.md) starts with the library versions (driver, CUDA runtime, cuBLASLt, cuDNN as the built
# tests load them; NCCL as installed), then one row per step, then which attention each benchmark ran.
#
#   scripts/device_check.sh [--dry-run] [--out DIR] [--batch ROWS] [--arch 90] [--budget 450]
#
#   --dry-run  build and run here as far as this machine allows (no GPU: the GPU tests report skipped), to catch
#              mistakes before a GPU minute is spent
#   --out      where the table and logs go (default: $OUT if set, else build-device/check)
#   --batch    packed rows of 512 tokens per step in the benchmark (default 32, about 64 sequences)
#   --arch     CUDA architectures to build (default 90: H100/H200; 80 for A100)
#   --budget   seconds for the whole check (default 450); a step that would start later is reported, not run
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

dry=0; out=${OUT:-$root/build-device/check}; rows=32; arch=90
budget=450   # seconds for everything; each step's time limit is cut to what is left
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) dry=1 ;;
    --out) out=$2; shift ;;
    --batch) rows=$2; shift ;;
    --arch) arch=$2; shift ;;
    --budget) budget=$2; shift ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "device_check: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ $dry -eq 1 ] && budget=$(( budget * 20 ))
mkdir -p "$out"
log=$out/device_check.log
: > "$log"
start=$(date +%s)
results=()   # "name|status|detail", in the order run
versions=()  # "library|version|where"

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
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "[timed out after $limit s]" >> "$out/$name.txt"
  return $rc
}
# gtest NAME SECONDS COMMAND...: a GoogleTest run, recorded as passed, skipped (every test skipped) or failed.
gtest() {
  local name=$1
  step "$@"
  local rc=$? f=$out/$1.txt
  local passed skipped failed
  passed=$(grep -c '^\[       OK \]' "$f"); skipped=$(grep -c '^\[  SKIPPED \]' "$f"); failed=$(grep -c '^\[  FAILED  \]' "$f")
  if grep -q '^out of time' "$f"; then record "$name" "not run" "out of time"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then record "$name" FAILED "timed out; $passed passed before"
  elif [ $rc -ne 0 ]; then record "$name" FAILED "exit $rc, $failed failed: $(grep '^\[  FAILED  \]' "$f" | head -3 | tr '\n' ' ')"
  elif [ "$passed" -eq 0 ] && [ "$skipped" -gt 0 ]; then record "$name" skipped "$(grep -m1 -A1 'Skipped' "$f" | tail -1 | cut -c1-100)"
  else record "$name" passed "$passed passed, $skipped skipped"; fi
}
# sanitize TOOL SECONDS TEST...: compute-sanitizer on a test without CPU tolerance assertions. Its "ERROR SUMMARY"
# line is what decides: errors there are the sanitizer's findings; a failure with "0 errors" is the test's own.
sanitize() {
  local tool=$1 limit=$2; shift 2
  local name=sanitizer_$tool
  step "$name" "$limit" compute-sanitizer --tool "$tool" --error-exitcode 1 "$@"
  local rc=$? f=$out/$name.txt summary errors
  # memcheck ends with "ERROR SUMMARY: N errors"; racecheck also with "RACECHECK SUMMARY: H hazards (N errors, ...)".
  summary=$(grep -m1 'ERROR SUMMARY' "$f" || grep -m1 'RACECHECK SUMMARY' "$f")
  errors=$(echo "$summary" | grep -oE '[0-9]+ error' | grep -oE '[0-9]+')
  if grep -q '^out of time' "$f"; then record "$name" "not run" "out of time"
  elif [ -z "$summary" ]; then record "$name" FAILED "no ERROR SUMMARY: the run did not finish (exit $rc; timed out or crashed)"
  elif [ "${errors:-0}" -gt 0 ]; then
    record "$name" FAILED "sanitizer: $errors errors; first: $(grep -m1 -E '^========= (Invalid|Race|Error|Uninitialized|Barrier|Program hit)' "$f" | cut -c1-140)"
  elif [ $rc -ne 0 ]; then record "$name" FAILED "0 sanitizer errors, but the test failed (exit $rc): see $name.txt"
  elif grep -q '^\[  SKIPPED \]' "$f" && ! grep -q '^\[       OK \]' "$f"; then record "$name" skipped "the test skipped"
  else record "$name" passed "$summary"; fi
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
say "bundle: $(tr '\n' ' ' < "$deps/MANIFEST" 2>/dev/null || echo 'no MANIFEST (an older bundle)')"
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

# ---- 1. build ----
cuda=ON
if ! command -v nvcc >/dev/null || [ -z "$cudnn_inc" ] || [ -z "$cudnn_lib" ]; then
  [ $dry -eq 1 ] || { echo "device_check: nvcc or cuDNN not found" >&2; exit 2; }
  cuda=OFF
fi
generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
# A dry run finds nothing in /usr, as on the bare machine (the compiler's own include path aside).
ignore_system=(); [ $dry -eq 1 ] && ignore_system=("-DCMAKE_SYSTEM_IGNORE_PREFIX_PATH=/usr;/")
build=$root/build-device/build
if ! step configure 60 cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
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
if [ -f "$build/CMakeCache.txt" ] && step build 240 cmake --build "$build" -j "$jobs" --target \
    bertperf_cli test_backend_ops test_gpu_step; then
  record build passed "CUDA $cuda, sm_$arch"
else
  record build FAILED "see build.txt: $(grep -m1 -E 'error:|Error [0-9]|CMake Error' "$out/build.txt" | cut -c1-160)"
fi
bin=$build/bin

# ---- the library versions, as the built tests load them (NCCL: as installed; the build has no NCCL) ----
probe=$bin/test_gpu_step; [ -x "$probe" ] || probe=""
while IFS='|' read -r a b c; do [ -n "$a" ] && versions+=("$a|$b|$c"); done < <("$py" - "$probe" <<'EOF' 2>>"$log"
import ctypes, glob, os, re, subprocess, sys

def resolved(binary):
    """soname prefix -> path, as the dynamic loader resolves the binary's libraries."""
    if not binary:
        return {}
    try:
        text = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=20).stdout
    except Exception:
        return {}
    return {m.group(1): m.group(2) for m in re.finditer(r"^\s*(lib[\w+-]+)\.so\S*\s+=>\s+(\S+)", text, re.M)}

libs = resolved(sys.argv[1] if len(sys.argv) > 1 else "")
site = [p for p in sys.path if p.endswith("site-packages")]

def load(key, names):
    candidates = [libs.get(key)] + names
    for s in site:
        candidates += sorted(glob.glob(os.path.join(s, "nvidia", "*", "lib", key + ".so*")))
    for c in candidates:
        if not c:
            continue
        try:
            return ctypes.CDLL(c), c
        except OSError:
            pass
    return None, "not found"

def triple(v):
    return "%d.%d.%d" % (v // 10000, v // 100 % 100, v % 100)

def row(name, version, where):
    print("%s|%s|%s" % (name, version, where))

h, where = load("libcuda", ["libcuda.so.1"])
if h:
    v = ctypes.c_int()
    h.cuDriverGetVersion(ctypes.byref(v))
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.split("\n")[0].strip()
    except Exception:
        smi = "?"
    row("driver", "%s (CUDA %d.%d)" % (smi, v.value // 1000, v.value % 1000 // 10), where)
else:
    row("driver", "none", where)
h, where = load("libcudart", ["libcudart.so.13", "libcudart.so.12", "/usr/local/cuda/lib64/libcudart.so"])
if h:
    v = ctypes.c_int()
    h.cudaRuntimeGetVersion(ctypes.byref(v))
    row("CUDA runtime", "%d.%d" % (v.value // 1000, v.value % 1000 // 10), where)
else:
    row("CUDA runtime", "none", where)
for name, key, names, fn in (("cuBLASLt", "libcublasLt", ["libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so"],
                              "cublasLtGetVersion"),
                             ("cuDNN", "libcudnn", ["libcudnn.so.9", "/usr/local/cuda/lib64/libcudnn.so"],
                              "cudnnGetVersion")):
    h, where = load(key, names)
    if h:
        f = getattr(h, fn)
        f.restype = ctypes.c_size_t
        row(name, triple(f()), where)
    else:
        row(name, "none", where)
h, where = load("libnccl", ["libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"])
if h:
    v = ctypes.c_int()
    h.ncclGetVersion(ctypes.byref(v))
    row("NCCL", triple(v.value), where)
else:
    row("NCCL", "none", where)
EOF
)
for v in "${versions[@]}"; do say "version: $v"; done
cudnn_runtime=$(printf '%s\n' "${versions[@]}" | awk -F'|' '$1 == "cuDNN" {print $2}')

# ---- 2. conformance, one op family at a time (a CUDA error in one family cannot spoil the next) ----
families=(
  "attention|*AttentionForwardAndBackward/cuda"
  "linear|*LinearForward/cuda:*LinearBackward/cuda:*ActivationBackward/cuda"
  "layernorm|*ResidualLayerNormForwardAndBackward/cuda"
  "embedding|*EmbeddingForwardAndBackward/cuda:*GatherForwardAndBackward/cuda"
  "loss|*CrossEntropyForwardAndBackward/cuda"
  "optimizer|*GradientClipAndAccumulate/cuda:*LambMomentsAndApply/cuda"
  "memory|*Memory/cuda:*ConvertsF64ToBf16InOneRounding/cuda"
  "masks|*DropoutMasksHaveTheirRateAndScale/cuda"
)
named=""
if [ -x "$bin/test_backend_ops" ]; then
  for f in "${families[@]}"; do
    IFS='|' read -r family filter <<< "$f"
    named=${named:+$named:}$filter
    gtest "conformance_$family" "$([ "$family" = attention ] && echo 90 || echo 45)" \
      "$bin/test_backend_ops" --gtest_filter="$filter"
  done
  others=$("$bin/test_backend_ops" --gtest_list_tests --gtest_filter="*/cuda-$named" 2>/dev/null | grep -c '^  ')
  if [ "${others:-0}" -gt 0 ]; then
    gtest conformance_other 60 "$bin/test_backend_ops" --gtest_filter="*/cuda-$named"
  fi
fi

# ---- 3. one step against the CPU ----
if [ -x "$bin/test_gpu_step" ]; then
  gtest step 60 "$bin/test_gpu_step" --gtest_filter='*GpuStep.ForwardBackwardMatchesTheCpuBackend/cuda'
fi

# ---- 4. benchmark: BERT-large, MLPerf phase-2 shapes, side by side ----
ours_sps=""; torch_sps=""
# Below cuDNN 9.25 the attention runs on this backend's kernel (seconds per BERT-large step): time fewer steps.
old_cudnn=0
if [ -n "$cudnn_runtime" ] && [ "$cudnn_runtime" != none ]; then
  IFS=. read -r major minor _ <<< "$cudnn_runtime"
  [ $(( major * 100 + minor )) -lt 925 ] && old_cudnn=1
fi
bench_steps=(--warmup 3 --steps 10 --repeats 3); bench_note=""
[ $old_cudnn -eq 1 ] && { bench_steps=(--warmup 1 --steps 2 --repeats 1); bench_note=", attention on the kernel (cuDNN $cudnn_runtime < 9.25)"; }
if [ $gpu -eq 1 ] && [ -x "$bin/bertperf" ]; then
  if step bench_bertperf 90 "$bin/bertperf" bench-step --model large --packed --batch "$rows" --backend cuda \
      "${bench_steps[@]}"; then
    ours_sps=$(grep '"summary"' "$out/bench_bertperf.txt" | "$py" -c 'import json,sys; print(json.loads(sys.stdin.read())["seqs_per_s"])')
    record bench_bertperf passed "$ours_sps sequences/s$bench_note"
  else
    record bench_bertperf FAILED "see bench_bertperf.txt: $(grep -m1 -iE 'error|what\(\)' "$out/bench_bertperf.txt" | cut -c1-140)"
  fi
  if step bench_pytorch 150 env PYTHONUNBUFFERED=1 "$py" "$root/scripts/bench_pytorch_gpu.py" --batch "$rows" \
      --warmup 3 --steps 10 --repeats 3; then
    torch_sps=$(grep '"summary"' "$out/bench_pytorch.txt" | "$py" -c 'import json,sys; print(json.loads(sys.stdin.read())["seqs_per_s"])')
    record bench_pytorch passed "$torch_sps sequences/s"
  else
    record bench_pytorch FAILED "see bench_pytorch.txt"
  fi
else
  record benchmark skipped "no GPU here"
fi

# ---- 5. determinism and the captured step ----
if [ -x "$bin/test_gpu_step" ]; then
  gtest determinism 60 "$bin/test_gpu_step" \
    --gtest_filter='*GpuStep.TwoRunsFromOneSeedAreBitIdentical/cuda:*GpuStep.CapturedStepsEqualEagerSteps/cuda'
fi

# ---- 6. the attention on this backend's own kernel ----
if [ -x "$bin/test_backend_ops" ]; then
  gtest conformance_kernel 60 "$bin/test_backend_ops" \
    --gtest_filter='*AttentionForwardAndBackward/cuda_attention_kernel:*DropoutMasks*/cuda_attention_kernel'
fi

# ---- 7. eval over distinct batches against the same eval with blocking uploads ----
if [ -x "$bin/test_gpu_step" ]; then
  gtest eval_async 45 "$bin/test_gpu_step" --gtest_filter='*GpuStep.EvalOverDistinctBatchesEqualsTheEvalWithBlockingUploads/cuda'
fi

# ---- 8. compute-sanitizer, on steps without CPU tolerance assertions (last of the required: the slowest) ----
if command -v compute-sanitizer >/dev/null && [ $gpu -eq 1 ] && [ -x "$bin/test_gpu_step" ]; then
  for tool in memcheck racecheck; do
    sanitize "$tool" 75 "$bin/test_gpu_step" --gtest_filter='*GpuStep.StepsRunForTheSanitizers/cuda'
  done
else
  record sanitizer skipped "no compute-sanitizer or no GPU here"
fi

# ---- 9. informational: the attention forced onto an old cuDNN ----
if [ $gpu -eq 1 ] && [ -x "$bin/test_backend_ops" ] && [ $old_cudnn -eq 1 ]; then
  gtest conformance_cudnn_forced 60 "$bin/test_backend_ops" \
    --gtest_filter='*AttentionForwardAndBackward/cuda_attention_cudnn'
  # What it shows is information about the installed cuDNN, not a failure of this backend (AUTO never runs it).
  last=$(( ${#results[@]} - 1 ))
  results[$last]=${results[$last]/|FAILED|/|failed (information only)|}
fi

# ---- the table ----
# Which attention each run took, from the backend's once-per-shape lines.
attention_lines=$(cat "$out"/conformance_attention.txt "$out"/bench_bertperf.txt "$out"/step.txt 2>/dev/null |
                  grep '^cuda backend: attention' | sort -u)
table=$out/device_check.md
{
  echo "# device_check $(date -u +%Y-%m-%d) on $(head -1 "$out/gpu.txt" 2>/dev/null || echo 'no GPU') ($(( $(date +%s) - start )) s)"
  echo
  echo "| check | result | detail |"
  echo "| --- | --- | --- |"
  for v in "${versions[@]}"; do IFS='|' read -r a b c <<< "$v"; echo "| $a | $b | $c |"; done
  for r in "${results[@]}"; do IFS='|' read -r a b c <<< "$r"; echo "| $a | $b | $c |"; done
  if [ -n "$attention_lines" ]; then
    echo
    echo "Attention, once per shape (conformance_attention, step, bench_bertperf):"
    echo
    echo "$attention_lines" | sed 's/^cuda backend: /- /' | cut -c1-400
  fi
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
