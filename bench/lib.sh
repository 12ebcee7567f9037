# bench/lib.sh: what the load scripts share; sourced by run.sh and
# protocols.sh.

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
	local pid sum=0 f c
	for pid in "$@"; do
		for f in /proc/"$pid"/stat $(grep -l "^[0-9]* ([^)]*) [A-Z] $pid " /proc/[0-9]*/stat 2>/dev/null); do
			[[ -r $f ]] || continue
			c=$(awk '{sub(/^.*\) /, ""); print $12 + $13}' "$f" 2>/dev/null) || continue
			sum=$((sum + ${c:-0}))
		done
	done
	echo "$sum"
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
