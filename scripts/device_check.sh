#!/usr/bin/env bash
# The GPU check, on a bare machine with an NVIDIA GPU, CUDA, cuDNN, PyTorch and transformers but none of our Debian
# packages and no network: unpacks what scripts/device_bundle.sh prepared (.device-bundle/bundle.tar.gz, carried
# along), builds bertperf with the CUDA backend for the one architecture present, and runs a plan of steps, what a
# first GPU window must learn first, each with its own time limit, within --budget seconds (540 by default: one
# device command may run 600 s; the rest of a 15-minute window is left for a second command with --resume):
#
#    configure, build              the CUDA backend, the GPU tests and the CLI, for the GPU's own architecture
#    conformance_<family>          every op against the CPU in fp64, one process per op family; attention first
#                                  (BERT-base and BERT-large shapes, and the backward with dropout on the masks the
#                                  forward drew); conformance_other runs any CUDA case no family names
#    step                          one forward and backward of a small BERT against the CPU (loss, every gradient)
#    eval_async                    a session's eval over distinct batches against the same eval with blocking uploads
#    determinism                   two runs from one seed bit-identical, captured steps equal to eager ones (where
#                                  the backend declares an op non-deterministic, with its "deterministic" option),
#                                  and steps launched without a host wait equal to steps read one by one
#    conformance_kernel            the attention on this backend's kernel (the backend option "attention": "kernel")
#    conformance_fp8               the FP8 linear ops and scale update ("precision": "fp8", ops.h's FP8 column)
#                                  against fp64 by the FP8 rule and against the CPU twin (cpu-bf16 in FP8)
#    sanitizer_memcheck, sanitizer_racecheck   compute-sanitizer on a few training steps with no CPU comparison; a
#                                  hazard whose first frame is in a library's kernel (CUB, cuBLASLt, cuDNN) is
#                                  reported as the library's, not as a failure of this backend
#    bench_probe, bench_bertperf   BERT-large at MLPerf phase-2 shapes: the probe times one step and says which
#                                  attention ran (bench-step's paths line); the full timing runs only where the
#                                  attention is cuDNN's (on the kernel, one BERT-large step takes seconds)
#    bench_fp8                     the same benchmark in FP8 (the encoder's linears): only with time left
#    conformance_cudnn_forced      only where the runtime cuDNN is older than 9.25: the attention forced onto cuDNN
#                                  (information about that cuDNN, never a failure)
#    bench_pytorch                 the PyTorch peer (torch.compile of BERT-large, its cache kept beside the build for
#                                  a second command): last, only with time left
#
# A step starts only if at least 15 s of the budget are left, its limit cut to what is left; a step stopped by a cut
# limit is "not run (budget)", never FAILED, and `--resume` runs it. The state (one line per step) is kept in
# DIR/device_check.state, so a second command with --resume runs only the steps not yet run, on the same build.
# The table (device_check.md) starts with the library versions, then one row per step. Exit 0 when nothing failed.
#
#   scripts/device_check.sh [--plan-only] [--dry-run] [--resume] [--out DIR] [--batch ROWS] [--arch SM] [--budget S]
#
#   --plan-only  print the plan (each step, its limit, the running sum against the budget) and stop
#   --dry-run    print the plan, then build and run here as far as this machine allows (no GPU: the GPU tests
#                report skipped), to catch mistakes before a GPU minute is spent
#   --resume     continue the check in DIR: run only the steps not yet run (a budget cut included), reuse the build
#   --out        where the state, the table and the logs go (default build-device/check, which a second command on
#                the same machine finds again); where $OUT is set, the table, the log and the steps' logs (one
#                archive) are copied there at the end
#   --batch      packed rows of 512 tokens per step in the benchmark (default 32, about 64 sequences)
#   --arch       CUDA architecture to build (default: the GPU's own, from nvidia-smi; 90 without one)
#   --budget     seconds for the whole check (default 540)
#
# On a device machine: `scripts/device_check.sh` in a command of 600 s; if the table shows "not run (budget)" rows,
# `scripts/device_check.sh --resume` in a second command on the same (warm) machine.
# Tests: DEVICE_CHECK_STANDIN=PROGRAM runs `PROGRAM STEP` in place of each step's command, with no bundle, build or GPU
# (tests/python/test_device_check.py).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

