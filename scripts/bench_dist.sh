#!/usr/bin/env bash
# The distributed benchmarks of speed/RESULTS.md, on this machine, as root (network namespaces):
#   1. our reducers beside MPI_Allreduce alone on one host (2 ranks, shared memory), with and without a simulated
#      backward to overlap with;
#   2. the same across 2 hosts (scripts/netns_hosts.sh) of 1 rank each, at two shaped link rates, with the
#      all-reduce time the alpha-beta ring model predicts from the link's rate and its measured small-message time;
#   3. the mini training step (bertperf bench-step) on 1 rank, then 2 hosts x 1 and 2 hosts x 2 ranks.
# Usage: scripts/bench_dist.sh [BUILD_DIR] (default build); prints markdown.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(readlink -f "${1:-build}")
BENCH="$BUILD/bin/bench_reduce"
HOSTS=scripts/netns_hosts.sh
export NETNS_PREFIX=bpbench NETNS_SUBNET=10.231.77
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
trap '"$HOSTS" down >/dev/null 2>&1 || true' EXIT

echo "## load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores, $(date -u +%FT%TZ)"
echo
echo "### 1. One host, 2 ranks (shared memory)"
mpirun -np 2 --oversubscribe "$BENCH" --mib 1,4,16,64 --reps 9 --algorithms mpi,allreduce,bucketed,hierarchical,sharded
echo
mpirun -np 2 --oversubscribe "$BENCH" --mib 16 --reps 5 --bucket-mb 2 --compute-ms 10 --layers 12 \
  --algorithms mpi,bucketed,bucketed-polled
echo

"$HOSTS" up 2 >/dev/null
for link in "1gbit 0.5ms 1000" "100mbit 2ms 100"; do
  set -- $link
  "$HOSTS" shape "$1" "$2" 2>&1 | sed 's/^/# /'
  echo "### 2. Two hosts x 1 rank, link $1"
  # The link's small-message time (alpha): a 4-byte all-reduce (the fastest of 21: the machine is shared).
  "$HOSTS" mpirun 2 1 "$BENCH" --mib 0.000004 --reps 21 --algorithms mpi | tee /tmp/bench_dist_alpha.txt
  alpha=$(awk -F'|' '/\| mpi \|/ {gsub(/ /, "", $5); print $5}' /tmp/bench_dist_alpha.txt)
  mib=$([ "$3" = 1000 ] && echo 4,16 || echo 1,4)
  "$HOSTS" mpirun 2 1 "$BENCH" --mib "$mib" --reps 5 --algorithms oneway,exchange,mpi,bucketed,hierarchical,sharded \
    | tee /tmp/bench_dist_link.txt
  echo
  echo "Ring model for 2 ranks, S/B + 2 alpha with B = $1 (the tbf rate, so on the wire: Ethernet, IP and TCP"
  echo "headers included), 2 alpha = the fastest 4-byte all-reduce ($alpha s):"
  echo
  echo "The same model with B the link's measured one-way rate at that size (oneway row): oneway + 2 alpha."
  echo
  echo "| MiB | measured MPI_Allreduce s | model (tbf rate) s | measured / model | model (one-way rate) s | measured / model |"
  echo "| --- | --- | --- | --- | --- | --- |"
  awk -F'|' -v mbit="$3" -v rt="$alpha" '{ gsub(/ /, "", $2); gsub(/ /, "", $3); gsub(/ /, "", $4) }
    $3 == "oneway" { oneway[$2] = $4 }
    $3 == "mpi" {
      model = $2 * 1048576 * 8 / (mbit * 1e6) + rt;   # 2 alpha = one all-reduce round trip
      eff = oneway[$2] + rt;
      printf "| %s | %.4f | %.4f | %.3f | %.4f | %.3f |\n", $2, $4, model, $4 / model, eff, $4 / eff }' \
    /tmp/bench_dist_link.txt
  echo
  if [ "$3" = 100 ]; then
    echo "Overlap at $1: 4 MiB of gradients, a simulated backward of 12 layers x 25 ms:"
    "$HOSTS" mpirun 2 1 "$BENCH" --mib 4 --reps 3 --bucket-mb 0.5 --compute-ms 25 --layers 12 \
      --algorithms mpi,bucketed
    echo
  fi
done

"$HOSTS" shape 1gbit 0.5ms 2>/dev/null
echo "### 3. The mini benchmark's step (bench-step --config, batch 32 per rank, seq 128), hosts linked at 1 Gbit/s"
echo
# The mini config with one thread per rank and a reduction; beside it, so its benchmark.json is found.
mini=benchmarks/bert/mini/cpu_2c.json
configs=()
for red in allreduce bucketed; do
  cfg=$(mktemp benchmarks/bert/mini/.bench_dist_XXXXXX.json)
  configs+=("$cfg")
  sed "s/\"backend\": *{[^}]*}/\"backend\": {\"name\": \"cpu\", \"threads\": 1}, \"distributed\": {\"clip\": \"after_reduction\", \"reduction\": {\"algorithm\": \"$red\", \"bucket_mb\": 4}}/" \
    "$mini" > "$cfg"
done
trap '"$HOSTS" down >/dev/null 2>&1 || true; rm -f "${configs[@]}"' EXIT
step() { grep '"summary"' | sed 's/.*"step_s": \([0-9.]*\), "seqs_per_s": \([0-9.]*\).*/\1 \2/'; }
echo "| ranks | hosts x ranks | threads per rank | reduction | step s | sequences/s (all ranks) |"
echo "| --- | --- | --- | --- | --- | --- |"
for t in 2 1; do
  one=$("$BUILD/bin/bertperf" bench-step --config "$mini" --threads $t --steps 3 --repeats 3 | step)
  echo "| 1 | 1 x 1 | $t | none | ${one% *} | ${one#* } |"
done
for shape in "2 1" "2 2"; do
  set -- $shape
  for i in 0 1; do
    r=$("$HOSTS" mpirun "$1" "$2" "$BUILD/bin/bertperf" bench-step --config "${configs[$i]}" --steps 3 --repeats 3 | step)
    n=$(($1 * $2))
    red=$([ $i = 0 ] && echo "all-reduce after the backward" || echo "bucketed 4 MiB, overlapped")
    echo "| $n | $1 x $2 | 1 | $red | ${r% *} | $(awk -v s="${r#* }" -v n=$n 'BEGIN {printf "%.1f", s * n}') |"
  done
done
echo
echo "## load after: $(cut -d' ' -f1-3 /proc/loadavg)"
