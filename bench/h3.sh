#!/usr/bin/env bash
# bench/h3.sh: requests per second and the first request's time over
# HTTP/3 and over HTTP/2 through linkgate (server.http3 on), the same
# certificate, the same Go client code (bench/h3load: quic-go's client for
# h3, net/http's for h2; Debian's h2load speaks no QUIC, and Debian's nginx
# has no HTTP/3 module to compare with), one connection with STREAMS
# requests in flight, in front of the demo service on loopback. Rounds are
# interleaved (h2, h3, h2, ...) so that a noisy neighbour hurts both alike.
# Not a test: bounded in time (ROUNDS x 2 x DURATION).
#
# Environment (defaults in brackets): ROUNDS [3]  DURATION [5]  STREAMS [16]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
STREAMS=${STREAMS:-16}
((DURATION <= 30 && ROUNDS <= 10)) || { echo "bench: DURATION <= 30 and ROUNDS <= 10" >&2; exit 2; }
command -v openssl >/dev/null || { echo "bench: openssl is not installed" >&2; exit 2; }

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

go build -o "$work/gateway" ./cmd/gateway
go build -o "$work/tinyurl" ./cmd/tinyurl
go build -o "$work/h3load" ./bench/h3load

h3_gateway "$work" 127.0.0.1

"$work/tinyurl" -listen 127.0.0.1:18081 -links "" >/dev/null &
pids+=($!)
"$work/gateway" -config "$work/gateway.yaml" -log-level warn >"$work/gateway.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -skf -o /dev/null https://127.0.0.1:18443/healthz 2>/dev/null && break; sleep 0.1; done

for r in $(seq "$ROUNDS"); do
	for p in h2 h3; do
		echo "round $r: $("$work/h3load" -url https://127.0.0.1:18443/x -proto $p -streams "$STREAMS" -duration "${DURATION}s")"
	done
done | tee "$work/rounds"
for p in h2 h3; do
	echo "$p median: $(grep " $p " "$work/rounds" | awk '{print $4}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}') req/s"
done