plan_only=0; dry=0; resume=0; out=$root/build-device/check; rows=32; arch=""; budget=540
while [ $# -gt 0 ]; do
  case $1 in
    --plan-only) plan_only=1 ;;
    --dry-run) dry=1 ;;
    --resume) resume=1 ;;
    --out|--batch|--arch|--budget)
      [ $# -ge 2 ] || { echo "device_check: option $1 needs a value (see --help)" >&2; exit 2; }
      case $1 in --out) out=$2 ;; --batch) rows=$2 ;; --arch) arch=$2 ;; --budget) budget=$2 ;; esac
      shift ;;
    -h|--help) sed -n '2,49p' "$0"; exit 0 ;;
    *) echo "device_check: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
for v in "rows=$rows" "budget=$budget" ${arch:+"arch=$arch"}; do
  [[ ${v#*=} =~ ^[1-9][0-9]*$ ]] || { echo "device_check: ${v%%=*} must be a positive whole number, not '${v#*=}'" >&2; exit 2; }
done
standin=${DEVICE_CHECK_STANDIN:-}

# ---- the plan: name|limit in seconds|kind (build, gtest, sanitize, bench, spare, peer, info), in the order run ----
# The attention family names the new dropout-backward case; the filters live with the commands (step_command).
plan=(
  "configure|15|build"
  "build|150|build"
  "conformance_attention|45|gtest"
  "conformance_linear|10|gtest"
  "conformance_layernorm|10|gtest"
  "conformance_embedding|10|gtest"
  "conformance_loss|10|gtest"
  "conformance_optimizer|10|gtest"
  "conformance_memory|10|gtest"
  "conformance_masks|10|gtest"
  "conformance_other|10|gtest"
  "step|25|gtest"
  "eval_async|15|gtest"
  "determinism|30|gtest"
  "conformance_kernel|15|gtest"
  "conformance_fp8|10|gtest"
  "sanitizer_memcheck|40|sanitize"
  "sanitizer_racecheck|50|sanitize"
  "bench_probe|25|bench"
  "bench_bertperf|40|bench"
  "bench_fp8|40|spare"
  "conformance_cudnn_forced|30|info"
  "bench_pytorch|150|peer"
)
min_start=15  # seconds of budget a step needs left to start at all

print_plan() {
  local sum=0 n=0 entry name limit kind note
  echo "device_check plan: budget $budget s (one device command may run 600 s)"
  printf '  %2s  %-26s %7s %9s  %s\n' "#" step limit "sum" ""
  for entry in "${plan[@]}"; do
    IFS='|' read -r name limit kind <<< "$entry"
    n=$(( n + 1 ))
    note=""
    case $kind in
      spare) note="only with time left" ;;
      peer) note="only with time left (cold torch.compile), last" ;;
      info) note="only where the runtime cuDNN is older than 9.25; information only" ;;
    esac
    if [ "$kind" = spare ] || [ "$kind" = peer ] || [ "$kind" = info ]; then
      printf '  %2d  %-26s %5d s %9s  %s\n' "$n" "$name" "$limit" "-" "$note"
      continue
    fi
    sum=$(( sum + limit ))
    [ "$name" = conformance_other ] && note="only where a CUDA case is in no family"
    [ "$name" = bench_bertperf ] && note="only where the probe's attention is cuDNN's"
    printf '  %2d  %-26s %5d s %7d s  %s\n' "$n" "$name" "$limit" "$sum" "$note"
  done
  if [ $sum -le "$budget" ]; then
    echo "required steps: $sum s of limits, within the budget of $budget s ($(( budget - sum )) s to spare)"
  else
    echo "required steps: $sum s of limits, $(( sum - budget )) s over the budget of $budget s: what the budget" \
         "cuts is \"not run (budget)\"; --resume runs it"
  fi
}
print_plan
[ $plan_only -eq 1 ] && exit 0

[ $dry -eq 1 ] && budget=$(( budget * 20 ))  # a dry run builds on whatever this machine is
mkdir -p "$out"
log=$out/device_check.log
state=$out/device_check.state
if [ $resume -eq 1 ]; then
  [ -f "$state" ] || { echo "device_check: --resume, but $state is missing (no earlier check in $out)" >&2; exit 2; }
  echo "---- resumed $(date -u +%H:%M:%S) ----" >> "$log"
else
  : > "$log"; : > "$state"
fi
start=$(date +%s)

