package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/linkgate/linkgate/h2serve"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/ongoing"
	"github.com/linkgate/linkgate/proxy"
)

// mapOnly hides the writer's ongoing.FieldWriter: the proxy writes the
// relayed head through the header map.
type mapOnly struct{ http.ResponseWriter }

func (w mapOnly) Flush()                      { http.NewResponseController(w.ResponseWriter).Flush() }
func (w mapOnly) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// serveH2 serves h over h2c on loopback with h2serve, and returns its
// address.
func serveH2(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := &h2serve.Server{Handler: h}
	return testkit.Serve(t, testkit.AcceptLoop(func(nc net.Conn) { srv.ServeConn(context.Background(), nc, false) }), srv.Close)
}

// h2Answer is what a client sees of one answer over HTTP/2: its header
// blocks (interim heads, the final head, trailers), each field's value as
// sent but Date's, and the body's length.
type h2Answer struct {
	heads [][]string
	body  int
}

// getH2 sends a request of method for path on a new connection to addr
// and returns the answer, its blocks' fields sorted by name, the values
// of one name kept in the order sent (the order of map fields over
// HTTP/2 is the map's).
func getH2(t *testing.T, addr, method, path string) h2Answer {
	t.Helper()
	h, err := testkit.DialH2(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Send(func(fr *http2.Framer) error {
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h.RequestBlock(method, path),
			EndStream: true, EndHeaders: true})
	}); err != nil {
		t.Fatal(err)
	}
	if !h.Wait(10*time.Second, func(h *testkit.H2Conn) bool { return h.StreamEnded(1) }) {
		t.Fatalf("%s %s: the stream did not end; heads %v", method, path, h.Heads(1))
	}
	var a h2Answer
	for _, block := range h.Heads(1) {
		block = slices.Clone(block)
		slices.SortStableFunc(block, func(x, y hpack.HeaderField) int { return strings.Compare(x.Name, y.Name) })
		var fields []string
		for _, f := range block {
			v := f.Value
			if f.Name == "date" {
				v = "<date>"
			}
			fields = append(fields, f.Name+": "+v)
		}
		a.heads = append(a.heads, fields)
	}
	for _, n := range h.Data(1) {
		a.body += n
	}
	return a
}

// TestRelayedHeadOverHTTP2: an upstream's answer relayed through the
// proxy to a client of h2serve has the same head whether the proxy hands
// h2serve's writer the head as a list of fields (ongoing.FieldWriter) or
// through the header map: the same names (lower-case), values, order of
// the values of one name, the connection-specific fields and those the
// upstream's Connection names dropped, the fields the front's handler set
// before (and not those it set after), the 1xx, HEAD, 304, 204 and
// trailer cases alike.
func TestRelayedHeadOverHTTP2(t *testing.T) {
	up := newUpstream(t, "u", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		switch r.URL.Path {
		case "/redirect":
			h["Location"] = []string{"https://example.com/x"}
			h["Cache-Control"] = []string{"private"}
			h["Set-Cookie"] = []string{"a=1", "b=2", "c=3"}
			w.WriteHeader(http.StatusFound)
		case "/hop":
			h["Connection"] = []string{"X-Hop, keep-alive"}
			h["X-Hop"] = []string{"1"}
			h["Keep-Alive"] = []string{"timeout=5"}
			h["Proxy-Connection"] = []string{"keep-alive"}
			h["Upgrade"] = []string{"foo"}
			h["X-Kept"] = []string{"1", "2"}
			io.WriteString(w, "abc")
		case "/early":
			h["Link"] = []string{"</a.css>; rel=preload"}
			w.WriteHeader(http.StatusEarlyHints)
			delete(h, "Link")
			h["X-B"] = []string{"b"}
			io.WriteString(w, "<html>hi</html>")
		case "/head":
			h["Content-Length"] = []string{"10"}
			h["Content-Type"] = []string{"text/x-a"}
		case "/304":
			h["Etag"] = []string{`"e"`}
			h["Content-Type"] = []string{"text/x-a"}
			w.WriteHeader(http.StatusNotModified)
		case "/204":
			h["X-A"] = []string{"a"}
			w.WriteHeader(http.StatusNoContent)
		case "/trailer":
			h["Trailer"] = []string{"X-T"}
			h["Content-Type"] = []string{"text/plain"}
			io.WriteString(w, "abc")
			w.(http.Flusher).Flush()
			io.WriteString(w, "def")
			h["X-T"] = []string{"t"}
		case "/chunked":
			h["Date"] = []string{"Mon, 02 Jan 2006 15:04:05 GMT"}
			for range 3 {
				io.WriteString(w, strings.Repeat("x", 3000))
				w.(http.Flusher).Flush()
			}
		case "/sniff":
			io.WriteString(w, "<html>sniffed</html>")
		}
	})
	px := proxy.New(plan(t, config(up.URL)), nil, nil)
	t.Cleanup(px.Close)
	front := func(hide bool) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Cache-Control"] = []string{"no-transform"} // before the upstream's, of one name
			w.Header()["X-Front"] = []string{"f"}
			rec := ongoing.StatusWriter(w)
			if hide {
				px.ServeHTTP(mapOnly{rec}, r)
			} else {
				if _, ok := ongoing.AsFieldWriter(rec); !ok {
					t.Error("h2serve's writer takes no head as a list")
				}
				px.ServeHTTP(rec, r)
			}
			w.Header()["X-Late"] = []string{"late"} // after the head: not sent
		})
	}
	fields, mapped := serveH2(t, front(false)), serveH2(t, front(true))
	for _, c := range []struct{ method, path string }{
		{"GET", "/redirect"}, {"GET", "/hop"}, {"GET", "/early"}, {"HEAD", "/head"},
		{"GET", "/304"}, {"GET", "/204"}, {"GET", "/trailer"}, {"GET", "/chunked"}, {"GET", "/sniff"},
		{"HEAD", "/redirect"},
	} {
		t.Run(c.method+c.path, func(t *testing.T) {
			got, want := getH2(t, fields, c.method, c.path), getH2(t, mapped, c.method, c.path)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("as a list of fields:\n%+v\nthrough the header map:\n%+v", got, want)
			}
			for _, head := range got.heads {
				for _, f := range head {
					name, _, _ := strings.Cut(f, ": ")
					switch name {
					case "connection", "keep-alive", "proxy-connection", "upgrade", "transfer-encoding", "x-hop", "x-late":
						t.Errorf("%q sent", f)
					}
					if name != strings.ToLower(name) {
						t.Errorf("%q: a name not in lower case", f)
					}
				}
			}
			if len(got.heads) == 0 {
				t.Fatal("no head")
			}
		})
	}
}
