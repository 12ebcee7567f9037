#!/usr/bin/env bash
# bench/run.sh: requests/s, latency and proxy CPU per request of the demo
# service directly, through nginx with limit_req, through the bare
# httputil.ReverseProxy floor (bench/floor) and through the gateway in
# several configurations, all on loopback; on request also through a bare
# Go relay (bench/relay: what Go itself costs, heads passed untouched). Runs are interleaved (direct,
# nginx, floor, gateway, ..., then the next round in a rotated order) so
# that a noisy neighbour hurts every target alike; the table shows the
# median of the rounds and their spread. Two phases: "load" (CONNS
# connections, the servers saturated: requests/s, p99, CPU) and "latency"
# (one connection, nothing queued: what each hop adds to a request's
# time). See bench/README.md.
#
# Environment (defaults in brackets):
#   ROUNDS [3]  CONNS [64]  THREADS [1]  DURATION [5s]  WARMUP [1s]
#   LATENCY [off]                     on | off: the one-connection phase
#   BENCH_PATH [/go]                  a redirect, so analytics and the rules apply
#   BENCH_RULES [none]                none | example: the rules of the "gateway" target
#   BENCH_ANALYTICS [off]             off | on: analytics of the "gateway" target
#   BENCH_TARGETS [direct nginx floor gateway gateway-ip gateway-mc]   (and relay, nginx-id,
#                                     gateway-cache, nginx-cache: the redirect cached for 5 minutes)
#   GATEWAY_BIN [built from ./cmd/gateway]   a gateway binary to measure instead
#   RESULTS_DIR [bench/results/TIMESTAMP]   raw wrk output and the summary
set -euo pipefail

ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-64}
THREADS=${THREADS:-1}
DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-1s}
BENCH_PATH=${BENCH_PATH:-/go}
BENCH_RULES=${BENCH_RULES:-none}
BENCH_ANALYTICS=${BENCH_ANALYTICS:-off}
BENCH_TARGETS=${BENCH_TARGETS:-direct nginx floor gateway gateway-ip gateway-mc}
LATENCY=${LATENCY:-off}

. "$(dirname "$0")/lib.sh" # die, start, free_port, wait_port, ticks, nginx_config, rounds_awk
if [[ -n ${PROTOCOLS:-} ]]; then
	# Every protocol (HTTPS/1.1, HTTP/2, handshakes too): bench/protocols.sh.
	exec "$(dirname "$0")/protocols.sh"
fi

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
	case $t in direct | nginx | nginx-id | nginx-cache | floor | relay | gateway | gateway-ip | gateway-mc | gateway-cache) targets+=("$t") ;; *) die "BENCH_TARGETS: unknown target $t" ;; esac
