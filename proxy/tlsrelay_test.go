package proxy_test

import (
	"crypto/tls"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/proxy"
)

// tlsRelay serves TLS (HTTP/1.1 only, under a certificate for
// backend.internal from a CA of its own) on loopback and relays each
// connection's bytes to and from target, an http:// upstream, on a
// connection of its own, closes included: the same upstream, reached by
// the own client over TLS. It returns the https:// target and the pool's
// TLS settings that reach it.
func tlsRelay(t *testing.T, target string) (string, proxy.TLS) {
	t.Helper()
	ca := edgetest.NewCA(t)
	certPEM, keyPEM := ca.Issue(t, "backend.internal")
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	upAddr := strings.TrimPrefix(target, "http://")
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]struct{}{}
	track := func(cs ...net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if open == nil {
			return false
		}
		for _, c := range cs {
			open[c] = struct{}{}
		}
		return true
	}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range open {
			c.Close()
		}
		open = nil
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upAddr)
			if err != nil {
				c.Close()
				continue
			}
			if !track(c, up) {
				c.Close()
				up.Close()
				return
			}
			wg.Go(func() { relay(c.(*tls.Conn), up.(*net.TCPConn)) })
		}
	})
	return "https://" + ln.Addr().String(), proxy.TLS{CAFile: writeFile(t, t.TempDir(), "relay-ca.pem", ca.PEM), ServerName: "backend.internal"}
}

// relay copies c to up and up to c until both ends have closed, passing
// each half-close on: the end of the upstream's bytes as TLS's
// close_notify and the TCP connection's end.
func relay(c *tls.Conn, up *net.TCPConn) {
	defer c.Close()
	defer up.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(up, c)
		up.CloseWrite()
	}()
	io.Copy(c, up)
	c.CloseWrite()
	c.NetConn().(*net.TCPConn).CloseWrite()
	<-done
}
