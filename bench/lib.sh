# bench/lib.sh: what the load scripts share; sourced by run.sh,
# protocols.sh, h3.sh and h3loss.sh.

die() { echo "bench: $*" >&2; exit 1; }

# free_port prints a loopback port nobody listens on (and that this script
# has not handed out yet).
used=" "
free_port() {
	local p i
	for ((i = 0; i < 200; i++)); do
		p=$((20000 + RANDOM % 12000)) # below Linux's ephemeral ports (32768-), which outgoing connections take
		[[ $used == *" $p "* ]] && continue
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			used+="$p "
			echo "$p"
			return
		fi
	done
	die "no free port found"
}

# start NAME CMD...: runs CMD in the background, logging to $tmp/NAME.log;
# its pid is last_pid, and is added to pids (which the script stops at
# exit) and to pidof_ (target → the pids whose CPU is the proxy's).
declare -A pidof_
start() {
	local name=$1
	shift
	"$@" >"$tmp/$name.log" 2>&1 &
	pids+=($!)
	last_pid=$!
	pidof_[$name]=$!
}

# wait_port PID PORT: until PORT accepts connections, at most 15 s, while
# PID runs.
wait_port() {
	local i
	for ((i = 0; i < 150; i++)); do
		kill -0 "$1" 2>/dev/null || die "process $1 exited before listening on $2"
		(exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null && return
		sleep 0.1
	done
	die "nothing listens on 127.0.0.1:$2 after 15s"
}

# ticks PID...: user+system CPU clock ticks of the processes and of their
# children (nginx's workers), from /proc.
ticks() {
	local u s
	read -r u s < <(split_ticks "$@")
	echo $((u + s))
}

# split_ticks PID...: the same, as "user system".
split_ticks() {
	local pid u=0 s=0 f c
	for pid in "$@"; do
		for f in /proc/"$pid"/stat $(grep -l "^[0-9]* ([^)]*) [A-Z] $pid " /proc/[0-9]*/stat 2>/dev/null); do
			[[ -r $f ]] || continue
			c=$(awk '{sub(/^.*\) /, ""); print $12, $13}' "$f" 2>/dev/null) || continue
			[[ -n $c ]] || continue
			u=$((u + ${c% *})) s=$((s + ${c#* }))
		done
	done
	echo "$u $s"
}

# nginx_config DIR UPSTREAM_PORT SERVER LOCATION: nginx as an operator would
# put it in front: a kept-alive upstream pool, the forwarding headers, and
# limit_req on the client address at a rate the benchmark never reaches (the
# check is what is measured, as for the gateway's IP rule). SERVER holds the
# server block's own directives (listen...), LOCATION more of the location's;
# DIR its folders; HTTP, optional, more of the http block's (proxy_cache_path).
nginx_config() {
	cat <<EOF
worker_processes auto;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $1/body;
  proxy_temp_path $1/proxy;
  fastcgi_temp_path $1/fastcgi;
  uwsgi_temp_path $1/uwsgi;
  scgi_temp_path $1/scgi;
  limit_req_zone \$binary_remote_addr zone=ip:10m rate=1000000r/s;
${5:-}
  upstream tinyurl {
    server 127.0.0.1:$2;
    keepalive 1024;
  }
  server {
$3    location / {
      limit_req zone=ip burst=1000000 nodelay;
      proxy_pass http://tinyurl;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$host;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Real-IP \$remote_addr;
      proxy_set_header X-Forwarded-Proto \$scheme;
$4    }
  }
}
EOF
}

# rounds_awk: the awk functions the summaries read their rounds with. A
# list is the values of a target's rounds, space-separated: sort (in
# place, insertion sort: a list is a few rounds), median ("-" where the
# rounds measured nothing) and spread (lowest–highest).
rounds_awk='
	function sort(list, a,   k, i, j, v) {
		k = split(list, a, " ")
		for (i = 2; i <= k; i++) { v = a[i]; for (j = i - 1; j > 0 && a[j] + 0 > v + 0; j--) a[j + 1] = a[j]; a[j + 1] = v }
		return k
	}
	function median(list,   a, k, m) {
		k = sort(list, a)
		if (k == 0 || a[1] == "-") return "-"
		m = int((k + 1) / 2)
		return k % 2 ? a[m] : (a[m] + a[m + 1]) / 2
	}
	function spread(list,   a, k) { k = sort(list, a); return a[1] "–" a[k] }
'

# h3_gateway WORK ADDR: in WORK, a self-signed certificate for ADDR (and
# bench.test), and gateway.yaml: a gateway on ADDR:18443 serving HTTP/2
# and HTTP/3 with it, in front of the demo service on 127.0.0.1:18081,
# its admin API on 127.0.0.1:19090, analytics off.
h3_gateway() {
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
		-keyout "$1/key.pem" -out "$1/cert.pem" -subj /CN=bench.test \
		-addext subjectAltName=DNS:bench.test,IP:"$2" 2>/dev/null
	cat >"$1/gateway.yaml" <<YAML
server:
  listen: $2:18443
  http3: true
  tls: {cert_file: $1/cert.pem, key_file: $1/key.pem}
admin:
  listen: 127.0.0.1:19090
upstream:
  targets: [http://127.0.0.1:18081]
analytics:
  enabled: false
YAML
}