done
((${#targets[@]} > 0)) || die "BENCH_TARGETS is empty"
want() { [[ " ${targets[*]} " == *" $1 "* ]]; }
gateways=()
for t in gateway gateway-ip gateway-mc gateway-cache; do
	if want "$t"; then gateways+=("$t"); fi
done

cd "$(dirname "$0")/.."
command -v go >/dev/null || die "go is not installed"
# apt_install PKG CMD: installs Debian's PKG when CMD is missing.
apt_install() {
	command -v "$2" >/dev/null && return
	[[ -x /usr/sbin/$2 || -x /usr/bin/$2 ]] && return
	echo "bench: installing $1 from Debian" >&2
	local sudo=""
	if [[ $(id -u) != 0 ]]; then
		command -v sudo >/dev/null || die "$2 is missing and this is not root: apt-get install $1"
		sudo=sudo
	fi
	$sudo apt-get update -qq >&2
	$sudo apt-get install -y -qq "$1" >&2
}
apt_install wrk wrk
if want nginx || want nginx-id || want nginx-cache; then apt_install nginx nginx; fi
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
memcached_bin=$(command -v memcached || echo /usr/bin/memcached)
if want gateway-mc; then
	apt_install memcached memcached
	memcached_bin=$(command -v memcached || echo /usr/bin/memcached)
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
pkgs=(./cmd/tinyurl ./bench/floor ./bench/relay)
gateway_bin=$tmp/gateway
if ((${#gateways[@]} > 0)); then
	if [[ -n ${GATEWAY_BIN:-} ]]; then
		[[ -x $GATEWAY_BIN ]] || die "GATEWAY_BIN=$GATEWAY_BIN is not an executable"
		gateway_bin=$GATEWAY_BIN
	else
		pkgs+=(./cmd/gateway)
	fi
fi
go build -o "$tmp/" "${pkgs[@]}"

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

if want relay; then
	relay_port=$(free_port)
	start relay "$tmp/relay" -listen "127.0.0.1:$relay_port" -target "127.0.0.1:$up_port"
	wait_ready relay "$last_pid" "$relay_port"
	url[relay]="http://127.0.0.1:$relay_port$BENCH_PATH"
fi

# nginx_target NAME [DIRECTIVE...]: nginx_config (lib.sh) as target NAME;
# each DIRECTIVE is added to its location.
nginx_target() {
	local name=$1 port d extra=""
	shift
	for d in "$@"; do extra+="      $d"$'\n'; done
	port=$(free_port)
	mkdir -p "$tmp/$name"
	nginx_config "$tmp/$name" "$up_port" "    listen 127.0.0.1:$port;"$'\n' "$extra" "$nginx_http_extra" >"$tmp/$name.conf"
	"$nginx_bin" -t -q -e "$tmp/$name/error.log" -c "$tmp/$name.conf" || die "generated $name config is invalid"
	start "$name" "$nginx_bin" -e "$tmp/$name/error.log" -c "$tmp/$name.conf" -g 'daemon off;'
	wait_ready "$name" "$last_pid" "$port"
	url[$name]="http://127.0.0.1:$port$BENCH_PATH"
}
nginx_http_extra=""
if want nginx; then nginx_target nginx; fi
# nginx-cache: the same with proxy_cache keeping the redirects for 5
# minutes over the demo's Cache-Control: no-store, as gateway-cache's
# cache.default_ttl does: one request upstream per key at a time, stale
# answers while the upstream fails.
if want nginx-cache; then
	# nginx started by root runs its workers as nobody, who must reach
	# the cache's folder under $tmp (made 0700 by mktemp) to write it.
	chmod o+x "$tmp"
	nginx_http_extra="  proxy_cache_path $tmp/nginx-cache/cache levels=1:2 keys_zone=links:10m max_size=64m;"
	nginx_target nginx-cache 'proxy_cache links;' 'proxy_ignore_headers Cache-Control Expires;' \
		'proxy_cache_valid 301 302 303 307 308 5m;' 'proxy_cache_valid 404 410 10s;' 'proxy_cache_lock on;' \
		'proxy_cache_use_stale error timeout http_500 http_502 http_503 http_504 updating;'
	nginx_http_extra=""
fi
# nginx-id: the same, forwarding besides what the gateway forwards too: a
# request id (as the gateway's X-Request-ID) and X-Forwarded-Host.
if want nginx-id; then
	nginx_target nginx-id 'proxy_set_header X-Request-ID $request_id;' 'proxy_set_header X-Forwarded-Host $host;'
fi

if want gateway-mc; then
	mc_port=$(free_port)
	mc_user=()
	[[ $(id -u) == 0 ]] && mc_user=(-u nobody) # memcached refuses to run as root
	start memcached "$memcached_bin" "${mc_user[@]}" -l 127.0.0.1 -p "$mc_port" -U 0 -m 64 -t 2
	wait_ready memcached "$last_pid" "$mc_port"
fi

# gateway_config NAME: the generated config of a gateway target.
# gateway: BENCH_RULES and BENCH_ANALYTICS; gateway-ip: one IP rule on the
# visit route and analytics on (embedded); gateway-mc: the same with the
# limiter on memcached; gateway-cache: gateway-ip with the redirects kept
# for 5 minutes (cache.default_ttl, as nginx-cache's proxy_cache_valid).
declare -A admin_port
gateway_config() {
	local name=$1 port=$2 aport=$3 store=memory analytics=false
	[[ $name == gateway-mc ]] && store=memcached
	cat <<EOF
server:
  listen: 127.0.0.1:$port
  trusted_proxies: [127.0.0.1/32]
admin:
  listen: 127.0.0.1:$aport
upstream:
  targets: [http://127.0.0.1:$up_port]
  health_check: {path: /healthz, interval: 5s}
limiter:
  store: $store
EOF
	if [[ $store == memcached ]]; then
		printf '  memcached:\n    servers: [127.0.0.1:%s]\n' "$mc_port"
	fi
	case $name in
	gateway)
		if [[ $BENCH_RULES == example ]]; then
			# The example config's rules, as they stand.
			awk '/^rules:/ {on = 1; print; next} on && /^[^ #-]/ {on = 0} on' configs/gateway.example.yaml
		fi
		[[ $BENCH_ANALYTICS == on ]] && analytics=true
		;;
	*)
		# One IP rule on every visit, at a rate the benchmark never
		# reaches (the check and the count are what is measured).
		cat <<EOF
rules:
  - {name: visit_ip, match: {methods: [GET], path: "/{short_key}"}, key: ip, limits: [1000000/s, 100000000/h]}
EOF
		analytics=true
		;;
	esac
	if [[ $name == gateway-cache ]]; then
		printf 'cache:\n  default_ttl: 5m\n'
	fi
	cat <<EOF
analytics:
  enabled: $analytics
  store: embedded
  embedded:
    path: $tmp/$name/analytics
  flush_interval: 10s
EOF
}
for t in "${gateways[@]}"; do
	port=$(free_port)
	admin_port[$t]=$(free_port)
	cfg=$tmp/$t.yaml
	gateway_config "$t" "$port" "${admin_port[$t]}" >"$cfg"
	"$gateway_bin" check-config "$cfg" >/dev/null || { cat "$cfg" >&2; die "generated $t config is invalid"; }
	start "$t" "$gateway_bin" -config "$cfg"
	wait_ready "$t" "$last_pid" "${admin_port[$t]}" /readyz
	url[$t]="http://127.0.0.1:$port$BENCH_PATH"
done

# Every target must answer the path with the same status before timing it.
for t in "${targets[@]}"; do
	port=${url[$t]#http://127.0.0.1:}
	port=${port%%/*}
	status=$(http_get "$port" "$BENCH_PATH" | head -1 | tr -d '\r')
	echo "bench: $t ${url[$t]}: $status" >&2
	if [[ $status != *" 2"[0-9][0-9]* && $status != *" 3"[0-9][0-9]* ]]; then
		[[ -f $tmp/$t/error.log ]] && tail -5 "$tmp/$t/error.log" >&2
		die "$t answers $BENCH_PATH with '$status'"
	fi
done

opened() { # the upstream connections gateway $1 opened so far
	http_get "${admin_port[$1]}" /metrics | awk '/^linkgate_upstream_connections_opened_total/ {printf "%d", $2; found = 1} END {if (!found) print "?"}'
}
mc_gets() { # the memcached get commands gateway-mc sent so far
	http_get "${admin_port[gateway-mc]}" /metrics | awk '/^linkgate_memcached_ops_total\{op="get"\}/ {printf "%d", $2; found = 1} END {if (!found) print "?"}'
}

hz=$(getconf CLK_TCK)

results=${RESULTS_DIR:-bench/results/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$results"
for t in "${gateways[@]}"; do cp "$tmp/$t.yaml" "$results/$t.yaml"; done
for t in nginx nginx-id; do if want "$t"; then cp "$tmp/$t.conf" "$results/$t.conf"; fi; done

if ((warm > 0)); then
	for t in "${targets[@]}"; do
		wrk -t"$THREADS" -c"$CONNS" -d"${warm}s" "${url[$t]}" >/dev/null
	done
fi
declare -A opened_before opened_after
for t in "${gateways[@]}"; do opened_before[$t]=$(opened "$t"); done
gets_before=? gets_after=?
if want gateway-mc; then gets_before=$(mc_gets); fi

# to_ms turns wrk's 123.45us / 1.23ms / 1.01s into milliseconds.
to_ms='function ms(v) { if (v ~ /us$/) return substr(v, 1, length(v) - 2) / 1000; if (v ~ /ms$/) return substr(v, 1, length(v) - 2) + 0; if (v ~ /s$/) return substr(v, 1, length(v) - 1) * 1000; return v }'
: >"$tmp/rows"
n=${#targets[@]}
# run_phase PHASE THREADS CONNS: ROUNDS interleaved rounds of every target.
run_phase() {
	local phase=$1 threads=$2 conns=$3 r i t out c0 c1 m0 m1 cpu mc
	for ((r = 1; r <= ROUNDS; r++)); do
		for ((i = 0; i < n; i++)); do
			t=${targets[$(((i + r - 1) % n))]} # rotate the order so no target always runs first
			out=$results/$phase.$t.round$r.txt
			c0=0 m0=0
			[[ $t != direct ]] && c0=$(ticks "${pidof_[$t]}")
			[[ $t == gateway-mc ]] && m0=$(ticks "${pidof_[memcached]}")
			wrk -t"$threads" -c"$conns" -d"${dur}s" --latency "${url[$t]}" >"$out"
			cpu=- mc=-
			if [[ $t != direct ]]; then
				c1=$(ticks "${pidof_[$t]}")
				cpu=$((c1 - c0))
			fi
			if [[ $t == gateway-mc ]]; then
				m1=$(ticks "${pidof_[memcached]}")
				mc=$((m1 - m0))
			fi
			awk -v ph="$phase" -v t="$t" -v r="$r" -v cpu="$cpu" -v mc="$mc" -v hz="$hz" "$to_ms"'
				/^ +50%/ {p50 = ms($2)} /^ +99%/ {p99 = ms($2)}
				/^Requests\/sec:/ {rps = $2}
				/ requests in / {reqs = $1}
				/Non-2xx or 3xx responses:/ {bad += $NF}
				/Socket errors:/ {gsub(",", ""); bad += $4 + $6 + $8 + $10}
				function us(ticks) { return ticks == "-" || reqs == 0 ? "-" : sprintf("%.1f", ticks / hz * 1e6 / reqs) }
				END {printf "%s %s %d %.0f %.3f %.3f %d %s %s\n", ph, t, r, rps, p50, p99, bad, us(cpu), us(mc)}' "$out" >>"$tmp/rows"
			echo "bench: $phase round $r/$ROUNDS $t: $(tail -1 "$tmp/rows" | awk '{printf "%s req/s, p50 %s ms, p99 %s ms, errors %s, proxy CPU %s µs/req", $4, $5, $6, $7, $8}') (load $(cut -d' ' -f1 /proc/loadavg))" >&2
		done
	done
}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
run_phase load "$THREADS" "$CONNS"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
for t in "${gateways[@]}"; do opened_after[$t]=$(opened "$t"); done
if want gateway-mc; then gets_after=$(mc_gets); fi
if [[ $LATENCY == on ]]; then run_phase latency 1 1; fi

{
	echo
	echo "linkgate bench: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, wrk -t$THREADS -c$CONNS -d${dur}s GET $BENCH_PATH, $ROUNDS rounds interleaved"
	echo "load average before / after the load phase: $load_before / $load_after"
	echo "gateway: rules=$BENCH_RULES analytics=$BENCH_ANALYTICS; gateway-ip: one IP rule + analytics (embedded); gateway-mc: the same, limiter on memcached"
	echo
	awk "$rounds_awk"'
		{ k = $1 SUBSEP $2
		  if (!(k in rps)) order[++n] = k
		  rps[k] = rps[k] " " $4; p50[k] = p50[k] " " $5; p99[k] = p99[k] " " $6; bad[k] += $7
		  cpu[k] = cpu[k] " " $8; mc[k] = mc[k] " " $9 }
		END {
			printf "%-8s %-11s %9s %15s %9s %9s %7s %11s   %s\n", "phase", "target", "req/s", "spread", "p50 ms", "p99 ms", "errors", "CPU µs/req", "req/s by round"
			for (i = 1; i <= n; i++) {
				k = order[i]; split(k, pt, SUBSEP); R[k] = median(rps[k]); P[k] = median(p50[k]); Q[k] = median(p99[k]); C[k] = median(cpu[k])
				c = C[k]; if (median(mc[k]) != "-") c = c "+" median(mc[k]) "mc"
				printf "%-8s %-11s %9.0f %15s %9.3f %9.3f %7d %11s  %s\n", pt[1], pt[2], R[k], spread(rps[k]), P[k], Q[k], bad[k], c, rps[k]
			}
			print ""
			split("gateway-ip gateway gateway-mc gateway-cache", gs, " ")
			f = "load" SUBSEP "floor"; x = "load" SUBSEP "nginx"; xi = "load" SUBSEP "nginx-id"; d = "load" SUBSEP "direct"
			for (j = 1; j <= 4; j++) {
				g = "load" SUBSEP gs[j]
				if (!(g in R)) continue
				if ((f in R) && R[f] > 0) printf "%-10s / floor req/s:  %.2f\n", gs[j], R[g] / R[f]
				if ((x in R) && R[x] > 0) printf "%-10s / nginx req/s:  %.2f   p99 %.2f× nginx'"'"'s\n", gs[j], R[g] / R[x], (Q[x] > 0 ? Q[g] / Q[x] : 0)
				if ((xi in R) && R[xi] > 0) printf "%-10s / nginx-id req/s: %.2f   p99 %.2f× nginx-id'"'"'s\n", gs[j], R[g] / R[xi], (Q[xi] > 0 ? Q[g] / Q[xi] : 0)
			}
			gc = "load" SUBSEP "gateway-cache"; xc = "load" SUBSEP "nginx-cache"
			if ((gc in R) && (xc in R) && R[xc] > 0) printf "gateway-cache / nginx-cache req/s: %.2f   p99 %.2f× nginx-cache'"'"'s\n", R[gc] / R[xc], (Q[xc] > 0 ? Q[gc] / Q[xc] : 0)
			i = "load" SUBSEP "gateway-ip"; m = "load" SUBSEP "gateway-mc"
			if ((i in R) && (m in R) && R[i] > 0) printf "gateway-mc / gateway-ip req/s: %.2f\n", R[m] / R[i]
			if ((f in R) && (d in R) && R[d] > 0) printf "floor / direct req/s:     %.2f\n", R[f] / R[d]
			y = "load" SUBSEP "relay"
			if ((y in R) && (x in R) && R[x] > 0) printf "relay / nginx req/s:      %.2f\n", R[y] / R[x]
			# Added latency from the one-connection phase when it ran.
			if (("latency" SUBSEP "direct") in P) {
				for (j = 1; j <= n; j++) {
					k = order[j]; split(k, pt, SUBSEP)
					if (pt[1] == "latency" && pt[2] != "direct")
						printf "%-10s - direct p50 (1 connection): %+.3f ms\n", pt[2], P[k] - P["latency" SUBSEP "direct"]
				}
			}
		}' "$tmp/rows"
	for t in "${gateways[@]}"; do
		if [[ ${opened_before[$t]} == "?" || ${opened_after[$t]} == "?" ]]; then
			echo "$t upstream connections opened: unknown (no linkgate_upstream_connections_opened_total on /metrics)"
		else
			echo "$t upstream connections opened during the $ROUNDS timed load runs: $((opened_after[$t] - opened_before[$t])) (client connections: $CONNS)"
		fi
	done
	if want gateway-mc && [[ $gets_before != "?" && $gets_after != "?" ]]; then
		reqs=$(cat "$results"/load.gateway-mc.round*.txt | awk '/ requests in / {n += $1} END {print n + 0}')
		awk -v g=$((gets_after - gets_before)) -v r="$reqs" 'BEGIN {printf "gateway-mc memcached gets per request during the timed load runs: %.3f (%d gets, %d requests)\n", (r > 0 ? g / r : 0), g, r}'
	fi
} | tee "$results/summary.txt"
echo "bench: raw wrk output in $results" >&2
