#!/usr/bin/env bash
# Starts the demo tiny-URL service on 127.0.0.1:8081 and the gateway in front of
# it on 127.0.0.1:8080 (admin on 127.0.0.1:9090), with the in-process limiter and
# the embedded analytics store under ./data. Ctrl-C (or SIGTERM to this script)
# stops both. Extra arguments go to the gateway (-log-format json, ...).
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p bin
go build -o bin/ ./cmd/gateway ./cmd/tinyurl
export LINKGATE_ADMIN_TOKEN=${LINKGATE_ADMIN_TOKEN:-demo-admin-token}

pids=()
stop() {
  trap - INT TERM EXIT
  # SIGTERM: the gateway drains its requests and flushes the visits to ./data.
  kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
}
# Both run in the background so that a signal to this script reaches its trap
# at once (bash defers traps while a foreground child runs) and stops both.
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bin/tinyurl -listen 127.0.0.1:8081 &
pids+=($!)
echo "demo: admin token is $LINKGATE_ADMIN_TOKEN"
bin/gateway -config configs/gateway.quickstart.yaml "$@" &
pids+=($!)
# Whichever exits first (a port in use, a bad flag) ends the demo.
wait -n "${pids[@]}"
