#!/usr/bin/env bash
# The distributed code under ThreadSanitizer and AddressSanitizer: dist_probe (tests/cpp/dist_probe.cpp), which links
# bertperf_comm alone (the launcher's account, the context with rank 0's watcher and the other nodes' heartbeat
# threads, the MPI transport and every reducer), built in build-tsan/ and build-asan/ (RelWithDebInfo, no CUDA), run
# `check` and `reducers` as 4 ranks on this host and as 2 hosts x 2 ranks over TCP between network namespaces
# (scripts/netns_hosts.sh: root; skipped with the reason where not allowed). Open MPI itself is not instrumented: what
# the sanitizers cannot judge inside it is suppressed, each entry with its reason, in tests/sanitizers/tsan.supp.
#
#   scripts/sanitize_dist.sh [tsan] [asan]      (default both; logs under $SANITIZE_LOGS, default /tmp/sanitize_dist)
#
# Prints one line per run: the probe's exit status and the count of sanitizer reports; exit 1 if any run has one.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LOGS=${SANITIZE_LOGS:-/tmp/sanitize_dist}
HOSTS=scripts/netns_hosts.sh
export NETNS_PREFIX=bpsan NETNS_SUBNET=10.231.93 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
kinds=("$@")
[ ${#kinds[@]} -eq 0 ] && kinds=(tsan asan)
rm -rf "$LOGS" && mkdir -p "$LOGS"
netns=yes
if ! why=$("$HOSTS" check 2>&1); then netns="no ($why)"; fi
trap '"$HOSTS" down >/dev/null 2>&1 || true' EXIT
[ "$netns" = yes ] && "$HOSTS" up 2 >/dev/null

failed=0
for kind in "${kinds[@]}"; do
  case $kind in
    tsan) flags=thread ;;
    asan) flags=address,undefined ;;
    *) echo "sanitize_dist: error: '$kind' is not tsan or asan" >&2; exit 2 ;;
  esac
  cmake -S . -B "build-$kind" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS="-fsanitize=$flags -fno-omit-frame-pointer" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=$flags" \
    -DBERTPERF_WITH_CUDA=OFF -DBERTPERF_WITH_NCCL=OFF -DBERTPERF_BUILD_BENCHMARKS=OFF -DBERTPERF_WITH_DNNL=OFF \
    -DBERTPERF_NATIVE=OFF >"$LOGS/$kind-configure.txt"
  nice cmake --build "build-$kind" -j2 --target dist_probe >"$LOGS/$kind-build.txt"
  supp=$ROOT/tests/sanitizers
  export TSAN_OPTIONS="suppressions=$supp/tsan.supp halt_on_error=0 second_deadlock_stack=1 log_path=$LOGS/$kind"
  # No leak check: what Open MPI leaves allocated at exit comes mostly from components it has unloaded by then, which
  # LeakSanitizer can neither name nor have suppressed (measured: one report per rank, none with a frame of ours).
  export ASAN_OPTIONS="halt_on_error=0 detect_leaks=0 log_path=$LOGS/$kind"
  export UBSAN_OPTIONS="print_stacktrace=1 log_path=$LOGS/$kind"
  pass=(-x TSAN_OPTIONS -x ASAN_OPTIONS -x UBSAN_OPTIONS)
  for mode in check reducers; do
    for where in host netns; do
      tag="$kind-$mode-$where"
      if [ "$where" = netns ] && [ "$netns" != yes ]; then echo "$tag: skipped: network namespaces: $netns"; continue; fi
      rm -f "$LOGS/$kind".*
      set +e
      if [ "$where" = host ]; then
        timeout 600 mpirun -np 4 --oversubscribe --mca mpi_yield_when_idle 1 "${pass[@]}" \
          "build-$kind/bin/dist_probe" "$mode" >"$LOGS/$tag.out" 2>&1
      else
        MPIRUN_ARGS="--mca mpi_yield_when_idle 1 ${pass[*]}" timeout 600 "$HOSTS" mpirun 2 2 \
          "$ROOT/build-$kind/bin/dist_probe" "$mode" >"$LOGS/$tag.out" 2>&1
      fi
      code=$?
      set -e
      cat "$LOGS/$kind".* >"$LOGS/$tag.reports" 2>/dev/null || : >"$LOGS/$tag.reports"
      rm -f "$LOGS/$kind".*
      reports=$(grep -cE "^(WARNING: ThreadSanitizer|==[0-9]+==ERROR: (Address|Leak)Sanitizer)|runtime error:" \
        "$LOGS/$tag.reports" || true)
      echo "$tag: exit $code, $reports report(s) ($LOGS/$tag.reports)"
      if [ "$code" != 0 ] || [ "$reports" != 0 ]; then failed=1; fi
    done
  done
done
exit $failed
