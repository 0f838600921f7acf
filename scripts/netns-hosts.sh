#!/usr/bin/env bash
# Multi-host rehearsal on one machine: N "hosts" as network namespaces joined by virtual ethernet
# through a bridge (in a namespace of its own, so the machine's own network is never touched), each
# link shaped to a bandwidth (tc tbf) and, with --delay, a one-way latency. One tessera rank per
# host, started with a torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK=0,
# LOCAL_WORLD_SIZE=1, MASTER_ADDR = host 0's address): rendezvous and collectives go over TCP
# across the links, exactly as on separate machines.
#
#   scripts/netns-hosts.sh [--hosts N] [--rate RATE] [--delay DELAY [--netem]] [--binary PATH] -- ARGS...
#
#   --hosts N      hosts (ranks), 2..=16 (default 3)
#   --rate RATE    bandwidth of each link in each direction, tc units (e.g. 1gbit, 100mbit);
#                  default: unshaped
#   --delay DELAY  one-way latency between any two hosts, tc units (e.g. 0.1ms, 1ms, 10ms, 0),
#                  through `tessera relay` in the bridge's namespace (below): needs no sch_netem
#   --netem        make --delay with tc netem on each host's link instead (kernels with sch_netem)
#   --binary PATH  the tessera binary (default: target/release/tessera)
#   ARGS           tessera's arguments, run on every host (e.g. run quick --out out --quiet)
#
# Prints each rank's output prefixed by its rank (the relay's by [relay]) and exits with the first
# failing rank's status. Needs root (ip netns, ip link, ip rule, tc). Everything it creates is
# removed on exit, however it exits. `--check` only builds the hosts and links (and the relay) and
# says whether that worked (exit 0) or why not (exit 1).
#
# The relay (--delay without --netem). Host i is known by 10.213.0.(i+1), the address its rank
# publishes and dials from; its link carries 10.213.1.(i+1) besides. Every host routes 10.213.0.0/24
# through the bridge's namespace, where that whole network is local (an "AnyIP" route) for packets
# arriving from the hosts, so each connection between two hosts, whatever its port, is accepted
# there by `tessera relay`, which dials the same host and port at 10.213.1.x and holds every byte
# for DELAY in each direction (src/dist/relay.rs). Policy routing sends the namespace's own packets
# to 10.213.0.0/24 out to the hosts (the replies). The relay listens on MASTER_PORT and on the
# hosts' ephemeral ports, which each host's namespace narrows to RELAY_PORTS: the ranks listen
# where they always do (port 0) and need no option. A host's connections to itself stay local.
set -euo pipefail

hosts=3
rate=""
delay=""
netem=0
binary="${TESSERA_BIN:-target/release/tessera}"
check=0
while [ $# -gt 0 ]; do
    case "$1" in
        --hosts) hosts="$2"; shift 2 ;;
        --rate) rate="$2"; shift 2 ;;
        --delay) delay="$2"; shift 2 ;;
        --netem) netem=1; shift ;;
        --binary) binary="$2"; shift 2 ;;
        --check) check=1; shift ;;
        --) shift; break ;;
        *) echo "netns-hosts: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done

fail() { echo "netns-hosts: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail "needs root (ip netns, ip link, ip rule, tc)"
command -v ip >/dev/null || fail "needs iproute2's ip"
command -v tc >/dev/null || fail "needs iproute2's tc"
case "$hosts" in ''|*[!0-9]*) fail "--hosts must be a number, got '$hosts'" ;; esac
[ "$hosts" -ge 2 ] && [ "$hosts" -le 16 ] || fail "--hosts must be 2..=16, got $hosts"
[ "$netem" = 0 ] || [ -n "$delay" ] || fail "--netem needs --delay"
relay=0
[ -n "$delay" ] && [ "$netem" = 0 ] && relay=1
if [ "$relay" = 1 ]; then
    case "$delay" in
        0|*[0-9]s|*[0-9]sec|*[0-9]ms|*[0-9]msec|*[0-9]us|*[0-9]usec) ;;
        *) fail "--delay must be a number and a unit (s, ms, us; e.g. 1ms), got '$delay'" ;;
    esac
    # The relay is part of the binary: it must exist before the links are made.
    [ -x "$binary" ] || fail "no tessera binary at $binary (build it, or give --binary)"
fi
# The hosts' ephemeral ports (where the ranks listen) and the rendezvous port, both relayed.
relay_ports="20000 20255"
port=$((29000 + $$ % 1000))

