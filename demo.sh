#!/usr/bin/env bash
# Starts the demo tiny-URL service on 127.0.0.1:8081 and the gateway in front of
# it on 127.0.0.1:8080 (admin on 127.0.0.1:9090), on the quick-start config with
# every analyst feature on: countries (from a database made for the demo's
# addresses), unique visitors and share links (under secrets made for this
# run). It sends a few minutes' worth of made-up visits through the gateway and
# prints the pages to open: a link's, all links', and a share link. The limiter
# is in process, the visits in the embedded store under ./data; the links made
# with POST /shorten are kept in ./data/tinyurl/links.json. Ctrl-C (or SIGTERM
# to this script) stops everything. Extra arguments go to the gateway
# (-log-format json, ...).
#
# Environment, all optional: LINKGATE_ADMIN_TOKEN (demo-admin-token),
# LINKGATE_UNIQUES_SECRET and LINKGATE_SHARE_KEY (new random ones),
# DEMO_DIR (data: the store, the links, the demo's config and database),
# DEMO_BIN (bin), DEMO_LISTEN, DEMO_ADMIN_LISTEN, DEMO_UPSTREAM_LISTEN (the
# addresses above), DEMO_SEED_FOR (10m: how long visits go on after the first
# burst; 0s: none).
set -euo pipefail
cd "$(dirname "$0")"
dir=${DEMO_DIR:-data}
bin=${DEMO_BIN:-bin}
upstream=${DEMO_UPSTREAM_LISTEN:-127.0.0.1:8081}
mkdir -p "$bin"

# A first build downloads the modules and compiles about 450 packages: minutes
# on a small machine. go build -v names each package it compiles (in the order
# of the build, so a slow one holds back the names after it); this counts
# them instead, passes any other line (an error) on, and says every 30 s that
# the build goes on. Without cgo, as the image is built: a cgo build also
# compiles the zstd C library, minutes more (CGO_ENABLED=1 to have it).
echo "demo: building $bin/gateway, $bin/tinyurl and $bin/demo"
export CGO_ENABLED=${CGO_ENABLED:-0}
ticker() {
  trap 'kill "$nap" 2>/dev/null; exit 0' TERM # and its sleep with it
  while :; do
    sleep 30 & nap=$!
    wait "$nap"
    echo "demo: still building ($SECONDS s)"
  done
}
ticker &
ticker=$!
built=0
# The revision for "gateway version", where Go records none itself (a git
# worktree, or -buildvcs=false in the environment).
go build -v -ldflags "-X main.revision=$(git rev-parse HEAD 2>/dev/null || true)" \
  -o "$bin/" ./cmd/gateway ./cmd/tinyurl ./cmd/demo 2>&1 |
  awk '/^go: downloading / { if (!d++) print "demo: downloading the modules (once)"; fflush(); next }
       /^[^ #]+$/ { if (++n % 50 == 0) print "demo: compiled " n " packages"; fflush(); next }
       { print; fflush() }
       END { if (n) print "demo: " n " packages compiled" }' || built=$?
kill "$ticker"
wait "$ticker" || true
[ "$built" = 0 ] || exit "$built"

secret() { od -An -N32 -tx1 /dev/urandom | tr -d ' \n'; }
export LINKGATE_ADMIN_TOKEN=${LINKGATE_ADMIN_TOKEN:-demo-admin-token}
export LINKGATE_UNIQUES_SECRET=${LINKGATE_UNIQUES_SECRET:-$(secret)}
export LINKGATE_SHARE_KEY=${LINKGATE_SHARE_KEY:-$(secret)}
"$bin/demo" prepare -config configs/gateway.quickstart.yaml -dir "$dir" -upstream "http://$upstream" \
  ${DEMO_LISTEN:+-listen "$DEMO_LISTEN"} ${DEMO_ADMIN_LISTEN:+-admin "$DEMO_ADMIN_LISTEN"}

pids=()
seeder=""
stop() {
  trap - INT TERM EXIT
  # SIGTERM: the gateway drains its requests and flushes the visits to the store.
  kill ${seeder:+"$seeder"} "${pids[@]}" 2>/dev/null || true
  wait ${seeder:+"$seeder"} "${pids[@]}" 2>/dev/null || true
}
# Everything runs in the background so that a signal to this script reaches its
# trap at once (bash defers traps while a foreground child runs) and stops all.
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$bin/tinyurl" -listen "$upstream" -links "$dir/tinyurl/links.json" &
pids+=($!)
echo "demo: admin token $LINKGATE_ADMIN_TOKEN (LINKGATE_ADMIN_TOKEN)"
echo "demo: made for this run: LINKGATE_UNIQUES_SECRET=$LINKGATE_UNIQUES_SECRET (unique visitors are hashed under it)"
echo "demo: made for this run: LINKGATE_SHARE_KEY=$LINKGATE_SHARE_KEY (share links are signed with it; a new key ends them)"
"$bin/gateway" -config "$dir/demo/gateway.yaml" "$@" &
pids+=($!)
# Once the gateway is ready: the visits, then the URLs to open.
"$bin/demo" seed -config "$dir/demo/gateway.yaml" -for "${DEMO_SEED_FOR:-10m}" &
seeder=$!
# Whichever of the service and the gateway exits first (a port in use, a bad
# flag) ends the demo; the seeder may end before them.
wait -n "${pids[@]}"