say() { echo "[device_check $(( $(date +%s) - start ))s] $*" | tee -a "$log"; }
elapsed() { echo $(( $(date +%s) - start )); }
left() { local l=$(( budget - $(elapsed) )); echo $(( l > 0 ? l : 0 )); }  # never negative
# record NAME STATUS DETAIL: one row of the table, kept in the state file (the last line of a name counts).
record() { echo "$1|$2|$3" >> "$state"; say "$1: $2 ${3:+($3)}"; }
status_of() { awk -F'|' -v n="$1" '$1 == n {s = $2} END {print s}' "$state"; }
# Whether a step has a result already (a step cut by the budget, or never reached, has none that counts).
done_before() { local s; s=$(status_of "$1"); [ -n "$s" ] && [ "$s" != "not run (budget)" ]; }

# run_step NAME LIMIT COMMAND...: runs the command with its limit cut to what is left of the budget, its output in
# $out/NAME.txt and the log. Returns 0 when it ran and exited 0, 1 when it failed, 3 when the budget stopped it (or
# left too little to start it: then it is recorded "not run (budget)" here).
run_step() {
  local name=$1 limit=$2; shift 2
  local l; l=$(left)
  if [ "$l" -lt $min_start ]; then
    echo "not run: $l s of the budget of $budget s left" > "$out/$name.txt"
    record "$name" "not run (budget)" "$l s of the budget left; --resume runs it"
    return 3
  fi
  [ $dry -eq 1 ] && limit=$(( limit * 20 ))
  local cut=$limit
  [ "$limit" -gt "$l" ] && cut=$l
  say "$name (up to $cut s$([ "$cut" -lt "$limit" ] && echo ", cut from $limit s by the budget")): $*"
  local t0; t0=$(date +%s)
  timeout --kill-after=5 "$cut" "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  step_seconds=$(( $(date +%s) - t0 ))
  cat "$out/$name.txt" >> "$log"
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    if [ "$cut" -lt "$limit" ]; then
      echo "[stopped by the budget after $cut s of its $limit s]" >> "$out/$name.txt"
      record "$name" "not run (budget)" "stopped after $cut s of its $limit s by the budget; --resume runs it"
      return 3
    fi
    echo "[timed out after $limit s]" >> "$out/$name.txt"
    step_timed_out=1
  else
    step_timed_out=0
  fi
  step_rc=$rc
  [ $rc -eq 0 ]
}

# gtest NAME LIMIT COMMAND...: a GoogleTest run, recorded as passed, skipped (every test skipped) or FAILED.
gtest() {
  local name=$1 limit=$2; shift 2
  run_step "$name" "$limit" "$@"
  [ $? -eq 3 ] && return 0
  local f=$out/$name.txt passed skipped failed
  passed=$(grep -c '^\[       OK \]' "$f"); skipped=$(grep -c '^\[  SKIPPED \]' "$f"); failed=$(grep -c '^\[  FAILED  \]' "$f")
  if [ $step_timed_out -eq 1 ]; then record "$name" FAILED "timed out after $limit s; $passed passed before"
  elif [ $step_rc -ne 0 ]; then
    record "$name" FAILED "exit $step_rc, $failed failed: $(grep '^\[  FAILED  \]' "$f" | head -3 | tr '\n' ' ' | cut -c1-200)"
  elif [ "$passed" -eq 0 ] && [ "$skipped" -gt 0 ]; then
    record "$name" skipped "$(grep -m1 -A1 'Skipped' "$f" | tail -1 | cut -c1-100)"
  elif [ "$passed" -eq 0 ]; then record "$name" FAILED "no test ran (exit 0): see $name.txt"
  else record "$name" passed "$passed passed, $skipped skipped, $step_seconds s"; fi
}

