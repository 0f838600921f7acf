#!/usr/bin/env bash
# Multi-host rehearsal on one machine: N "hosts" as network namespaces joined by virtual ethernet
# through a bridge (in a namespace of its own, so the machine's own network is never touched), each
# link shaped to a bandwidth (tc tbf) and, where the kernel has sch_netem, a one-way latency. One
# tessera rank per host, started with a torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK=0,
# LOCAL_WORLD_SIZE=1, MASTER_ADDR = host 0's address): rendezvous and collectives go over TCP
# across the links, exactly as on separate machines.
#
#   scripts/netns-hosts.sh [--hosts N] [--rate RATE] [--delay DELAY] [--binary PATH] -- ARGS...
#
#   --hosts N      hosts (ranks), 2..=16 (default 3)
#   --rate RATE    bandwidth of each link in each direction, tc units (e.g. 1gbit, 100mbit);
#                  default: unshaped
#   --delay DELAY  one-way latency of each link, tc units (e.g. 1ms); needs the sch_netem qdisc
#   --binary PATH  the tessera binary (default: target/release/tessera)
#   ARGS           tessera's arguments, run on every host (e.g. run quick --out out --quiet)
#
# Prints each rank's output prefixed by its rank and exits with the first failing rank's status.
# Needs root (ip netns, ip link, tc). Everything it creates is removed on exit, however it exits.
# `--check` only builds the hosts and links and says whether that worked (exit 0) or why not (exit 1).
set -euo pipefail

hosts=3
rate=""
delay=""
binary="${TESSERA_BIN:-target/release/tessera}"
check=0
while [ $# -gt 0 ]; do
    case "$1" in
        --hosts) hosts="$2"; shift 2 ;;
        --rate) rate="$2"; shift 2 ;;
        --delay) delay="$2"; shift 2 ;;
        --binary) binary="$2"; shift 2 ;;
        --check) check=1; shift ;;
        --) shift; break ;;
        *) echo "netns-hosts: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done

fail() { echo "netns-hosts: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail "needs root (ip netns, ip link, tc)"
command -v ip >/dev/null || fail "needs iproute2's ip"
command -v tc >/dev/null || fail "needs iproute2's tc"
case "$hosts" in ''|*[!0-9]*) fail "--hosts must be a number, got '$hosts'" ;; esac
[ "$hosts" -ge 2 ] && [ "$hosts" -le 16 ] || fail "--hosts must be 2..=16, got $hosts"

# A name unique to this run, short enough for interface names (15 bytes).
id="t$$"
sw="${id}sw"
ns() { echo "${id}h$1"; }
cleanup() {
    for ((i = 0; i < hosts; i++)); do ip netns del "$(ns "$i")" 2>/dev/null || true; done
    ip netns del "$sw" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

ip netns add "$sw" || fail "ip netns add failed (no network namespaces here?)"
ip -n "$sw" link set lo up
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up

# Each link direction's egress: netem (latency, and rate when given) if asked for a delay, else a
# token bucket for the rate. Both ends are shaped, so each direction sees RATE and DELAY once.
shape() {
    local where="$1" dev="$2"
    if [ -n "$delay" ]; then
        ip netns exec "$where" tc qdisc add dev "$dev" root netem delay "$delay" ${rate:+rate "$rate"} 2>/dev/null \
            || fail "tc netem is not available in this kernel (sch_netem); run without --delay"
    elif [ -n "$rate" ]; then
        # Burst: at least one 64 KiB TCP segment train, else large rates stall.
        ip netns exec "$where" tc qdisc add dev "$dev" root tbf rate "$rate" burst 256kb latency 100ms \
            || fail "tc tbf rate $rate failed on $dev"
    fi
}

for ((i = 0; i < hosts; i++)); do
    h="$(ns "$i")"
    ip netns add "$h"
    ip -n "$h" link set lo up
    ip link add "${id}e$i" type veth peer name "${id}p$i"
    ip link set "${id}e$i" netns "$h"
    ip link set "${id}p$i" netns "$sw"
    ip -n "$h" link set "${id}e$i" name eth0
    ip -n "$h" addr add "10.213.0.$((i + 1))/24" dev eth0
    ip -n "$h" link set eth0 up
    ip -n "$sw" link set "${id}p$i" master br0
    ip -n "$sw" link set "${id}p$i" up
    shape "$h" eth0
    shape "$sw" "${id}p$i"
done

if [ "$check" = 1 ]; then
    echo "netns-hosts: $hosts hosts can be made here"
    exit 0
fi

[ $# -gt 0 ] || fail "no tessera arguments after --"
[ -x "$binary" ] || fail "no tessera binary at $binary (build it, or give --binary)"
binary="$(realpath "$binary")"

port=$((29000 + $$ % 1000))
pids=()
for ((i = 0; i < hosts; i++)); do
    ip netns exec "$(ns "$i")" env RANK="$i" WORLD_SIZE="$hosts" LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
        MASTER_ADDR=10.213.0.1 MASTER_PORT="$port" "$binary" "$@" \
        > >(sed -u "s/^/[host $i] /") 2>&1 &
    pids+=("$!")
done
status=0
for p in "${pids[@]}"; do
    wait "$p" || { s=$?; [ "$status" = 0 ] && status=$s; }
done
exit "$status"
