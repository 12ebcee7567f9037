#!/usr/bin/env bash
# bench/run.sh: requests/s and latency of the demo service directly, through
# the bare httputil.ReverseProxy floor (bench/floor) and through the gateway,
# all on loopback. Runs are interleaved (direct, floor, gateway, direct, ...)
# and repeated, so that a noisy neighbour hurts every target alike; the table
# shows the median of the rounds. Two phases: "load" (CONNS connections, the
# servers saturated: requests/s) and "latency" (one connection, nothing
# queued: what each hop adds to a request's time). See bench/README.md.
#
# Environment (defaults in brackets):
#   ROUNDS [3]  CONNS [32]  THREADS [2]  DURATION [5s]  WARMUP [1s]
#   LATENCY [on]                      on | off: the one-connection phase
#   BENCH_PATH [/go]                  a redirect, so analytics and redirect_ip apply
#   BENCH_RULES [none]                none | example (the example config's rules)
#   BENCH_ANALYTICS [off]             off | on (embedded store in a temp dir)
#   BENCH_TARGETS [direct floor gateway]
#   GATEWAY_BIN [built from ./cmd/gateway]   a gateway binary to measure instead
#   RESULTS_DIR [bench/results/TIMESTAMP]   raw wrk output and the summary
set -euo pipefail

ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-32}
THREADS=${THREADS:-2}
DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-1s}
BENCH_PATH=${BENCH_PATH:-/go}
BENCH_RULES=${BENCH_RULES:-none}
BENCH_ANALYTICS=${BENCH_ANALYTICS:-off}
BENCH_TARGETS=${BENCH_TARGETS:-direct floor gateway}
LATENCY=${LATENCY:-on}

die() { echo "bench: $*" >&2; exit 1; }

