#!/usr/bin/env bash
# bench/protocols.sh: every protocol a client uses, through linkgate and
# through nginx, in one interleaved run on loopback: plain HTTP/1.1 and
# HTTPS/1.1 (wrk, keep-alive), HTTP/2 over TLS (h2load), full TLS
# handshakes and resumed ones (bench/handshakes, a session ticket reused).
# Both proxies serve the same ECDSA P-256 certificate in front of the same
# demo service; tickets on, no session cache, on both (Go's server has no
# cache). Rounds are interleaved (every protocol of every target, then the
# next round, the targets' order rotated) so that a noisy neighbour hurts
# all alike; the summary gives the median of the rounds, their spread and
# the proxy's CPU per request (or per handshake), and the ratios to nginx.
# bench/run.sh runs it when PROTOCOLS is set. Not a test: bounded in time
# (ROUNDS x targets x protocols x DURATION).
#
# Environment (defaults in brackets):
#   ROUNDS [3]  DURATION [5] (seconds)  CONNS [64] (wrk)  H2_CONNS [4]  H2_STREAMS [32]
#   HS_WORKERS [8]  KX [x25519] (the handshakes' key exchange: x25519, or go for X25519MLKEM768)
#   PROTOCOLS [http1 https1 h2 full resumed]
#   TARGETS [nginx gateway gateway-ip]   (and gateway-mc: gateway-ip's limiter on memcached;
#                                     base, base-ip, base-mc: gateway, gateway-ip and gateway-mc
#                                     run from BASE_BIN; floor: bench/floor, Go's own servers
#                                     and crypto/tls with an httputil.ReverseProxy, nothing else;
#                                     direct: the demo service itself, over TLS with the same
#                                     certificate: Go's servers answering, no proxy at all)
#   BASE_BIN [none]                   a second gateway binary (the build before a change), for an
#                                     A/B comparison interleaved in one run
#   RESULTS_DIR [bench/results/protocols-TIMESTAMP]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
DURATION=${DURATION%s}
CONNS=${CONNS:-64}
H2_CONNS=${H2_CONNS:-4}
H2_STREAMS=${H2_STREAMS:-32}
HS_WORKERS=${HS_WORKERS:-8}
KX=${KX:-x25519}
PROTOCOLS=${PROTOCOLS:-http1 https1 h2 full resumed}
TARGETS=${TARGETS:-nginx gateway gateway-ip}
for v in ROUNDS DURATION CONNS H2_CONNS H2_STREAMS HS_WORKERS; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v=${!v}: want a positive whole number"
done
((DURATION <= 30 && ROUNDS <= 10 && CONNS <= 1024 && H2_CONNS * H2_STREAMS <= 4096 && HS_WORKERS <= 64)) ||
	die "DURATION <= 30, ROUNDS <= 10, CONNS <= 1024, H2_CONNS x H2_STREAMS <= 4096, HS_WORKERS <= 64"
protocols=() targets=()
for p in $PROTOCOLS; do
	case $p in http1 | https1 | h2 | full | resumed) protocols+=("$p") ;; *) die "PROTOCOLS: unknown protocol $p" ;; esac
done
for t in $TARGETS; do
	case $t in nginx | direct | floor | gateway | gateway-ip | gateway-mc) targets+=("$t") ;;
	base | base-ip | base-mc) [[ -x ${BASE_BIN:-} ]] || die "TARGETS: $t needs BASE_BIN, a gateway binary"; targets+=("$t") ;;
	*) die "TARGETS: unknown target $t" ;;
	esac
done
for c in nginx wrk h2load openssl go; do command -v $c >/dev/null || [[ -x /usr/sbin/$c ]] || die "$c is not installed (apt-get install nginx wrk nghttp2-client openssl)"; done
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
if [[ " ${targets[*]} " == *-mc" "* ]]; then
	memcached_bin=$(command -v memcached || echo /usr/bin/memcached)
	[[ -x $memcached_bin ]] || die "memcached is not installed"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/linkgate-protocols.XXXXXX")
