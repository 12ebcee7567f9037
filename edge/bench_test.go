package edge_test

import (
	"crypto/tls"
	"io"
	"testing"
	"time"

	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/internal/testkit"
)

// BenchmarkHandshake: one TLS 1.3 handshake with the edge's listener on
// loopback, its static ECDSA P-256 certificate, client and server in the
// process: full with Go's default key exchange (X25519MLKEM768), full
// with X25519 alone (what OpenSSL 3.0 clients offer), and resumed (the
// ticket of the previous handshake offered). The server's share of the
// time and of the allocations is what a profile focused on the
// listener's handshake shows (docs/benchmarks.md).
func BenchmarkHandshake(b *testing.B) {
	ca := edgetest.NewCA(b)
	certFile, keyFile, _ := ca.WritePair(b, b.TempDir(), "bench.test")
	clk := testkit.NewClock(time.Now())
	_, addr := ticketEdge(b, certFile, keyFile, "", clk)
	for _, name := range []string{"full", "full-x25519", "resumed"} {
		resume := name == "resumed"
		b.Run(name, func(b *testing.B) {
			cfg := &tls.Config{ServerName: "bench.test", RootCAs: ca.Pool(), NextProtos: []string{"h2"}}
			if name == "full-x25519" {
				cfg.CurvePreferences = []tls.CurveID{tls.X25519}
			}
			if resume {
				cfg.ClientSessionCache = tls.NewLRUClientSessionCache(1)
			}
			resumed := 0
			b.ReportAllocs()
			for b.Loop() {
				c, err := tls.Dial("tcp", addr, cfg)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, c) // the ticket, then the server's close
				if c.ConnectionState().DidResume {
					resumed++
				}
				c.Close()
			}
			if resume && resumed < b.N-1 || !resume && resumed > 0 {
				b.Fatalf("%d of %d handshakes resumed", resumed, b.N)
			}
		})
	}
}
