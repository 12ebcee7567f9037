// Command handshakes measures TLS handshakes per second against a server:
// WORKERS goroutines each dial, complete a handshake and close, for a
// bounded duration. Full handshakes by default; with -resume each worker
// first gets a session ticket (reading what the server sends after the
// handshake) and then resumes with it every time (a TLS 1.3 server takes
// a ticket more than once, as Go's and OpenSSL's do), so the figure is
// that of resumed handshakes alone; one that does not resume counts as
// full. bench/protocols.sh runs it against linkgate and nginx in turn.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8443", "host:port of the TLS server (loopback only)")
	name := flag.String("name", "bench.test", "server name sent in the handshake")
	caFile := flag.String("ca", "", "PEM file of the root to trust; empty: no verification")
	workers := flag.Int("c", 8, "concurrent handshakes")
	d := flag.Duration("d", 5*time.Second, "how long to run (at most 60s)")
	resume := flag.Bool("resume", false, "resume a session with a ticket instead of full handshakes")
	kx := flag.String("kx", "x25519", "key exchange offered: x25519 (what OpenSSL 3.0 and so Debian's nginx can do) or go (Go's default, X25519MLKEM768 first)")
	flag.Parse()
	if *d > time.Minute {
		*d = time.Minute
	}
	host, _, err := net.SplitHostPort(*addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		fmt.Fprintln(os.Stderr, "handshakes: -addr must be a loopback address")
		os.Exit(2)
	}
	cfg := &tls.Config{ServerName: *name, NextProtos: []string{"h2"}}
	switch *kx {
	case "x25519":
		cfg.CurvePreferences = []tls.CurveID{tls.X25519}
	case "go":
	default:
		fmt.Fprintln(os.Stderr, "handshakes: -kx is x25519 or go")
		os.Exit(2)
	}
	if *caFile == "" {
		cfg.InsecureSkipVerify = true
	} else {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		cfg.RootCAs = x509.NewCertPool()
		cfg.RootCAs.AppendCertsFromPEM(pem)
	}
	var ok, failed, resumed atomic.Int64
	end := time.Now().Add(*d)
	var wg sync.WaitGroup
	for range *workers {
		wg.Go(func() {
			cfg := cfg.Clone()
			dl := &net.Dialer{Timeout: 5 * time.Second}
			if *resume {
				cfg.ClientSessionCache = tls.NewLRUClientSessionCache(1)
				// The ticket comes after the handshake (OpenSSL sends it
				// once it has the client's Finished): read until it is
				// there or a second has passed.
				if c, err := tls.DialWithDialer(dl, "tcp", *addr, cfg); err == nil {
					c.SetReadDeadline(time.Now().Add(time.Second))
					io.Copy(io.Discard, io.LimitReader(c, 1))
					c.Close()
				}
			}
			for time.Now().Before(end) {
				c, err := tls.DialWithDialer(dl, "tcp", *addr, cfg)
				if err != nil {
					failed.Add(1)
					continue
				}
				if c.ConnectionState().DidResume {
					resumed.Add(1)
				}
				c.Close()
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	fmt.Printf("handshakes %d failed %d per_second %.0f resumed %d\n", ok.Load(), failed.Load(), float64(ok.Load())/d.Seconds(), resumed.Load())
}
