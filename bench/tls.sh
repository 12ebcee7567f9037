#!/usr/bin/env bash
# bench/tls.sh: new TLS handshakes per second and HTTP/2 requests per second
# through linkgate and through nginx, the same ECDSA P-256 certificate on
# both, in front of the same demo service, all on loopback. Rounds are
# interleaved (linkgate, nginx, linkgate, ...) so that a noisy neighbour
# hurts both alike; the summary gives each round and the median.
# Needs nginx, h2load (nghttp2-client) and openssl. Not a test: bounded in
# time (ROUNDS x 2 targets x 2 phases x DURATION).
#
# Environment (defaults in brackets):
#   ROUNDS [3]  DURATION [5]  (seconds)  HS_WORKERS [8]  H2_CONNS [4]  H2_STREAMS [32]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
HS_WORKERS=${HS_WORKERS:-8}
H2_CONNS=${H2_CONNS:-4}
H2_STREAMS=${H2_STREAMS:-32}
((DURATION <= 30 && ROUNDS <= 10)) || { echo "bench: DURATION <= 30 and ROUNDS <= 10" >&2; exit 2; }
for c in nginx h2load openssl; do command -v $c >/dev/null || { echo "bench: $c is not installed" >&2; exit 2; }; done

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

go build -o "$work/gateway" ./cmd/gateway
go build -o "$work/tinyurl" ./cmd/tinyurl
go build -o "$work/handshakes" ./bench/handshakes

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
	-keyout "$work/key.pem" -out "$work/cert.pem" -subj /CN=bench.test \
	-addext subjectAltName=DNS:bench.test,IP:127.0.0.1 2>/dev/null

"$work/tinyurl" -listen 127.0.0.1:18081 -links "" >/dev/null &
pids+=($!)

cat >"$work/gateway.yaml" <<YAML
server:
  listen: 127.0.0.1:18443
  tls: {cert_file: $work/cert.pem, key_file: $work/key.pem}
admin:
  listen: 127.0.0.1:19090
upstream:
  targets: [http://127.0.0.1:18081]
analytics:
  enabled: false
YAML
"$work/gateway" -config "$work/gateway.yaml" -log-level warn >"$work/gateway.log" 2>&1 &
pids+=($!)

mkdir -p "$work/nginx"
cat >"$work/nginx.conf" <<NGINX
worker_processes 2;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/nginx/body;
  proxy_temp_path $work/nginx/proxy;
  fastcgi_temp_path $work/nginx/fastcgi;
  uwsgi_temp_path $work/nginx/uwsgi;
  scgi_temp_path $work/nginx/scgi;
  upstream tinyurl { server 127.0.0.1:18081; keepalive 64; }
  server {
    listen 127.0.0.1:18444 ssl http2;
    ssl_certificate $work/cert.pem;
    ssl_certificate_key $work/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache off;
    ssl_session_tickets off;
    keepalive_requests 10000000;  # nginx closes a connection after 1000 requests by default; h2load -D does not reconnect
    location / {
      proxy_pass http://tinyurl;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$host;
      proxy_set_header X-Forwarded-For \$remote_addr;
    }
  }
}
NGINX
nginx -c "$work/nginx.conf" -g 'daemon off;' &
pids+=($!)

for port in 18081 18443 18444; do
	for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
done
curl -sk --http2 -o /dev/null -w '%{http_version} %{http_code}\n' https://127.0.0.1:18443/go | grep -q '^2 302' || { echo "bench: linkgate does not answer over h2"; cat "$work/gateway.log"; exit 1; }
curl -sk --http2 -o /dev/null -w '%{http_version} %{http_code}\n' https://127.0.0.1:18444/go | grep -q '^2 302' || { echo "bench: nginx does not answer over h2"; exit 1; }

declare -A hs h2
for round in $(seq "$ROUNDS"); do
	for target in linkgate nginx; do
		port=18443; [ $target = nginx ] && port=18444
		hs[$target,$round]=$("$work/handshakes" -addr 127.0.0.1:$port -c "$HS_WORKERS" -d "${DURATION}s" -ca "$work/cert.pem" | awk '{print $6}')
		out=$(h2load -c "$H2_CONNS" -m "$H2_STREAMS" -D "$DURATION" --warm-up-time=1 https://127.0.0.1:$port/go 2>&1)
		echo "$out" | grep -q 'Application protocol: h2' || { echo "bench: $target: not h2"; echo "$out"; exit 1; }
		echo "$out" | grep -q ' 0 failed, 0 errored' || { echo "bench: $target: failed requests"; echo "$out" | grep requests:; }
		h2[$target,$round]=$(echo "$out" | awk '/^finished in/ {print int($4)}')
		[ -n "${BENCH_DEBUG:-}" ] && echo "$out"
		echo "round $round $target: ${hs[$target,$round]} handshakes/s, ${h2[$target,$round]} h2 requests/s"
	done
done
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : int((a[NR/2]+a[NR/2+1])/2))}'; }
echo
printf '%-9s %18s %18s\n' target "handshakes/s" "h2 requests/s"
for target in linkgate nginx; do
	m1=$(for r in $(seq "$ROUNDS"); do echo "${hs[$target,$r]}"; done | median)
	m2=$(for r in $(seq "$ROUNDS"); do echo "${h2[$target,$r]}"; done | median)
	printf '%-9s %18s %18s\n' "$target" "$m1" "$m2"
done
