#!/usr/bin/env bash
# Runs every test of linkgate, and the static checks (go mod tidy -diff,
# go vet, and staticcheck when it is installed: go install
# honnef.co/go/tools/cmd/staticcheck@v0.8.2, which CI runs), installing what
# the tests need when it is missing:
# memcached (limiter store tests), Chromium (the stats chart page test), pebble
# (the ACME test server the TLS edge's tests obtain certificates from), h2load
# (nghttp2-client: a bounded HTTP/2 load in the TLS tests), curl, certutil
# (libnss3-tools: Chromium trusts pebble's root through an NSS database), and a C
# compiler (go test -race needs cgo).
# Cassandra tests run only when CASSANDRA_HOSTS is set (docker compose up -d cassandra).
set -euo pipefail
cd "$(dirname "$0")"

need=()
command -v memcached >/dev/null || need+=(memcached)
command -v chromium >/dev/null || need+=(chromium)
command -v pebble >/dev/null || need+=(pebble)
command -v h2load >/dev/null || need+=(nghttp2-client)
command -v curl >/dev/null || need+=(curl)
command -v certutil >/dev/null || need+=(libnss3-tools)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
if ((${#need[@]})); then
  echo "test.sh: installing ${need[*]}"
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if [ -z "${CASSANDRA_HOSTS:-}" ]; then
  echo "test.sh: CASSANDRA_HOSTS is not set: the Cassandra integration tests will be SKIPPED"
fi
# go.mod and go.sum as go mod tidy would write them: a direct dependency
# marked indirect, or a sum nothing needs, fails here (seconds).
go mod tidy -diff
# Vetted with the race detector's flags, so that vet and the tests share one
# build of every dependency (a cold run compiles them once, not twice); CI
# also runs a plain go vet ./... after this, for the files built without
# the race detector only.
go vet -race ./...
if command -v staticcheck >/dev/null; then
  staticcheck ./...
else
  echo "test.sh: staticcheck is not installed: SKIPPED (go install honnef.co/go/tools/cmd/staticcheck@v0.8.2; CI runs it)"
fi
# A binary built with -race sleeps a second at exit (atexit_sleep_ms=1000)
# so that goroutines still running can report a race: a second per test
# binary. A race during a test fails that test all the same. A GORACE of
# your own still applies, after this.
export GORACE="atexit_sleep_ms=0${GORACE:+ $GORACE}"
# Three packages at a time (go's default is one per core, two here): several
# mostly wait (child processes, lock polls, timeouts) and leave a core idle.
# A -p of your own still applies, after this.
#
# Each test binary gets an hour: a test that hangs then fails with every
# goroutine's stack (go test's -timeout panics with them; the gateway's
# tests also stop a hung test sooner, testkit.Deadline). Not less: on a
# 2-core machine under load (a CPU hog of 4 processes, a second suite, other
# work) the analytics package alone took 30 minutes. The tests stretch their
# waits by the machine's pace, measured from its load (LG_TEST_PACE sets it:
# see internal/testkit/pace.go).
go test -race -count=1 -timeout 60m -p 3 "$@" ./...