# Bounds: this is a loopback benchmark on a shared machine, not a soak test.
seconds() { # 5s | 2m | 5 → seconds
	case $1 in
	*[0-9]s) echo "${1%s}" ;;
	*[0-9]m) echo $((${1%m} * 60)) ;;
	*[0-9]) echo "$1" ;;
	*) return 1 ;;
	esac
}
for v in ROUNDS CONNS THREADS; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v=${!v}: want a positive whole number"
done
dur=$(seconds "$DURATION") || die "DURATION=$DURATION: want like 5s"
warm=$(seconds "$WARMUP") || die "WARMUP=$WARMUP: want like 1s"
((dur >= 1 && dur <= 60)) || die "DURATION=$DURATION: keep it between 1s and 60s"
((warm <= 10)) || die "WARMUP=$WARMUP: at most 10s"
((ROUNDS <= 20)) || die "ROUNDS=$ROUNDS: at most 20"
((CONNS <= 1024)) || die "CONNS=$CONNS: at most 1024"
((THREADS <= CONNS)) || die "THREADS=$THREADS: more threads than connections"
[[ $BENCH_RULES == none || $BENCH_RULES == example ]] || die "BENCH_RULES=$BENCH_RULES: want none or example"
[[ $BENCH_ANALYTICS == off || $BENCH_ANALYTICS == on ]] || die "BENCH_ANALYTICS=$BENCH_ANALYTICS: want off or on"
[[ $LATENCY == on || $LATENCY == off ]] || die "LATENCY=$LATENCY: want on or off"
[[ $BENCH_PATH == /* ]] || die "BENCH_PATH=$BENCH_PATH: want a path starting with /"
targets=()
for t in $BENCH_TARGETS; do
	case $t in direct | floor | gateway) targets+=("$t") ;; *) die "BENCH_TARGETS: unknown target $t" ;; esac
done
((${#targets[@]} > 0)) || die "BENCH_TARGETS is empty"
want() { [[ " ${targets[*]} " == *" $1 "* ]]; }

cd "$(dirname "$0")/.."
command -v go >/dev/null || die "go is not installed"
if ! command -v wrk >/dev/null; then
	echo "bench: installing wrk from Debian" >&2
	sudo=""
	if [[ $(id -u) != 0 ]]; then
		command -v sudo >/dev/null || die "wrk is missing and this is not root: apt-get install wrk"
		sudo=sudo
	fi
	$sudo apt-get update -qq >&2
	$sudo apt-get install -y -qq wrk >&2
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/linkgate-bench.XXXXXX")
pids=()
cleanup() {
	local pid
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "bench: building into $tmp" >&2
pkgs=(./cmd/tinyurl ./bench/floor)
gateway_bin=$tmp/gateway
if want gateway; then
	if [[ -n ${GATEWAY_BIN:-} ]]; then
		[[ -x $GATEWAY_BIN ]] || die "GATEWAY_BIN=$GATEWAY_BIN is not an executable"
		gateway_bin=$GATEWAY_BIN
	else
		pkgs+=(./cmd/gateway)
	fi
fi
go build -o "$tmp/" "${pkgs[@]}"

# free_port prints a loopback port nobody listens on (and that this script
# has not handed out yet).
used=" "
free_port() {
	local p i
	for ((i = 0; i < 200; i++)); do
		p=$((20000 + RANDOM % 40000))
		[[ $used == *" $p "* ]] && continue
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			used+="$p "
			echo "$p"
			return
		fi
	done
	die "no free port found"
}

# http_get PORT PATH prints the response (headers and body) without curl.
http_get() (
	exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
	printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' "$2" >&3
	timeout 5 cat <&3 || true
)

# wait_ready NAME PID PORT [PATH]: until PORT answers (PATH with a 2xx), at most 15 s.
wait_ready() {
	local name=$1 pid=$2 port=$3 path=${4:-} i
	for ((i = 0; i < 150; i++)); do
		kill -0 "$pid" 2>/dev/null || { cat "$tmp/$name.log" >&2; die "$name exited"; }
		if [[ -z $path ]]; then
			(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return
		elif http_get "$port" "$path" 2>/dev/null | head -1 | grep -q ' 2[0-9][0-9] '; then
			return
		fi
		sleep 0.1
	done
	cat "$tmp/$name.log" >&2
	die "$name not ready on 127.0.0.1:$port${path} after 15s"
}

start() { # start NAME CMD...: runs CMD in the background, logging to $tmp/NAME.log
	local name=$1
	shift
	"$@" >"$tmp/$name.log" 2>&1 &
	pids+=($!)
	last_pid=$!
}

up_port=$(free_port)
start tinyurl "$tmp/tinyurl" -listen "127.0.0.1:$up_port"
wait_ready tinyurl "$last_pid" "$up_port" /healthz
declare -A url
url[direct]="http://127.0.0.1:$up_port$BENCH_PATH"

if want floor; then
	floor_port=$(free_port)
	start floor "$tmp/floor" -listen "127.0.0.1:$floor_port" -target "http://127.0.0.1:$up_port"
	wait_ready floor "$last_pid" "$floor_port"
	url[floor]="http://127.0.0.1:$floor_port$BENCH_PATH"
fi

if want gateway; then
	gw_port=$(free_port)
	admin_port=$(free_port)
	cfg=$tmp/gateway.yaml
	cat >"$cfg" <<EOF
server:
  listen: 127.0.0.1:$gw_port
  trusted_proxies: [127.0.0.1/32]
admin:
  listen: 127.0.0.1:$admin_port
upstream:
  targets: [http://127.0.0.1:$up_port]
  health_check: {path: /healthz, interval: 5s}
limiter:
  store: memory
EOF
	if [[ $BENCH_RULES == example ]]; then
		# The example config's rules, as they stand.
		awk '/^rules:/ {on = 1; print; next} on && /^[^ #-]/ {on = 0} on' configs/gateway.example.yaml >>"$cfg"
	fi
	analytics_enabled=false
	[[ $BENCH_ANALYTICS == on ]] && analytics_enabled=true
	cat >>"$cfg" <<EOF
analytics:
  enabled: $analytics_enabled
  store: embedded
  embedded:
    path: $tmp/analytics
  flush_interval: 10s
EOF
	"$gateway_bin" check-config "$cfg" >/dev/null || { cat "$cfg" >&2; die "generated gateway config is invalid"; }
	start gateway "$gateway_bin" -config "$cfg"
	wait_ready gateway "$last_pid" "$admin_port" /readyz
	url[gateway]="http://127.0.0.1:$gw_port$BENCH_PATH"
fi

# Every target must answer the path with the same status before timing it.
for t in "${targets[@]}"; do
	port=${url[$t]#http://127.0.0.1:}
	port=${port%%/*}
	status=$(http_get "$port" "$BENCH_PATH" | head -1 | tr -d '\r')
	echo "bench: $t ${url[$t]}: $status" >&2
	[[ $status == *" 2"[0-9][0-9]* || $status == *" 3"[0-9][0-9]* ]] || die "$t answers $BENCH_PATH with '$status'"
done

opened() { # the gateway's upstream connections so far
	http_get "$admin_port" /metrics | awk '/^linkgate_upstream_connections_opened_total/ {printf "%d", $2; found = 1} END {if (!found) print "?"}'
}

results=${RESULTS_DIR:-bench/results/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$results"
if want gateway; then cp "$cfg" "$results/gateway.yaml"; fi

if ((warm > 0)); then
	for t in "${targets[@]}"; do
		wrk -t"$THREADS" -c"$CONNS" -d"${warm}s" "${url[$t]}" >/dev/null
	done
fi
opened_before=?
if want gateway; then opened_before=$(opened); fi

# to_ms turns wrk's 123.45us / 1.23ms / 1.01s into milliseconds.
to_ms='function ms(v) { if (v ~ /us$/) return substr(v, 1, length(v) - 2) / 1000; if (v ~ /ms$/) return substr(v, 1, length(v) - 2) + 0; if (v ~ /s$/) return substr(v, 1, length(v) - 1) * 1000; return v }'
: >"$tmp/rows"
n=${#targets[@]}
# run_phase PHASE THREADS CONNS: ROUNDS interleaved rounds of every target.
run_phase() {
	local phase=$1 threads=$2 conns=$3 r i t out
	for ((r = 1; r <= ROUNDS; r++)); do
		for ((i = 0; i < n; i++)); do
			t=${targets[$(((i + r - 1) % n))]} # rotate the order so no target always runs first
			out=$results/$phase.$t.round$r.txt
			wrk -t"$threads" -c"$conns" -d"${dur}s" --latency "${url[$t]}" >"$out"
			awk -v ph="$phase" -v t="$t" -v r="$r" "$to_ms"'
				/^ +50%/ {p50 = ms($2)} /^ +99%/ {p99 = ms($2)}
				/^Requests\/sec:/ {rps = $2}
				/Non-2xx or 3xx responses:/ {bad += $NF}
				/Socket errors:/ {gsub(",", ""); bad += $4 + $6 + $8 + $10}
				END {printf "%s %s %d %.0f %.3f %.3f %d\n", ph, t, r, rps, p50, p99, bad}' "$out" >>"$tmp/rows"
			echo "bench: $phase round $r/$ROUNDS $t: $(tail -1 "$tmp/rows" | awk '{printf "%s req/s, p50 %s ms, p99 %s ms, errors %s", $4, $5, $6, $7}')" >&2
		done
	done
}
run_phase load "$THREADS" "$CONNS"
opened_after=?
if want gateway; then opened_after=$(opened); fi
if [[ $LATENCY == on ]]; then run_phase latency 1 1; fi

{
	echo
	echo "linkgate bench: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, wrk -t$THREADS -c$CONNS -d${dur}s GET $BENCH_PATH, $ROUNDS rounds interleaved"
	echo "gateway: rules=$BENCH_RULES analytics=$BENCH_ANALYTICS"
	echo
	awk '
		function median(list,   a, k, m, i, j, v) {
			k = split(list, a, " ")
			# insertion sort: k is the number of rounds
			for (i = 2; i <= k; i++) { v = a[i]; for (j = i - 1; j > 0 && a[j] > v; j--) a[j + 1] = a[j]; a[j + 1] = v }
			m = int((k + 1) / 2)
			return k % 2 ? a[m] : (a[m] + a[m + 1]) / 2
		}
		{ k = $1 SUBSEP $2
		  if (!(k in rps)) order[++n] = k
		  rps[k] = rps[k] " " $4; p50[k] = p50[k] " " $5; p99[k] = p99[k] " " $6; bad[k] += $7 }
		END {
			printf "%-8s %-8s %12s %9s %9s %7s   %s\n", "phase", "target", "req/s", "p50 ms", "p99 ms", "errors", "req/s by round"
			for (i = 1; i <= n; i++) {
				k = order[i]; split(k, pt, SUBSEP); R[k] = median(rps[k]); P[k] = median(p50[k])
				printf "%-8s %-8s %12.0f %9.3f %9.3f %7d  %s\n", pt[1], pt[2], R[k], P[k], median(p99[k]), bad[k], rps[k]
			}
			print ""
			g = "load" SUBSEP "gateway"; f = "load" SUBSEP "floor"; d = "load" SUBSEP "direct"
			if ((g in R) && (f in R) && R[f] > 0)
				printf "gateway/floor req/s (load):      %.3f  (goal >= 0.85; >= 0.80 with rules or analytics)\n", R[g] / R[f]
			if ((f in R) && (d in R) && R[d] > 0)
				printf "floor/direct req/s (load):       %.3f\n", R[f] / R[d]
			# Added latency from the one-connection phase when it ran: under
			# load p50 is mostly queueing behind the other connections.
			ph = ("latency" SUBSEP "direct") in P ? "latency" : "load"
			g = ph SUBSEP "gateway"; f = ph SUBSEP "floor"; d = ph SUBSEP "direct"
			if ((g in P) && (d in P))
				printf "gateway - direct p50 (%s):  %+.3f ms  (goal < 0.3)\n", ph, P[g] - P[d]
			if ((f in P) && (d in P))
				printf "floor - direct p50 (%s):    %+.3f ms\n", ph, P[f] - P[d]
		}' "$tmp/rows"
	if want gateway; then
		if [[ $opened_before == "?" || $opened_after == "?" ]]; then
			echo "gateway upstream connections opened: unknown (no linkgate_upstream_connections_opened_total on /metrics)"
		else
			echo "gateway upstream connections opened during the $ROUNDS timed load runs: $((opened_after - opened_before)) (client connections: $CONNS; $opened_after since start, warm-up and health checks included)"
		fi
	fi
} | tee "$results/summary.txt"
echo "bench: raw wrk output in $results" >&2