# sanitize NAME LIMIT COMMAND...: compute-sanitizer on a test without CPU tolerance assertions. Its summary line
# decides: errors there are the sanitizer's findings; a failure with 0 errors is the test's own. Each finding is
# placed by its first frame: in a library's kernel (CUB's radix sort, cuBLASLt, cuDNN, which racecheck is known to
# flag falsely) it is the library's, reported but not a failure; anywhere else it is ours.
sanitize() {
  local name=$1 limit=$2; shift 2
  run_step "$name" "$limit" "$@"
  [ $? -eq 3 ] && return 0
  local f=$out/$name.txt summary ours library
  summary=$(grep -m1 'ERROR SUMMARY' "$f" || grep -m1 'RACECHECK SUMMARY' "$f")
  read -r ours library < <(sanitizer_findings "$f" counts)
  if [ -z "$summary" ]; then
    record "$name" FAILED "no ERROR SUMMARY: the run did not finish (exit $step_rc$([ $step_timed_out -eq 1 ] && echo ", timed out after $limit s"))"
  elif [ "${ours:-0}" -gt 0 ]; then
    record "$name" FAILED "$ours findings in this backend's kernels; first: $(sanitizer_findings "$f" first-ours)"
  elif [ "$step_rc" -ne 0 ] && [ "${library:-0}" -eq 0 ]; then
    record "$name" FAILED "0 sanitizer findings, but the test failed (exit $step_rc): see $name.txt"
  elif [ "${library:-0}" -gt 0 ]; then
    record "$name" "passed (library findings)" "$library findings, all in library kernels; first: $(sanitizer_findings "$f" first-library)"
  elif grep -q '^\[  SKIPPED \]' "$f" && ! grep -q '^\[       OK \]' "$f"; then record "$name" skipped "the test skipped"
  else record "$name" passed "$summary"; fi
}

# sanitizer_findings FILE counts|first-ours|first-library: compute-sanitizer's findings, each a "=========" line
# that is not indented ("Invalid __global__ read", "Error: Race reported between ..."), placed by the first frame
# ("at SYMBOL") in it or in its indented lines.
sanitizer_findings() {
  python3 - "$1" "$2" <<'PY'
import re, sys
library = re.compile(r"^(void )?(cub::|CUB_|cutlass::|cute::|thrust::|cudnn|cublas|nvjet|xmma|cask|sm\d+_xmma|"
                     r"sm\d+_|flash_|fmha|cudnn_generated|gemmSN|gemv|cuda::)|cudnn|cublas")
findings = []  # (library?, first frame)
current = None
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"^========= (\S.*)", line)
    if m and not re.match(r"(ERROR SUMMARY|RACECHECK SUMMARY|COMPUTE-SANITIZER|Target application|LEAK SUMMARY|"
                          r"Program hit cudaErrorInvalidDevice|No CUDA-capable)", m.group(1)):
        current = {"head": m.group(1).strip(), "frame": None}
        findings.append(current)
    elif current is None or not line.startswith("=========  "):
        if not line.startswith("========="):
            current = None
        continue
    frame = re.search(r"\bat (?:0x[0-9a-f]+ in )?(.+?)(?:\+0x[0-9a-f]+)?(?: in \S+)?$", line.strip())
    if current is not None and current["frame"] is None and frame:
        current["frame"] = frame.group(1).strip()
lib = [f for f in findings if f["frame"] and library.search(f["frame"])]
ours = [f for f in findings if f not in lib]
what = sys.argv[2]
if what == "counts":
    print(len(ours), len(lib))
else:
    chosen = ours if what == "first-ours" else lib
    f = chosen[0] if chosen else {"head": "none", "frame": None}
    print((f["head"] + (" at " + f["frame"] if f["frame"] else ""))[:200])
PY
}

# Where a step's command is stood in for (the check's own test), every step runs `$standin NAME`.
run_gtest() { local name=$1 limit=$2; shift 2; if [ -n "$standin" ]; then gtest "$name" "$limit" "$standin" "$name"; else gtest "$name" "$limit" "$@"; fi; }
run_sanitize() { local name=$1 limit=$2; shift 2; if [ -n "$standin" ]; then sanitize "$name" "$limit" "$standin" "$name"; else sanitize "$name" "$limit" "$@"; fi; }
run_plain() { local name=$1 limit=$2; shift 2; if [ -n "$standin" ]; then run_step "$name" "$limit" "$standin" "$name"; else run_step "$name" "$limit" "$@"; fi; }
limit_of() { local e; for e in "${plan[@]}"; do [ "${e%%|*}" = "$1" ] && { IFS='|' read -r _ l _ <<< "$e"; echo "$l"; return; }; done; }
# wanted NAME: whether to run a step now (not already done in the check being resumed).
wanted() { if done_before "$1"; then say "$1: $(status_of "$1") before, not run again"; return 1; fi; return 0; }

