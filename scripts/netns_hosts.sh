#!/usr/bin/env bash
# Hosts on this machine: N network namespaces joined by veth pairs to one bridge, each with its own address and
# host name, an optional shaped link (tc netem: rate and delay on every host's link, both ways; a kernel without
# netem gets tbf, the rate alone, and a note saying so), and Open MPI over TCP between them. mpirun runs inside the first host; it starts its daemons on the others through this script's
# `agent` (in place of ssh), which enters the host's namespace. Needs root (ip netns, tc). Open MPI gets 4 TCP
# connections per pair of ranks (btl_tcp_links): over one, sending and receiving at once takes twice as long as
# one way (measured here), so a pair exchanging halves, as every all-reduce does, would see half the link.
#
#   netns_hosts.sh up N [RATE DELAY]        create hosts 1..N (RATE like 1gbit, DELAY like 0.5ms; none: unshaped)
#   netns_hosts.sh shape RATE DELAY         reshape every host's link ("none none": unshaped)
#   netns_hosts.sh mpirun N PER_HOST CMD... run CMD as N x PER_HOST ranks (extra mpirun options in MPIRUN_ARGS)
#   netns_hosts.sh run I CMD...             run CMD on host I (a daemon of its own: slurmd)
#   netns_hosts.sh kill I                   kill every process on host I, as a host that fails takes them down
#   netns_hosts.sh down                     kill what runs on the hosts, remove them and the bridge
#   netns_hosts.sh check                    exit 0 when this machine allows network namespaces, else say why
#
# NETNS_PREFIX (default "bp") names the namespaces (PREFIX-h1 ...) and the bridge (PREFIX-br), and NETNS_SUBNET
# (default 10.231.7) their /24, so two sets can live side by side. Host I is SUBNET.I; the machine itself is
# SUBNET.254 on the bridge, so a daemon outside the hosts (a Slurm controller) reaches them all.
set -euo pipefail

PREFIX=${NETNS_PREFIX:-bp}
SUBNET=${NETNS_SUBNET:-10.231.7}
BRIDGE="${PREFIX}-br"
SELF=$(readlink -f "$0")

ns_of() { echo "${PREFIX}-h$1"; }
addr_of() { echo "${SUBNET}.$1"; }
hosts() { ip netns list | awk '{print $1}' | grep -E "^${PREFIX}-h[0-9]+$" | sed "s/^${PREFIX}-h//" | sort -n; }

# This kernel's netem, or (where the kernel lacks netem) tbf: the rate alone, and a note that no delay is added.
have_netem() { zcat /proc/config.gz 2>/dev/null | grep -q '^CONFIG_NET_SCH_NETEM=[ym]' || [ -d /sys/module/sch_netem ]; }

shape_dev() {  # [ns] dev rate delay
  local run=(); [ -n "$1" ] && run=(ip netns exec "$1")
  "${run[@]}" tc qdisc del dev "$2" root 2>/dev/null || true
  [ "$3" = none ] && return 0
  if have_netem; then
    "${run[@]}" tc qdisc add dev "$2" root netem rate "$3" delay "$4" limit 100000
  else
    "${run[@]}" tc qdisc add dev "$2" root tbf rate "$3" burst 256kb latency 100ms
  fi
}

shape_one() {  # host rate delay: both ways, egress of the host's end and of the bridge's end
  shape_dev "$(ns_of "$1")" eth0 "$2" "$3"
  shape_dev "" "${PREFIX}-v$1" "$2" "$3"
}

