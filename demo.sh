#!/usr/bin/env bash
# Starts the demo tiny-URL service on 127.0.0.1:8081 and the gateway in front of
# it on 127.0.0.1:8080 (admin on 127.0.0.1:9090), with the in-process limiter and
# the embedded analytics store under ./data; the links made with POST /shorten
# are kept in ./data/tinyurl/links.json. Ctrl-C (or SIGTERM to this script)
# stops both. Extra arguments go to the gateway (-log-format json, ...).
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p bin
# The revision for "gateway version", where Go records none itself (a git
# worktree, or -buildvcs=false in the environment).
go build -ldflags "-X main.revision=$(git rev-parse HEAD 2>/dev/null || true)" -o bin/ ./cmd/gateway ./cmd/tinyurl
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

bin/tinyurl -listen 127.0.0.1:8081 -links data/tinyurl/links.json &
pids+=($!)
echo "demo: admin token is $LINKGATE_ADMIN_TOKEN"
bin/gateway -config configs/gateway.quickstart.yaml "$@" &
pids+=($!)
# Say where to go once the gateway is ready (an upstream is healthy), for up
# to 30 s; without curl, say it at once.
if command -v curl >/dev/null; then
  for _ in $(seq 300); do
    curl -fs -o /dev/null http://127.0.0.1:9090/readyz && break
    kill -0 "${pids[@]}" 2>/dev/null || break
    sleep 0.1
  done
fi
echo "demo: ready: curl -i http://localhost:8080/go; chart page: http://localhost:8080/stats/go"
# Whichever exits first (a port in use, a bad flag) ends the demo.
wait -n "${pids[@]}"
