#!/usr/bin/env bash
# bench/h3loss.sh: the time of a whole visit on a new connection (dial,
# handshake, the redirect's status line) over HTTP/3 and over HTTP/2
# through linkgate, on a path with added delay and packet loss. The client
# runs in a network namespace of its own, the gateway and the demo service
# in another; bench/netpath joins them and delays and drops packets in
# each direction as `tc netem delay D loss P%` would (the build machine's
# kernel has no netem). bench/h3load -visits makes the visits, h2 and h3
# interleaved, each on a new transport (no connection reused; a full
# handshake, and with RESUME=1 also a resumed TLS session), and prints
# the median, p90 and p99 and h3 ÷ h2 per setting. Needs root (ip netns).
# Not a test: bounded (VISITS x kinds x settings visits, at most 20 s each).
#
# Environment (defaults in brackets): VISITS [200]  DELAY [25ms, each way]
#   LOSSES [0 1 5, percent each way]  RESUME [0]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
VISITS=${VISITS:-200}
DELAY=${DELAY:-25ms}
LOSSES=${LOSSES:-0 1 5}
RESUME=${RESUME:-0}
((VISITS >= 1 && VISITS <= 1000)) || { echo "bench: VISITS 1 to 1000" >&2; exit 2; }
((EUID == 0)) || { echo "bench: needs root for ip netns" >&2; exit 2; }
command -v openssl >/dev/null || { echo "bench: openssl is not installed" >&2; exit 2; }

work=$(mktemp -d)
cli=lgcli$$ srv=lgsrv$$
pids=()
relay=
cleanup() {
	[[ -n $relay ]] && kill "$relay" 2>/dev/null
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	ip netns del "$cli" 2>/dev/null || true
	ip netns del "$srv" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/gateway" ./cmd/gateway
go build -o "$work/tinyurl" ./cmd/tinyurl
go build -o "$work/h3load" ./bench/h3load
go build -o "$work/netpath" ./bench/netpath

h3_gateway "$work" 10.237.0.1

# Two namespaces, a TUN device in each, 10.237.0.2 (client) and 10.237.0.1
# (gateway) across them; the demo service on the gateway side's loopback.
ip netns add "$cli"
ip netns add "$srv"
for ns in "$cli" "$srv"; do
	ip -n "$ns" link set lo up
	ip -n "$ns" tuntap add dev lgt0 mode tun
done
ip -n "$cli" addr add 10.237.0.2 peer 10.237.0.1 dev lgt0
ip -n "$srv" addr add 10.237.0.1 peer 10.237.0.2 dev lgt0

ip netns exec "$srv" "$work/tinyurl" -listen 127.0.0.1:18081 >/dev/null &
pids+=($!)
ip netns exec "$srv" "$work/gateway" -config "$work/gateway.yaml" -log-level warn >"$work/gateway.log" 2>&1 &
pids+=($!)

# start_path LOSS: the relay between the namespaces with DELAY and LOSS.
start_path() {
	[[ -n $relay ]] && { kill "$relay"; wait "$relay" 2>/dev/null || true; }
	"$work/netpath" -a "$cli" -b "$srv" -delay "$DELAY" -loss "$1" >"$work/netpath.out" 2>&1 &
	relay=$!
	for _ in $(seq 50); do grep -q ready "$work/netpath.out" && break; sleep 0.1; done
	grep -q ready "$work/netpath.out" || { cat "$work/netpath.out" >&2; exit 1; }
	ip -n "$cli" link set lgt0 up
	ip -n "$srv" link set lgt0 up
}

start_path 0
for _ in $(seq 100); do
	ip netns exec "$cli" curl -skf -o /dev/null https://10.237.0.1:18443/healthz 2>/dev/null && break
	sleep 0.2
done
resume=()
[[ $RESUME == 1 ]] && resume=(-resume)
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for loss in $LOSSES; do
	start_path "$loss"
	echo "== delay $DELAY each way, loss $loss % each way, $VISITS visits of each kind"
	ip netns exec "$cli" "$work/h3load" -url https://10.237.0.1:18443/go -visits "$VISITS" "${resume[@]}"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
