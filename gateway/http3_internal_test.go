package gateway

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/ja4"
)

// TestHTTP3Fingerprint serves HTTP/3 with the gateway's fingerprinting
// (quic-go's server and client over loopback): each request carries the
// JA4 fingerprint of its connection's ClientHello, QUIC's ("q13d…h3").
func TestHTTP3Fingerprint(t *testing.T) {
	ca := edgetest.NewCA(t)
	certPEM, keyPEM := ca.Issue(t, "h3.test")
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: pc, ConnContext: func(ctx context.Context, _ *quic.ClientInfo) (context.Context, error) {
		return h3HelloContext(ctx), nil
	}}
	defer tr.Close()
	srv := &http3.Server{
		TLSConfig:   http3.ConfigureTLSConfig(h3Fingerprint(&tls.Config{Certificates: []tls.Certificate{cert}})),
		ConnContext: h3ConnContext,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, ja4.FromContext(r.Context()))
		}),
	}
	ln, err := tr.ListenEarly(srv.TLSConfig, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeListener(ln)
	defer srv.Close()

	ct := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), ServerName: "h3.test"}}
	defer ct.Close()
	c := &http.Client{Transport: ct, Timeout: 20 * time.Second}
	var first string
	for i := range 2 { // two requests of one connection
		resp, err := c.Get("https://" + pc.LocalAddr().String() + "/go")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fp := string(body)
		if len(fp) != 36 || fp[:4] != "q13d" || fp[8:10] != "h3" || fp[10] != '_' || fp[23] != '_' {
			t.Fatalf("request %d: fingerprint %q, want QUIC's, TLS 1.3 with SNI and ALPN h3", i+1, fp)
		}
		if i == 0 {
			first = fp
		} else if fp != first {
			t.Errorf("the second request's fingerprint %q, the first's %q", fp, first)
		}
	}
	t.Logf("quic-go's client: %s", first)
}