pids=()
cleanup() {
	local pid
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "bench: building into $tmp" >&2
go build -o "$tmp/" ./cmd/gateway ./cmd/tinyurl ./bench/handshakes ./bench/floor
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
	-keyout "$tmp/key.pem" -out "$tmp/cert.pem" -subj /CN=bench.test \
	-addext subjectAltName=DNS:bench.test,IP:127.0.0.1 2>/dev/null

up_port=$(free_port)
start tinyurl "$tmp/tinyurl" -listen "127.0.0.1:$up_port"
wait_port "$last_pid" "$up_port"
up_pid=$last_pid

declare -A plain_port tls_port plain_pid tls_pid plain_admin tls_admin
if [[ " ${targets[*]} " == *-mc" "* ]]; then
	mc_port=$(free_port)
	mc_user=()
	[[ $(id -u) == 0 ]] && mc_user=(-u nobody) # memcached refuses to run as root
	start memcached "$memcached_bin" "${mc_user[@]}" -l 127.0.0.1 -p "$mc_port" -U 0 -m 64 -t 2
	wait_port "$last_pid" "$mc_port"
fi

# gateway_config NAME PORT ADMIN TLS: gateway: no rules, analytics off;
# gateway-ip: one IP rule on the visit route (at a rate never reached) and
# analytics on (embedded); gateway-mc: the same, limiter on memcached.
gateway_config() {
	local name=$1 port=$2 aport=$3 tls=$4
	cat <<EOF
server:
  listen: 127.0.0.1:$port
  trusted_proxies: [127.0.0.1/32]
EOF
	[[ $tls == on ]] && printf '  tls: {cert_file: %s, key_file: %s}\n' "$tmp/cert.pem" "$tmp/key.pem"
	cat <<EOF
admin:
  listen: 127.0.0.1:$aport
upstream:
  targets: [http://127.0.0.1:$up_port]
  health_check: {path: /healthz, interval: 5s}
EOF
	[[ $name == gateway-mc ]] && printf 'limiter:\n  store: memcached\n  memcached:\n    servers: [127.0.0.1:%s]\n' "$mc_port"
	if [[ $name == gateway ]]; then
		printf 'analytics:\n  enabled: false\n'
		return
	fi
	cat <<EOF
rules:
  - {name: visit_ip, match: {methods: [GET], path: "/{short_key}"}, key: ip, limits: [1000000/s, 100000000/h]}
analytics:
  enabled: true
  store: embedded
  embedded:
    path: $tmp/$name-$tls/analytics
  flush_interval: 10s
EOF
}

for t in "${targets[@]}"; do
	if [[ $t == nginx ]]; then
		plain_port[$t]=$(free_port) tls_port[$t]=$(free_port)
		mkdir -p "$tmp/nginx"
		nginx_config "$tmp/nginx" "$up_port" "    listen 127.0.0.1:${plain_port[$t]};
    listen 127.0.0.1:${tls_port[$t]} ssl http2;
    ssl_certificate $tmp/cert.pem;
    ssl_certificate_key $tmp/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache off;        # Go's server has none: tickets alone on both
    ssl_session_tickets on;
    ssl_session_timeout 24h;      # the gateway's session_tickets.lifetime
    keepalive_requests 10000000;  # 1000 by default; h2load -D does not reconnect
" "" >"$tmp/nginx.conf"
		"$nginx_bin" -t -q -e "$tmp/nginx/error.log" -c "$tmp/nginx.conf" || die "generated nginx config is invalid"
		start nginx "$nginx_bin" -e "$tmp/nginx/error.log" -c "$tmp/nginx.conf" -g 'daemon off;'
		plain_pid[$t]=$last_pid tls_pid[$t]=$last_pid
		wait_port "$last_pid" "${plain_port[$t]}"
		wait_port "$last_pid" "${tls_port[$t]}"
		continue
	fi
	if [[ $t == direct ]]; then
		plain_port[$t]=$up_port plain_pid[$t]=$up_pid tls_port[$t]=$(free_port)
		start tinyurl-tls "$tmp/tinyurl" -listen "127.0.0.1:${tls_port[$t]}" -links "" -cert "$tmp/cert.pem" -key "$tmp/key.pem"
		tls_pid[$t]=$last_pid
		wait_port "$last_pid" "${tls_port[$t]}"
		continue
	fi
	# A gateway (and the floor) is two processes, one on plain HTTP, one
	# on TLS: a listener is one or the other.
	if [[ $t == floor ]]; then
		for tls in off on; do
			port=$(free_port) cert=()
			[[ $tls == on ]] && cert=(-cert "$tmp/cert.pem" -key "$tmp/key.pem")
			start "floor-$tls" "$tmp/floor" -listen "127.0.0.1:$port" -target "http://127.0.0.1:$up_port" "${cert[@]}"
			wait_port "$last_pid" "$port"
			if [[ $tls == on ]]; then tls_port[$t]=$port tls_pid[$t]=$last_pid; else plain_port[$t]=$port plain_pid[$t]=$last_pid; fi
		done
		continue
	fi
	bin=$tmp/gateway config=$t
	[[ $t == base* ]] && bin=$BASE_BIN config=gateway${t#base}
	for tls in off on; do
		port=$(free_port) aport=$(free_port)
		gateway_config "$config" "$port" "$aport" $tls | sed "s|$tmp/$config-|$tmp/$t-|" >"$tmp/$t-$tls.yaml"
		"$bin" check-config "$tmp/$t-$tls.yaml" >/dev/null || { cat "$tmp/$t-$tls.yaml" >&2; die "generated $t config is invalid"; }
		start "$t-$tls" "$bin" -config "$tmp/$t-$tls.yaml" -log-level warn
		wait_port "$last_pid" "$aport"
		if [[ $tls == on ]]; then tls_port[$t]=$port tls_pid[$t]=$last_pid tls_admin[$t]=$aport; else plain_port[$t]=$port plain_pid[$t]=$last_pid plain_admin[$t]=$aport; fi
	done
done

# Every target answers /go with the same redirect on each protocol.
for t in "${targets[@]}"; do
	for u in "--http1.1 http://127.0.0.1:${plain_port[$t]}/go" "--http1.1 https://127.0.0.1:${tls_port[$t]}/go" "--http2 https://127.0.0.1:${tls_port[$t]}/go"; do
		got=$(curl -sk --max-time 10 -o /dev/null -w '%{http_version} %{http_code}' $u) || true
		[[ $got == *" 302" ]] || die "$t: $u answers '$got', want a 302"
	done
done

results=${RESULTS_DIR:-bench/results/protocols-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$results"
cp "$tmp"/*.yaml "$tmp/nginx.conf" "$results/" 2>/dev/null || true
hz=$(getconf CLK_TCK)

# mc_gets TARGET ADMIN_PORT: the memcached get commands a -mc target's
# gateway sent so far (from its /metrics); 0 for the others.
mc_gets() {
	[[ $1 == *-mc ]] || { echo 0; return; }
	curl -s --max-time 5 "http://127.0.0.1:$2/metrics" | awk '/^linkgate_memcached_ops_total\{op="get"\}/ {printf "%d", $2; found = 1} END {if (!found) print 0}'
}

# measure PROTOCOL TARGET OUT: runs the load, prints "count seconds".
measure() {
	local p=$1 t=$2 out=$3
	case $p in
	http1 | https1)
		local u=http://127.0.0.1:${plain_port[$t]}/go
		[[ $p == https1 ]] && u=https://127.0.0.1:${tls_port[$t]}/go
		wrk -t1 -c"$CONNS" -d"${DURATION}s" "$u" >"$out"
		grep -q 'Non-2xx\|Socket errors' "$out" && echo "bench: $p $t: errors: $(grep 'Non-2xx\|Socket errors' "$out")" >&2
		awk '/ requests in / {sub("s,$", "", $4); print $1, $4}' "$out"
		;;
	h2)
		# No --warm-up-time: its second's requests are not counted but its
		# CPU would be, overstating the CPU per request by 1/DURATION.
		h2load -c"$H2_CONNS" -m"$H2_STREAMS" -D "$DURATION" "https://127.0.0.1:${tls_port[$t]}/go" >"$out" 2>&1
		grep -q 'Application protocol: h2' "$out" || die "$t: not h2: $(cat "$out")"
		grep -q ' 0 failed, 0 errored' "$out" || echo "bench: h2 $t: $(grep '^requests:' "$out")" >&2
		awk '/^requests:/ {print $8, '"$DURATION"'}' "$out"
		;;
	full | resumed)
		local r=()
		[[ $p == resumed ]] && r=(-resume)
		"$tmp/handshakes" -addr "127.0.0.1:${tls_port[$t]}" -c "$HS_WORKERS" -d "${DURATION}s" -ca "$tmp/cert.pem" -kx "$KX" "${r[@]}" >"$out"
		awk -v p="$p" -v t="$t" '{if (p == "resumed" && $8 < $2 * 0.99) print "bench: resumed " t ": only " $8 " of " $2 " resumed" > "/dev/stderr"; print $2, '"$DURATION"'}' "$out"
		;;
	esac
}

: >"$tmp/rows"
n=${#targets[@]}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for ((r = 1; r <= ROUNDS; r++)); do
	for p in "${protocols[@]}"; do
		for ((i = 0; i < n; i++)); do
			t=${targets[$(((i + r - 1) % n))]}
			pid=${tls_pid[$t]}
			[[ $p == http1 ]] && pid=${plain_pid[$t]}
			admin=${tls_admin[$t]:-}
			[[ $p == http1 ]] && admin=${plain_admin[$t]:-}
			read -r u0 s0 < <(split_ticks "$pid")
			g0=$(mc_gets "$t" "$admin") up0=$(ticks "$up_pid")
			read -r count secs < <(measure "$p" "$t" "$results/$p.$t.round$r.txt")
			read -r u1 s1 < <(split_ticks "$pid")
			g1=$(mc_gets "$t" "$admin") up1=$(ticks "$up_pid")
			# The upstream's CPU is the demo service's, behind the proxy
			# (none for direct over TLS, which is a service of its own).
			awk -v p="$p" -v t="$t" -v r="$r" -v c="$count" -v s="$secs" -v user=$((u1 - u0)) -v sys=$((s1 - s0)) -v hz="$hz" \
				-v gets=$((g1 - g0)) -v up=$((up1 - up0)) -v upok=$([[ $t == direct && $p != http1 || $p == full || $p == resumed ]] && echo 0 || echo 1) '
				function us(x) { return c > 0 ? x / hz * 1e6 / c : 0 }
				BEGIN {printf "%s %s %d %.0f %.1f %s %.1f %s\n", p, t, r, c / s, us(user + sys), (t ~ /-mc$/ && c > 0 ? sprintf("%.4f", gets / c) : "-"),
					us(user), (upok ? sprintf("%.1f", us(up)) : "-")}' >>"$tmp/rows"
			echo "bench: round $r/$ROUNDS $p $t: $(tail -1 "$tmp/rows" | awk '{printf "%s/s, CPU %s µs each", $4, $5; if ($6 != "-") printf ", %s memcached gets each", $6}') (load $(cut -d' ' -f1 /proc/loadavg))" >&2
		done
	done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

{
	echo
	echo "linkgate protocols: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $ROUNDS rounds × ${DURATION}s interleaved, GET /go"
	echo "http1, https1: wrk -t1 -c$CONNS; h2: h2load -c$H2_CONNS -m$H2_STREAMS; full, resumed: handshakes/s, $HS_WORKERS workers, key exchange $KX"
	echo "load average before / after: $load_before / $load_after"
	echo
	awk "$rounds_awk"'
		{ k = $1 SUBSEP $2; if (!(k in rate)) order[++n] = k; rate[k] = rate[k] " " $4; cpu[k] = cpu[k] " " $5; gets[k] = gets[k] " " $6
		  user[k] = user[k] " " $7; up[k] = up[k] " " $8 }
		END {
			printf "%-8s %-11s %9s %15s %11s %10s %10s %8s %9s\n", "protocol", "target", "per s", "spread", "CPU µs each", "÷ nginx", "CPU ÷ nginx", "of it user", "upstream µs"
			for (i = 1; i <= n; i++) { k = order[i]; R[k] = median(rate[k]); C[k] = median(cpu[k]) }
			for (i = 1; i <= n; i++) {
				k = order[i]; split(k, pt, SUBSEP); x = pt[1] SUBSEP "nginx"
				rr = (x in R) && R[x] > 0 ? sprintf("%.2f", R[k] / R[x]) : "-"
				cc = (x in C) && C[x] > 0 ? sprintf("%.2f", C[k] / C[x]) : "-"
				uu = median(up[k])
				printf "%-8s %-11s %9.0f %15s %11.1f %10s %10s %8.1f %9s\n", pt[1], pt[2], R[k], spread(rate[k]), C[k], rr, cc, median(user[k]), uu == "-" ? "-" : sprintf("%.1f", uu)
			}
			# The limiter on memcached against the in-process one, of one
			# build, and the get commands it sent a request.
			for (i = 1; i <= n; i++) {
				k = order[i]; split(k, pt, SUBSEP)
				if (pt[2] !~ /-mc$/) continue
				ip = substr(pt[2], 1, length(pt[2]) - 3) "-ip"; x = pt[1] SUBSEP ip
				printf "%s %s: memcached gets per request %s (rounds:%s)", pt[1], pt[2], median(gets[k]), gets[k]
				if ((x in R) && R[x] > 0) printf "; req/s ÷ %s: %.2f", ip, R[k] / R[x]
				printf "\n"
			}
		}' "$tmp/rows"
} | tee "$results/summary.txt"
echo "bench: raw output in $results" >&2