# ---- what is here ----
export PATH=$PATH:/usr/local/cuda/bin
gpu=0; py=$(command -v python3)
if [ -n "$standin" ]; then
  gpu=1; echo "stand-in GPU" > "$out/gpu.txt"
elif command -v nvidia-smi >/dev/null && nvidia-smi -L > "$out/gpu.txt" 2>&1; then
  gpu=1
fi
if [ -z "$arch" ]; then
  arch=90
  if [ $gpu -eq 1 ] && [ -z "$standin" ]; then
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
    [[ $cc =~ ^[0-9]+$ ]] && arch=$cc
  fi
fi
say "GPU: $(head -1 "$out/gpu.txt" 2>/dev/null || echo none); arch sm_$arch; nvcc: $(command -v nvcc || echo none)"
if [ $gpu -eq 0 ] && [ $dry -eq 0 ]; then
  echo "device_check: no GPU here (nvidia-smi -L failed); --dry-run builds and runs the skip path" >&2
  exit 2
fi

build=$root/build-device/build
bin=$build/bin
cudnn_runtime=""
versions=()  # "library|version|where"
if [ -z "$standin" ]; then
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
cuda=ON
if ! command -v nvcc >/dev/null || [ -z "$cudnn_inc" ] || [ -z "$cudnn_lib" ]; then
  [ $dry -eq 1 ] || { echo "device_check: nvcc or cuDNN not found" >&2; exit 2; }
  cuda=OFF
fi
fi

# ---- 1. build, for the one architecture present ----
if wanted configure; then
  if [ -n "$standin" ]; then
    run_plain configure "$(limit_of configure)"
  else
    generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
    # A dry run finds nothing in /usr, as on the bare machine (the compiler's own include path aside).
    ignore_system=(); [ $dry -eq 1 ] && ignore_system=("-DCMAKE_SYSTEM_IGNORE_PREFIX_PATH=/usr;/")
    run_step configure "$(limit_of configure)" cmake -S "$root" -B "$build" "${generator[@]}" \
      -DCMAKE_BUILD_TYPE=Release -DBERTPERF_WITH_CUDA=$cuda -DBERTPERF_WITH_MPI=OFF -DBERTPERF_WITH_NCCL=OFF \
      -DBERTPERF_BUILD_BENCHMARKS=OFF -DCMAKE_CUDA_ARCHITECTURES="$arch" \
      -DBERTPERF_CUDNN_FRONTEND_DIR="$deps/cudnn-frontend/include" -DCUDNN_INCLUDE_DIR="$cudnn_inc" \
      -DBERTPERF_CUDNN_LIBRARY="$cudnn_lib" \
      -DCMAKE_PREFIX_PATH="$deps" -DBLA_VENDOR=OpenBLAS -DHDF5_ROOT="$deps" \
      -DHDF5_C_COMPILER_EXECUTABLE=HDF5_C_COMPILER_EXECUTABLE-NOTFOUND -DGTEST_ROOT="$deps" \
      -Dnlohmann_json_DIR="$deps/share/cmake/nlohmann_json" "${ignore_system[@]}"
  fi
  case $? in
    0) record configure passed "$step_seconds s" ;;
    3) ;;
    *) record configure FAILED "cmake configure: see configure.txt" ;;
  esac
fi
if wanted build; then
  if [ "$(status_of configure)" != passed ]; then
    record build "not run" "configure did not pass"
  else
    if [ -n "$standin" ]; then
      run_plain build "$(limit_of build)"
    else
      run_step build "$(limit_of build)" cmake --build "$build" -j "$(nproc)" --target bertperf_cli test_backend_ops \
        test_gpu_step
    fi
    case $? in
      0) record build passed "CUDA ${cuda:-ON}, sm_$arch, $step_seconds s" ;;
      3) ;;
      *) record build FAILED "see build.txt: $(grep -m1 -E 'error:|Error [0-9]|CMake Error' "$out/build.txt" | cut -c1-160)" ;;
    esac
  fi
fi
built=0
{ [ -n "$standin" ] || { [ -x "$bin/test_backend_ops" ] && [ -x "$bin/test_gpu_step" ]; }; } && \
  [ "$(status_of build)" = passed ] && built=1

