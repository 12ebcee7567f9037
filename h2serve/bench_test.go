package h2serve_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"testing"

	"golang.org/x/net/http2"

	"github.com/linkgate/linkgate/h1wire"
	"github.com/linkgate/linkgate/h2serve"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/ongoing"
)

// relayedRedirect is the head of an upstream's redirect as the proxy
// relays it.
var relayedRedirect = []h1wire.Field{
	{Name: "Location", Value: "https://example.com/a/long/enough/destination?utm_source=x"},
	{Name: "Cache-Control", Value: "private, max-age=90"},
	{Name: "Content-Length", Value: "0"},
	{Name: "Server", Value: "upstream"},
}

// relayRedirect answers as the gateway's proxy answers a redirect: the
// request's start and end looked up (the limiter, the visit counter, the
// proxy's hold on its upstream connection), the head relayed as a list
// of fields to a writer that takes one, else through the header map.
func relayRedirect(w http.ResponseWriter, r *http.Request) {
	_ = ongoing.Start(r.Context())
	stop := ongoing.AfterEnd(r.Context(), func() {})
	defer stop()
	rec := ongoing.StatusWriter(w)
	if fw, ok := ongoing.AsFieldWriter(rec); ok {
		fw.WriteHeaderFields(http.StatusFound, relayedRedirect)
		return
	}
	h := rec.Header()
	for _, f := range relayedRedirect {
		h[f.Name] = append(h[f.Name], f.Value)
	}
	rec.WriteHeader(http.StatusFound)
}

// BenchmarkRelayedRedirect: redirects relayed as the proxy relays them
// (relayRedirect), 32 streams at a time on one h2c connection over
// loopback, as h2load -m32 asks them. The client reads frames without
// decoding them: the allocations are the server's.
func BenchmarkRelayedRedirect(b *testing.B) {
	srv := &h2serve.Server{Handler: http.HandlerFunc(relayRedirect)}
	addr := testkit.Serve(b, testkit.AcceptLoop(func(nc net.Conn) { srv.ServeConn(context.Background(), nc, false) }), srv.Close)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	io.WriteString(nc, http2.ClientPreface)
	fr := http2.NewFramer(nc, nil)
	fr.WriteSettings()

	// GET http://a/ from HPACK's static table and a literal :authority,
	// the same bytes for every request.
	block := []byte{0x82, 0x86, 0x84, 0x01, 0x01, 'a'}
	const inFlight = 32
	br := bufio.NewReaderSize(nc, 64<<10)
	var hdr [9]byte
	id := uint32(1)
	b.ReportAllocs()
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		n := min(inFlight, b.N-sent)
		for range n {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true})
			id += 2
		}
		sent += n
		for ended := 0; ended < n; {
			if _, err := io.ReadFull(br, hdr[:]); err != nil {
				b.Fatal(err)
			}
			length := int(binary.BigEndian.Uint32(hdr[:4]) >> 8)
			typ, flags := http2.FrameType(hdr[3]), http2.Flags(hdr[4])
			if _, err := br.Discard(length); err != nil {
				b.Fatal(err)
			}
			switch {
			case typ == http2.FrameGoAway || typ == http2.FrameRSTStream:
				b.Fatalf("%v frame", typ)
			case (typ == http2.FrameHeaders || typ == http2.FrameData) && flags.Has(http2.FlagHeadersEndStream):
				ended++
			}
		}
	}
}
