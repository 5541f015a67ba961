#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz into build-fuzz/ (clang, AddressSanitizer) and runs each for SECONDS
# (default 20) from its committed corpus tests/fuzz/corpus/<target>/ (seeds and inputs that once crashed). New
# inputs go to a scratch folder; the committed corpus only changes by hand. Fails when a target crashes, runs out
# of memory or time on one input, or HDF5 prints its own error stack.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(fuzz_train_config fuzz_hdf5_shard fuzz_tf_checkpoint fuzz_tokenizer)

cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DBERTPERF_FUZZ=ON -DBERTPERF_BUILD_TESTS=OFF -DBERTPERF_BUILD_BENCHMARKS=OFF -DBERTPERF_WITH_CUDA=OFF \
  -DBERTPERF_WITH_MPI=OFF -DBERTPERF_NATIVE=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]}" >/dev/null

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=0
for t in "${targets[@]}"; do
  mkdir -p "$scratch/$t"
  log="$scratch/$t.log"
  # -detect_leaks=0: HDF5 keeps free lists and open-object caches that look like leaks to LeakSanitizer.
  # Memory is bounded by resident size (-rss_limit_mb). A single large malloc alone is allowed for the shard
  # target only: HDF5 reserves a damaged heap's claimed size before it finds the read past the end of the file, and
  # never touches it (a failed reservation returns null, which HDF5 reports as an error).
  malloc_limit=2048
  [ "$t" = fuzz_hdf5_shard ] && malloc_limit=1048576
  mkdir -p build-fuzz/artifacts
  if ! (cd "$scratch" && ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 "$OLDPWD/build-fuzz/bin/$t" \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb="$malloc_limit" \
        -print_final_stats=1 -artifact_prefix="$OLDPWD/build-fuzz/artifacts/$t-" \
        "$scratch/$t" "$OLDPWD/tests/fuzz/corpus/$t" >"$log" 2>&1); then
    echo "fuzz: $t FAILED (the input is in build-fuzz/artifacts/)"; tail -40 "$log"; failed=1; continue
  fi
  if grep -q "HDF5-DIAG" "$log"; then echo "fuzz: $t: HDF5 printed its error stack"; grep -m5 -A5 HDF5-DIAG "$log"; failed=1; fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
  echo "fuzz: $t: $runs executions in ${seconds} s, $cov, crashes: 0"
done
exit $failed