# ---- the library versions, as the built tests load them (NCCL: as installed; the build has no NCCL) ----
probe=$bin/test_gpu_step; [ -x "$probe" ] || probe=""
[ -z "$standin" ] && while IFS='|' read -r a b c; do [ -n "$a" ] && versions+=("$a|$b|$c"); done < <("$py" - "$probe" <<'EOF' 2>>"$log"
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
for v in "${versions[@]}"; do say "version: $v"; done
cudnn_runtime=$(printf '%s\n' "${versions[@]}" | awk -F'|' '$1 == "cuDNN" {print $2}')
[ -n "$standin" ] && cudnn_runtime=${DEVICE_CHECK_STANDIN_CUDNN:-9.25.0}

# Steps past the build run only on a build that passed (now or in the check being resumed).
not_built() {
  wanted "$1" || return 0
  if [ "$(status_of build)" = "not run (budget)" ]; then record "$1" "not run (budget)" "the build was not run; --resume runs it"
  else record "$1" "not run" "the build did not pass"; fi
}

# ---- 2. conformance, one op family at a time (a CUDA error in one family cannot spoil the next) ----
families=(
  "attention|*AttentionForwardAndBackward/cuda:*AttentionBackwardWithDropout*/cuda"
  "linear|*LinearForward/cuda:*LinearBackward/cuda:*ActivationBackward/cuda"
  "layernorm|*ResidualLayerNormForwardAndBackward/cuda"
  "embedding|*EmbeddingForwardAndBackward/cuda:*GatherForwardAndBackward/cuda"
  "loss|*CrossEntropyForwardAndBackward/cuda"
  "optimizer|*GradientClipAndAccumulate/cuda:*LambMomentsAndApply/cuda"
  "memory|*Memory/cuda:*ConvertsF64ToBf16InOneRounding/cuda"
  "masks|*DropoutMasksHaveTheirRateAndScale/cuda"
)
named=""
for f in "${families[@]}"; do
  IFS='|' read -r family filter <<< "$f"
  named=${named:+$named:}$filter
  name=conformance_$family
  if [ $built -eq 0 ]; then not_built "$name"; continue; fi
  wanted "$name" && run_gtest "$name" "$(limit_of "$name")" "$bin/test_backend_ops" --gtest_filter="$filter"
done
if [ $built -eq 0 ]; then not_built conformance_other
elif wanted conformance_other; then
  others=1
  [ -z "$standin" ] && others=$("$bin/test_backend_ops" --gtest_list_tests --gtest_filter="*/cuda-$named" 2>/dev/null |
                               grep -c '^  ')
  if [ "${others:-0}" -gt 0 ]; then
    run_gtest conformance_other "$(limit_of conformance_other)" "$bin/test_backend_ops" --gtest_filter="*/cuda-$named"
  else
    record conformance_other skipped "every CUDA case is in a family"
  fi
fi

# ---- 3-6. one step against the CPU, the eval, determinism, the attention kernel ----
gpu_step=(
  "step|*GpuStep.ForwardBackwardMatchesTheCpuBackend/cuda"
  "eval_async|*GpuStep.EvalOverDistinctBatchesEqualsTheEvalWithBlockingUploads/cuda"
  "determinism|*GpuStep.TwoRunsFromOneSeedAreBitIdentical/cuda:*GpuStep.CapturedStepsEqualEagerSteps/cuda:*GpuStep.StepsWaitForNothingUntilTheirRecordsAreRead/cuda"
)
for s in "${gpu_step[@]}"; do
  IFS='|' read -r name filter <<< "$s"
  if [ $built -eq 0 ]; then not_built "$name"; continue; fi
  wanted "$name" && run_gtest "$name" "$(limit_of "$name")" "$bin/test_gpu_step" --gtest_filter="$filter"
done
if [ $built -eq 0 ]; then not_built conformance_kernel
elif wanted conformance_kernel; then
  run_gtest conformance_kernel "$(limit_of conformance_kernel)" "$bin/test_backend_ops" \
    --gtest_filter='*AttentionForwardAndBackward/cuda_attention_kernel:*AttentionBackwardWithDropout*/cuda_attention_kernel:*DropoutMasks*/cuda_attention_kernel'
fi
if [ $built -eq 0 ]; then not_built conformance_fp8
elif wanted conformance_fp8; then
  run_gtest conformance_fp8 "$(limit_of conformance_fp8)" "$bin/test_backend_ops" \
    --gtest_filter='*Fp8Linear/cuda_precision_fp8:*Fp8ScaleUpdate/cuda_precision_fp8'
fi

# ---- 7. compute-sanitizer, on steps without CPU tolerance assertions ----
for tool in memcheck racecheck; do
  name=sanitizer_$tool
  if [ $built -eq 0 ]; then not_built "$name"; continue; fi
  wanted "$name" || continue
  if [ -z "$standin" ] && ! command -v compute-sanitizer >/dev/null; then
    record "$name" skipped "no compute-sanitizer here"; continue
  fi
  run_sanitize "$name" "$(limit_of "$name")" compute-sanitizer --tool "$tool" --error-exitcode 1 \
    "$bin/test_gpu_step" --gtest_filter='*GpuStep.StepsRunForTheSanitizers/cuda'
done

# ---- 8. our benchmark: BERT-large, MLPerf phase-2 shapes ----
# The probe times one step after one warm-up and prints bench-step's paths line (which attention the step ran);
# the full timing runs only where that is cuDNN's: on this backend's kernel one BERT-large step takes seconds, and
# the probe's figure is the one recorded.
sps_of() { grep '"summary"' "$1" | tail -1 | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["seqs_per_s"])' 2>/dev/null; }
attention_of() { grep '"bertperf_paths"' "$1" | tail -1 | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["paths"].get("attention", "?"))' 2>/dev/null; }
bench=("$bin/bertperf" bench-step --model large --packed --batch "$rows" --backend cuda)
if [ $built -eq 0 ] || [ $gpu -eq 0 ] || [ $dry -eq 1 ]; then
  for name in bench_probe bench_bertperf; do
    if [ $built -eq 0 ]; then not_built "$name"; else wanted "$name" && record "$name" "not run" "no GPU here"; fi
  done
else
  if wanted bench_probe; then
    run_plain bench_probe "$(limit_of bench_probe)" "${bench[@]}" --warmup 1 --steps 1 --repeats 1
    case $? in
      0) record bench_probe passed "attention: $(attention_of "$out/bench_probe.txt"); $(sps_of "$out/bench_probe.txt") sequences/s over one step" ;;
      3) ;;
      *) record bench_probe FAILED "see bench_probe.txt: $(grep -m1 -iE 'error|what\(\)' "$out/bench_probe.txt" | cut -c1-140)" ;;
    esac
  fi
  if wanted bench_bertperf; then
    probe_attention=$(attention_of "$out/bench_probe.txt")
    if [ "$(status_of bench_probe)" = "not run (budget)" ]; then
      record bench_bertperf "not run (budget)" "the probe was not run; --resume runs both"
    elif [ "$(status_of bench_probe)" != passed ]; then
      record bench_bertperf "not run" "the probe did not pass"
    elif [ "$probe_attention" != cudnn ]; then
      record bench_bertperf "not run" "the attention ran on ${probe_attention:-an unknown path} (bench_probe's one step is the figure)"
    else
      run_plain bench_bertperf "$(limit_of bench_bertperf)" "${bench[@]}" --warmup 3 --steps 10 --repeats 3
      case $? in
        0) record bench_bertperf passed "$(sps_of "$out/bench_bertperf.txt") sequences/s, attention $(attention_of "$out/bench_bertperf.txt")" ;;
        3) ;;
        *) record bench_bertperf FAILED "see bench_bertperf.txt: $(grep -m1 -iE 'error|what\(\)' "$out/bench_bertperf.txt" | cut -c1-140)" ;;
      esac
    fi
  fi
