#!/usr/bin/env bash
# Starts the demo tiny-URL service on 127.0.0.1:8081 and the gateway in front of
# it on 127.0.0.1:8080 (admin on 127.0.0.1:9090), with the in-process limiter and
# the embedded analytics store under ./data. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p bin
go build -o bin/ ./cmd/gateway ./cmd/tinyurl
bin/tinyurl -listen 127.0.0.1:8081 &
trap 'kill $! 2>/dev/null' EXIT
export LINKGATE_ADMIN_TOKEN=${LINKGATE_ADMIN_TOKEN:-demo-admin-token}
echo "demo: admin token is $LINKGATE_ADMIN_TOKEN"
bin/gateway -config configs/gateway.quickstart.yaml "$@"
