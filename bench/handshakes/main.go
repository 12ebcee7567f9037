// Command handshakes measures new TLS handshakes per second against a
// server: WORKERS goroutines each dial, complete a full handshake (no
// session resumption) and close, for a bounded duration. bench/tls.sh runs
// it against linkgate and nginx in turn.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
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
	flag.Parse()
	if *d > time.Minute {
		*d = time.Minute
	}
	host, _, err := net.SplitHostPort(*addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		fmt.Fprintln(os.Stderr, "handshakes: -addr must be a loopback address")
		os.Exit(2)
	}
	cfg := &tls.Config{ServerName: *name, NextProtos: []string{"h2"}, ClientSessionCache: nil}
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
	var ok, failed atomic.Int64
	end := time.Now().Add(*d)
	var wg sync.WaitGroup
	for range *workers {
		wg.Go(func() {
			dl := &net.Dialer{Timeout: 5 * time.Second}
			for time.Now().Before(end) {
				c, err := tls.DialWithDialer(dl, "tcp", *addr, cfg)
				if err != nil {
					failed.Add(1)
					continue
				}
				c.Close()
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	fmt.Printf("handshakes %d failed %d per_second %.0f\n", ok.Load(), failed.Load(), float64(ok.Load())/d.Seconds())
}