fi

# ---- 8b. the same benchmark in FP8, only with time left ----
if [ $built -eq 0 ]; then not_built bench_fp8
elif [ $gpu -eq 0 ] || [ $dry -eq 1 ]; then wanted bench_fp8 && record bench_fp8 "not run" "no GPU here"
elif wanted bench_fp8; then
  run_plain bench_fp8 "$(limit_of bench_fp8)" "${bench[@]}" --backend-options precision=fp8 --warmup 3 --steps 10 \
    --repeats 1
  case $? in
    0) record bench_fp8 passed "$(sps_of "$out/bench_fp8.txt") sequences/s in FP8" ;;
    3) ;;
    *) record bench_fp8 FAILED "see bench_fp8.txt: $(grep -m1 -iE 'error|what\(\)' "$out/bench_fp8.txt" | cut -c1-140)" ;;
  esac
fi

# ---- 9. information only: the attention forced onto an old cuDNN ----
old_cudnn=0
if [ -n "$cudnn_runtime" ] && [ "$cudnn_runtime" != none ]; then
  IFS=. read -r major minor _ <<< "$cudnn_runtime"
  [ $(( major * 100 + minor )) -lt 925 ] && old_cudnn=1
fi
if [ $built -eq 1 ] && [ $gpu -eq 1 ] && [ $old_cudnn -eq 1 ] && wanted conformance_cudnn_forced; then
  run_plain conformance_cudnn_forced "$(limit_of conformance_cudnn_forced)" "$bin/test_backend_ops" \
    --gtest_filter='*AttentionForwardAndBackward/cuda_attention_cudnn'
  case $? in
    0) record conformance_cudnn_forced passed "information only" ;;
    3) ;;
    # What it shows is information about the installed cuDNN, not a failure of this backend (AUTO never runs it).
    *) record conformance_cudnn_forced "failed (information only)" "see conformance_cudnn_forced.txt" ;;
  esac