# A name unique to this run, short enough for interface names (15 bytes).
id="t$$"
sw="${id}sw"
ns() { echo "${id}h$1"; }
relay_pid=""
relay_dir=""
cleanup() {
    [ -z "$relay_pid" ] || kill "$relay_pid" 2>/dev/null || true
    [ -z "$relay_dir" ] || rm -rf "$relay_dir"
    for ((i = 0; i < hosts; i++)); do ip netns del "$(ns "$i")" 2>/dev/null || true; done
    ip netns del "$sw" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

ip netns add "$sw" || fail "ip netns add failed (no network namespaces here?)"
ip -n "$sw" link set lo up
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up
if [ "$relay" = 1 ]; then
    ip -n "$sw" addr add 10.213.1.254/24 dev br0
    # Arriving from the hosts, all of 10.213.0.0/24 is local here (the relay accepts it); sent from
    # here (the relay's replies), it goes out to the hosts: a rule for this namespace's own
    # packets ahead of the local table, which moves behind it.
    ip -n "$sw" route add local 10.213.0.0/24 dev lo \
        || fail "ip route add local (AnyIP) failed in the bridge's namespace"
    ip -n "$sw" route add 10.213.0.0/24 dev br0 table 100
    ip -n "$sw" rule add pref 10 iif lo to 10.213.0.0/24 lookup 100 \
        || fail "ip rule failed (a kernel without policy routing?)"
    ip -n "$sw" rule add pref 20 lookup local
    ip -n "$sw" rule del pref 0
fi

# Each link direction's egress: a token bucket for the rate, both ends, so each direction sees RATE
# once per link; with --netem, netem (latency, and rate) on the hosts' ends instead.
shape() {
    local where="$1" dev="$2"
    if [ "$netem" = 1 ]; then
        # Each host's egress only: a packet between two hosts passes one host's egress, so it
        # sees DELAY once, as through the relay.
        if [ "$where" != "$sw" ]; then
            ip netns exec "$where" tc qdisc add dev "$dev" root netem delay "$delay" ${rate:+rate "$rate"} 2>/dev/null \
                || fail "tc netem is not available in this kernel (sch_netem); run --delay without --netem"
        elif [ -n "$rate" ]; then
            ip netns exec "$where" tc qdisc add dev "$dev" root tbf rate "$rate" burst 256kb latency 100ms \
                || fail "tc tbf rate $rate failed on $dev"
        fi
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
    if [ "$relay" = 1 ]; then
        ip -n "$h" addr add "10.213.0.$((i + 1))/32" dev eth0
        ip -n "$h" addr add "10.213.1.$((i + 1))/24" dev eth0
        ip -n "$h" link set eth0 up
        ip -n "$h" route add 10.213.0.0/24 via 10.213.1.254 src "10.213.0.$((i + 1))"
        ip netns exec "$h" sh -c "echo '$relay_ports' > /proc/sys/net/ipv4/ip_local_port_range" \
            || fail "cannot set the ephemeral ports of host $i"
    else
        ip -n "$h" addr add "10.213.0.$((i + 1))/24" dev eth0
        ip -n "$h" link set eth0 up
    fi
    ip -n "$sw" link set "${id}p$i" master br0
    ip -n "$sw" link set "${id}p$i" up
    shape "$h" eth0
    shape "$sw" "${id}p$i"
done

if [ "$relay" = 1 ]; then
    binary="$(realpath "$binary")"
    relay_dir="$(mktemp -d)"
    read -r first last <<<"$relay_ports"
    ip netns exec "$sw" "$binary" relay --delay "$delay" --to-net 10.213.1.0/24 \
        --listen "0.0.0.0:$port" --listen "0.0.0.0:$first-$last" --ready-file "$relay_dir/ready" \
        > >(sed -u "s/^/[relay] /") 2>&1 &
    relay_pid=$!
    for ((t = 0; t < 300; t++)); do
        [ -e "$relay_dir/ready" ] && break
        kill -0 "$relay_pid" 2>/dev/null || fail "the relay exited before listening (its output is above)"
        sleep 0.1
    done
    [ -e "$relay_dir/ready" ] || fail "the relay was not listening after 30 s"
fi

if [ "$check" = 1 ]; then
    echo "netns-hosts: $hosts hosts can be made here${delay:+, $delay apart}"
    exit 0
fi

[ $# -gt 0 ] || fail "no tessera arguments after --"
[ -x "$binary" ] || fail "no tessera binary at $binary (build it, or give --binary)"
binary="$(realpath "$binary")"

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
