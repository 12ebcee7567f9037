package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/internal/testkit"
)

// TestMeasureHTTP2Abuse measures, in one run, rapid reset (6 s at most)
// and an empty CONTINUATION flood (10 s at most) against this build of
// the gateway, an earlier build when LINKGATE_MEASURE_H2_BEFORE names its
// binary, and nginx when it is installed, each over TLS with the same
// certificate in front of the same upstream: the time to the GOAWAY and
// its code, the streams or frames the client sent until then, the time
// to the close, the server's CPU over the attack (its process and its
// children), and the connections the upstream accepted meanwhile. The
// figures of docs/tls-and-fleets.md. A measurement, run by hand (without
// -race):
// LINKGATE_MEASURE_H2=1 go test -run TestMeasureHTTP2Abuse -v ./cmd/gateway/
// It is one long function as a script is: set the servers up, run each
// attack on each, print a line.
func TestMeasureHTTP2Abuse(t *testing.T) {
	if os.Getenv("LINKGATE_MEASURE_H2") == "" {
		t.Skip("a measurement of about a minute: set LINKGATE_MEASURE_H2=1")
	}
	up, upConns := testkit.Dialed(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("hello from the upstream\n"))
	})
	ca := edgetest.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile, _ := ca.WritePair(t, dir, "short.test", "127.0.0.1")
	cfg := strings.Replace(testkit.BaseConfig(up.URL), "  shutdown_timeout: 10s\n",
		fmt.Sprintf("  shutdown_timeout: 10s\n  tls: {cert_file: %s, key_file: %s}\n", certFile, keyFile), 1)
	cfgFile := filepath.Join(dir, "gateway.yaml")
	testkit.WriteFile(t, cfgFile, cfg)

	type target struct {
		name, addr string
		pid        int
	}
	var targets []target
	start := func(name, binary string) {
		p := startProcess(t, []string{tokenEnv}, []string{"gateway", "admin"}, binary, "-config", cfgFile, "-log-format", "json")
		targets = append(targets, target{name, strings.TrimPrefix(p.url("gateway", ""), "http://"), p.cmd.Process.Pid})
	}
	start("linkgate", bin.gateway)
	if before := os.Getenv("LINKGATE_MEASURE_H2_BEFORE"); before != "" {
		start("linkgate before", before)
	}
	if nginx, err := exec.LookPath("nginx"); err == nil {
		addr, pid := startNginx(t, nginx, dir, certFile, keyFile, strings.TrimPrefix(up.URL, "http://"))
		targets = append(targets, target{"nginx", addr, pid})
	} else {
		t.Logf("nginx is not installed: measured without it")
	}
	client := &tls.Config{RootCAs: ca.Pool(), ServerName: "short.test"}

	for _, tg := range targets {
		for _, attack := range []struct {
			name  string
			limit time.Duration
			first func(fr *http2.Framer, block []byte) error
			unit  func(fr *http2.Framer, block []byte, i int) error
		}{
			{"rapid reset", 6 * time.Second, nil, func(fr *http2.Framer, block []byte, i int) error {
				stream := uint32(2*i + 1)
				if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
					return err
				}
				return fr.WriteRSTStream(stream, http2.ErrCodeCancel)
			}},
			{"empty CONTINUATION", 10 * time.Second, func(fr *http2.Framer, block []byte) error {
				return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndStream: true})
			}, func(fr *http2.Framer, block []byte, i int) error { return fr.WriteContinuation(1, false, nil) }},
		} {
			h, err := testkit.DialH2(tg.addr, client)
			if err != nil {
				t.Fatalf("%s: %v", tg.name, err)
			}
			block := h.Block("/attack")
			if attack.first != nil {
				h.Send(func(fr *http2.Framer) error { return attack.first(fr, block) })
			}
			conns0, cpu0, t0 := upConns.Load(), cpuOfTree(t, tg.pid), time.Now()
			i := 0
			sent := h.Flood(attack.limit, func(fr *http2.Framer) error {
				i++
				return attack.unit(fr, block, i-1)
			})
			stopped := time.Since(t0)
			gw, gotGoAway := h.GoAway()
			select {
			case <-h.Done():
			case <-time.After(3 * time.Second):
			}
			ended, _, closed := h.Ended()
			cpu := cpuOfTree(t, tg.pid) - cpu0
			h.Close()
			goaway, closing := "none", "open after the attack"
			if gotGoAway {
				goaway = fmt.Sprintf("%v after %v, last stream %d", gw.Code, gw.At.Sub(t0).Round(time.Millisecond), gw.LastStream)
			}
			if closed {
				closing = fmt.Sprintf("closed after %v", ended.Sub(t0).Round(time.Millisecond))
			}
			t.Logf("%-16s %-18s GOAWAY: %s; %s; %d sent in %v; server CPU %v; upstream connections opened %d",
				tg.name, attack.name, goaway, closing, sent, stopped.Round(time.Millisecond), cpu, upConns.Load()-conns0)
		}
	}
}

// startNginx runs nginx over TLS with the certificate, HTTP/2 on, in front
// of upstream, its settings otherwise Debian's defaults (keepalive_requests
// 1000, http2_max_concurrent_streams 128), and returns its address and
// master's pid.
func startNginx(t *testing.T, nginx, dir, certFile, keyFile, upstream string) (string, int) {
	t.Helper()
	addr := testkit.FreeAddr(t)
	work := filepath.Join(dir, "nginx")
	os.MkdirAll(work, 0o755)
	conf := fmt.Sprintf(`worker_processes 2;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  upstream up { server %[2]s; keepalive 64; }
  server {
    listen %[3]s ssl http2;
    ssl_certificate %[4]s;
    ssl_certificate_key %[5]s;
    location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
`, work, upstream, addr, certFile, keyFile)
	confFile := filepath.Join(work, "nginx.conf")
	testkit.WriteFile(t, confFile, conf)
	cmd := exec.Command(nginx, "-c", confFile, "-g", "daemon off;")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	testkit.Eventually(t, 10*time.Second, "nginx listening", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return addr, cmd.Process.Pid
}

// cpuOfTree returns the CPU time process pid and its children used so far.
func cpuOfTree(t *testing.T, pid int) time.Duration {
	total := cpuOf(t, pid)
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		if f, ok := procStat(p); ok && f[1] == strconv.Itoa(pid) {
			total += statCPU(f)
		}
	}
	return total
}