fi

# ---- 10. the PyTorch peer: last, and only with time left ----
if [ $gpu -eq 0 ] || [ $dry -eq 1 ]; then
  wanted bench_pytorch && record bench_pytorch "not run" "no GPU here"
elif wanted bench_pytorch; then
  # torch.compile's cache beside the build, so a second command on the same machine (--resume) finds it warm.
  run_plain bench_pytorch "$(limit_of bench_pytorch)" env PYTHONUNBUFFERED=1 \
    TORCHINDUCTOR_CACHE_DIR="$root/build-device/inductor-cache" "$py" "$root/scripts/bench_pytorch_gpu.py" \
    --batch "$rows" --warmup 3 --steps 10 --repeats 3
  case $? in
    0) record bench_pytorch passed "$(sps_of "$out/bench_pytorch.txt") sequences/s" ;;
    3) ;;
    *) record bench_pytorch FAILED "see bench_pytorch.txt" ;;
  esac
fi

# ---- the table: the versions, then the last row of each step in the plan's order ----
attention_lines=$(cat "$out"/conformance_attention.txt "$out"/bench_probe.txt "$out"/step.txt 2>/dev/null |
                  grep '^cuda backend: attention' | sort -u)
rows_in_order() {
  local e name
  for e in "${plan[@]}"; do
    name=${e%%|*}
    awk -F'|' -v n="$name" '$1 == n {line = $0} END {if (line != "") print line}' "$state"
  done
}
table=$out/device_check.md
{
  echo "# device_check $(date -u +%Y-%m-%d) on $(head -1 "$out/gpu.txt" 2>/dev/null || echo 'no GPU') (budget $budget s$([ $resume -eq 1 ] && echo ', resumed'))"
  echo
  echo "| check | result | detail |"
  echo "| --- | --- | --- |"
  for v in "${versions[@]}"; do IFS='|' read -r a b c <<< "$v"; echo "| $a | $b | $c |"; done
  rows_in_order | while IFS='|' read -r a b c; do echo "| $a | $b | $c |"; done
  if [ -n "$attention_lines" ]; then
    echo
    echo "Attention, once per shape (conformance_attention, step, bench_probe):"
    echo
    echo "$attention_lines" | sed 's/^cuda backend: /- /' | cut -c1-400
  fi
  ours_sps=$(sps_of "$out/bench_bertperf.txt"); [ -z "$ours_sps" ] && ours_sps=$(sps_of "$out/bench_probe.txt")
  torch_sps=$(sps_of "$out/bench_pytorch.txt")
  if [ -n "$ours_sps" ] && [ -n "$torch_sps" ]; then
    echo
    python3 - "$ours_sps" "$torch_sps" "$rows" <<'PY'
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
PY
  fi
} > "$table"
cat "$table" | tee -a "$log"
if [ -n "${OUT:-}" ] && [ "$(cd "$OUT" 2>/dev/null && pwd)" != "$(cd "$out" && pwd)" ]; then
  # A device command brings back a few files: the table, the log, the state, and every step's log in one archive.
  cp "$table" "$log" "$state" "$OUT"/ 2>/dev/null
  (cd "$out" && tar -czf "$OUT/device_check_steps.tar.gz" ./*.txt 2>/dev/null)
fi
failed=$(rows_in_order | grep -c '|FAILED|')
exit $(( failed > 0 ))