case "${1:-}" in
  check)
    [ "$(id -u)" = 0 ] || { echo "network namespaces need root"; exit 1; }
    command -v ip >/dev/null || { echo "iproute2 (ip) is not installed"; exit 1; }
    command -v tc >/dev/null || { echo "tc is not installed"; exit 1; }
    command -v unshare >/dev/null || { echo "unshare is not installed"; exit 1; }
    command -v nsenter >/dev/null || { echo "nsenter is not installed"; exit 1; }
    probe="${PREFIX}-probe$$"
    if ! err=$(ip netns add "$probe" 2>&1); then echo "ip netns is not permitted here: $err"; exit 1; fi
    if ! err=$(ip netns exec "$probe" unshare --uts true 2>&1); then
      ip netns del "$probe"; echo "unshare --uts is not permitted here: $err"; exit 1
    fi
    ip netns del "$probe"
    ;;
  up)
    n=${2:?usage: up N [RATE DELAY]}
    "$SELF" down >/dev/null 2>&1 || true
    ip link add "$BRIDGE" type bridge
    ip addr add "$(addr_of 254)/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    for i in $(seq 1 "$n"); do
      ns=$(ns_of "$i")
      ip netns add "$ns"
      ip link add "${PREFIX}-v$i" type veth peer name "${PREFIX}-p$i"
      ip link set "${PREFIX}-p$i" netns "$ns"
      ip netns exec "$ns" ip link set "${PREFIX}-p$i" name eth0
      ip netns exec "$ns" ip addr add "$(addr_of "$i")/24" dev eth0
      ip netns exec "$ns" ip link set eth0 up
      ip netns exec "$ns" ip link set lo up
      ip link set "${PREFIX}-v$i" master "$BRIDGE"
      ip link set "${PREFIX}-v$i" up
    done
    if [ -n "${3:-}" ]; then "$SELF" shape "$3" "${4:?a rate needs a delay}"; fi
    ;;
  shape)
    for i in $(hosts); do shape_one "$i" "${2:?RATE}" "${3:?DELAY}"; done
    if [ "$2" != none ] && ! have_netem; then
      echo "netns_hosts: this kernel has no netem: links shaped to $2 by tbf, no delay added (asked $3)" >&2
    fi
    ;;
  run)
    # In the host's network namespace under its own host name, with the machine's mounts (`ip netns exec` would
    # remount /sys, hiding the cgroup tree slurmd reads).
    i=${2:?usage: run I CMD...}; shift 2
    ns=$(ns_of "$i")
    exec nsenter --net="/run/netns/$ns" unshare --uts /bin/sh -c 'hostname "$0" && exec "$@"' "$ns" "$@"
    ;;
  kill)
    ip netns pids "$(ns_of "${2:?usage: kill I}")" | xargs -r kill -9
    ;;
  down)
    for i in $(hosts); do
      ip netns pids "$(ns_of "$i")" | xargs -r kill -9 2>/dev/null || true
      ip netns del "$(ns_of "$i")" || true
      ip link del "${PREFIX}-v$i" 2>/dev/null || true
    done
    ip link del "$BRIDGE" 2>/dev/null || true
    ;;
  agent)
    # Open MPI's launch agent: `agent HOST WORD...` runs the words as a shell line (what ssh does) on HOST, that
    # is, in its namespace under its own host name.
    host=$2; shift 2
    i=${host##*.}
    ns=$(ns_of "$i")
    exec ip netns exec "$ns" unshare --uts /bin/sh -c 'hostname "$0" && eval "$1"' "$ns" "$*"
    ;;
  mpirun)
    n=${2:?usage: mpirun N PER_HOST CMD...}; per=${3:?PER_HOST}; shift 3
    list=""
    for i in $(seq 1 "$n"); do list="${list:+$list,}$(addr_of "$i"):$per"; done
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # shellcheck disable=SC2086
    exec ip netns exec "$(ns_of 1)" unshare --uts /bin/sh -c 'hostname "$0" && exec "$@"' "$(ns_of 1)" \
      mpirun --host "$list" -np $((n * per)) \
      --mca plm rsh --mca plm_rsh_agent "$SELF agent" --mca plm_rsh_no_tree_spawn 1 \
      --mca btl self,vader,tcp --mca btl_tcp_if_include "${SUBNET}.0/24" --mca oob_tcp_if_include "${SUBNET}.0/24" \
      --mca btl_tcp_links 4 \
      -x NETNS_PREFIX="$PREFIX" -x NETNS_SUBNET="$SUBNET" ${MPIRUN_ARGS:-} "$@"
    ;;
  *)
    sed -n '2,19p' "$SELF" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
