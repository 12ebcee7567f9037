package h1serve_test

// Differential tests: every case is sent, as raw bytes over loopback TCP,
// both to h1serve (whose loop serves the simple requests and hands the
// rest to net/http) and to a plain net/http server with the same handler,
// and the two must answer the same: the same responses (status, proto,
// header fields but Date, framing, body, trailers), the same state of the
// connection after them, and the same requests seen by the handler.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"math/big"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/linkgate/linkgate/h1serve"
	"github.com/linkgate/linkgate/h1wire"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/ongoing"
)

// The waits below are an idle machine's; each is stretched by the
// machine's pace where it is used (testkit.Slack).
const (
	// diffRespTimeout bounds the wait for the responses of one write.
	diffRespTimeout = 1500 * time.Millisecond
	// diffProbeTimeout is how long the client waits, after the last expected
	// response, to see whether the server closes the connection.
	diffProbeTimeout = time.Second
	// diffSlowBody marks a body that took long to end (its connection's close,
	// say, came late).
	diffSlowBody = 250 * time.Millisecond
	// diffCasesAtOnce is how many cases run at once, each on both servers.
	// All of them at once (over 250 servers and, over TLS, as many
	// handshakes) stalled so many on a loaded machine that most cases ran
	// again, one after another, each wait stretched by the load: the suite
	// then ran for a quarter of an hour and more.
	diffCasesAtOnce = 24
)

// diffHandler is a case's handler; note records something the handler
// saw (a write's error, say) with the request's observation.
type diffHandler func(w http.ResponseWriter, r *http.Request, note func(format string, args ...any))

// diffExchange is one write of raw request bytes and the responses then
// read: the request method of each final (non-1xx) response expected.
type diffExchange struct {
	send       string
	methods    []string
	closeWrite bool // half-close the connection after sending
}

type diffCase struct {
	name    string
	ex      []diffExchange
	handler diffHandler
	config  func(*http.Server) // applied to both servers
	// via is, for each handler call in h1serve's run, who served it:
	// 'L' h1serve's loop, 'N' the net/http fallback.
	via string
	// differs names a difference the package documents: the two sides
	// must then differ (so that the note is dropped if they come to
	// agree), and h1serve's side must show loopShows.
	differs, loopShows string
	// tcpOnly: the documented difference shows over TCP only (overTCPOnly).
	tcpOnly bool
}

type diffConnCtxKey struct{}
type diffBaseCtxKey struct{}

var diffDiscardLog = log.New(io.Discard, "", 0)

// ---------------------------------------------------------------------
// Servers and the handler's observations.

type diffRecorder struct {
	mu      sync.Mutex
	obs     []string
	writers []string
	running int
}

func (rec *diffRecorder) wrap(srv *http.Server, local net.Addr, h diffHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		desc := diffDescribeRequest(srv, local, r)
		rec.mu.Lock()
		i := len(rec.obs)
		rec.obs = append(rec.obs, desc)
		rec.writers = append(rec.writers, fmt.Sprintf("%T", w))
		rec.running++
		rec.mu.Unlock()
		defer func() {
			rec.mu.Lock()
			rec.running--
			rec.mu.Unlock()
		}()
		note := func(format string, args ...any) {
			rec.mu.Lock()
			rec.obs[i] += "note: " + fmt.Sprintf(format, args...) + "\n"
			rec.mu.Unlock()
		}
		if h != nil {
			h(w, r, note)
		}
	})
}

// snapshot waits (a bounded time) for the handlers that started to end
// and returns what they recorded.
func (rec *diffRecorder) snapshot() (obs, writers []string) {
	deadline := time.Now().Add(testkit.Slack(time.Second))
	for {
		rec.mu.Lock()
		if rec.running == 0 || time.Now().After(deadline) {
			obs, writers = slices.Clone(rec.obs), slices.Clone(rec.writers)
			running := rec.running
			rec.mu.Unlock()
			if running != 0 {
				obs = append(obs, fmt.Sprintf("(%d handlers still running)", running))
			}
			return obs, writers
		}
		rec.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
}

func diffDescribeRequest(srv *http.Server, local net.Addr, r *http.Request) string {
	var b strings.Builder
	fmt.Fprintf(&b, "method=%q proto=%q (%d.%d) requestURI=%q host=%q\n",
		r.Method, r.Proto, r.ProtoMajor, r.ProtoMinor, r.RequestURI, r.Host)
	u := r.URL
	fmt.Fprintf(&b, "url=%q scheme=%q urlHost=%q opaque=%q path=%q rawPath=%q rawQuery=%q forceQuery=%v\n",
		u.String(), u.Scheme, u.Host, u.Opaque, u.Path, u.RawPath, u.RawQuery, u.ForceQuery)
	fmt.Fprintf(&b, "close=%v contentLength=%d transferEncoding=%q\n", r.Close, r.ContentLength, r.TransferEncoding)
	diffDumpHeader(&b, "header", r.Header)
	diffDumpHeader(&b, "trailer", r.Trailer)
	var body []byte
	var err error
	if r.Body == nil {
		err = errors.New("nil Body")
	} else {
		body, err = io.ReadAll(r.Body)
	}
	fmt.Fprintf(&b, "body=%q err=%v\n", body, err)
	if r.TLS != nil {
		fmt.Fprintf(&b, "tls: version=%x handshakeComplete=%v serverName=%q alpn=%q peerCerts=%d\n",
			r.TLS.Version, r.TLS.HandshakeComplete, r.TLS.ServerName, r.TLS.NegotiatedProtocol, len(r.TLS.PeerCertificates))
	} else {
		fmt.Fprintf(&b, "tls: none\n")
	}
	ctx := r.Context()
	la, _ := ctx.Value(http.LocalAddrContextKey).(net.Addr)
	connRemote, _ := ctx.Value(diffConnCtxKey{}).(string)
	fmt.Fprintf(&b, "remoteAddrLoopback=%v serverKey=%v localAddrKey=%v connContext=%v base=%v\n",
		strings.HasPrefix(r.RemoteAddr, "127.0.0.1:"),
		ctx.Value(http.ServerContextKey) == srv,
		la != nil && la.String() == local.String(),
		connRemote != "" && connRemote == r.RemoteAddr,
		ctx.Value(diffBaseCtxKey{}))
	return b.String()
}

func diffDumpHeader(b *strings.Builder, what string, h http.Header) {
	if len(h) == 0 {
		fmt.Fprintf(b, "%s: (none)\n", what)
		return
	}
	fmt.Fprintf(b, "%s:\n", what)
	for _, k := range slices.Sorted(maps.Keys(h)) {
		fmt.Fprintf(b, "  %q: %q\n", k, h[k])
	}
}

// startDiffServer serves a fresh listener, with h1serve when loop is set and
// with net/http alone otherwise, over TLS when tlsCfg is set (the two
// servers then see the *tls.Conn of each connection, as net/http's
// ServeTLS does).
func startDiffServer(t *testing.T, loop bool, tlsCfg *tls.Config, tc *diffCase, rec *diffRecorder) (string, error) {
	var ln net.Listener
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	srv := &http.Server{
		ErrorLog: diffDiscardLog,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, diffConnCtxKey{}, c.RemoteAddr().String())
		},
		BaseContext: func(net.Listener) context.Context {
			return context.WithValue(context.Background(), diffBaseCtxKey{}, "base")
		},
	}
	srv.Handler = rec.wrap(srv, ln.Addr(), tc.handler)
	if tc.config != nil {
		tc.config(srv)
	}
	if loop {
		s := h1serve.New(srv)
		testkit.ServeOn(t, ln, s.Serve, s.Close)
	} else {
		testkit.ServeOn(t, ln, srv.Serve, srv.Close)
	}
	return ln.Addr().String(), nil
}

// ---------------------------------------------------------------------
// The client.

type diffSide struct {
	render  string   // the responses and the connection's state, as compared
	raw     string   // every byte read, for the failure message
	obs     []string // the handler's observations
	writers []string // the handler's ResponseWriter types
}

func runDiffSide(t *testing.T, loop bool, tlsCfg *tls.Config, tc *diffCase) diffSide {
	rec := &diffRecorder{}
	addr, err := startDiffServer(t, loop, tlsCfg, tc, rec)
	if err != nil {
		return diffSide{render: "listen: " + err.Error()}
	}
	render, raw := runDiffClient(addr, tlsCfg != nil, tc.ex)
	obs, writers := rec.snapshot()
	return diffSide{render: render, raw: raw, obs: obs, writers: writers}
}

func runDiffClient(addr string, overTLS bool, exs []diffExchange) (render, raw string) {
	var out strings.Builder
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "dial: " + err.Error(), ""
	}
	defer c.Close()
	if overTLS {
		// TLS 1.2: its handshake ends with the server's Finished, so that
		// a handshake the server cut off (a case's short timeouts bound
		// it, as in net/http) fails here, and the case runs again; a TLS
		// 1.3 client's handshake ends before the server's does.
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, ServerName: "example.com", NextProtos: []string{"http/1.1"}, MaxVersion: tls.VersionTLS12})
		tc.SetDeadline(time.Now().Add(testkit.Slack(diffRespTimeout)))
		if err := tc.Handshake(); err != nil {
			return "handshake: " + err.Error(), ""
		}
		c = tc
	}
	var rawBuf bytes.Buffer
	br := bufio.NewReader(io.TeeReader(c, &rawBuf))
	for i, ex := range exs {
		fmt.Fprintf(&out, "== exchange %d\n", i)
		if _, err := io.WriteString(c, ex.send); err != nil {
			fmt.Fprintf(&out, "write: %s\n", diffErrClass(err))
		}
		if ex.closeWrite {
			c.(interface{ CloseWrite() error }).CloseWrite()
		}
		c.SetReadDeadline(time.Now().Add(testkit.Slack(diffRespTimeout)))
		for j, m := range ex.methods {
			for {
				resp, err := http.ReadResponse(br, &http.Request{Method: m})
				if err != nil {
					fmt.Fprintf(&out, "response %d: ReadResponse error: %s\n", j, diffErrClass(err))
					return out.String(), rawBuf.String()
				}
				fmt.Fprintf(&out, "response %d (%s):\n", j, m)
				renderDiffResponse(&out, resp)
				if resp.StatusCode >= 100 && resp.StatusCode <= 199 && resp.StatusCode != http.StatusSwitchingProtocols {
					continue // informational: the final response follows
				}
				break
			}
		}
	}
	// Did the server close the connection after the last response?
	if n := br.Buffered(); n > 0 {
		extra, _ := br.Peek(n)
		fmt.Fprintf(&out, "after: %d unexpected bytes %q\n", n, extra)
		return out.String(), rawBuf.String()
	}
	c.SetReadDeadline(time.Now().Add(testkit.Slack(diffProbeTimeout)))
	if b, err := br.ReadByte(); err == nil {
		fmt.Fprintf(&out, "after: unexpected byte %q\n", b)
	} else if diffErrClass(err) == "timeout" {
		fmt.Fprintf(&out, "after: connection open\n")
	} else {
		fmt.Fprintf(&out, "after: connection closed (%s)\n", diffErrClass(err))
	}
	return out.String(), rawBuf.String()
}

func renderDiffResponse(b *strings.Builder, resp *http.Response) {
	fmt.Fprintf(b, "  %s %q\n", resp.Proto, resp.Status)
	h := resp.Header.Clone()
	dates := h.Values("Date")
	delete(h, "Date")
	switch {
	case len(dates) == 0:
		fmt.Fprintf(b, "  date: absent\n")
	case len(dates) > 1:
		fmt.Fprintf(b, "  date: %q\n", dates)
	default:
		if d, err := http.ParseTime(dates[0]); err == nil && time.Since(d).Abs() < time.Minute && dates[0] == d.UTC().Format(http.TimeFormat) {
			fmt.Fprintf(b, "  date: now\n")
		} else {
			fmt.Fprintf(b, "  date: %q\n", dates[0])
		}
	}
	var hb strings.Builder
	diffDumpHeader(&hb, "header", h)
	b.WriteString(diffIndent(hb.String()))
	fmt.Fprintf(b, "  transferEncoding=%q contentLength=%d close=%v\n", resp.TransferEncoding, resp.ContentLength, resp.Close)
	start := time.Now()
	body, err := io.ReadAll(resp.Body)
	fmt.Fprintf(b, "  body=%s err=%s\n", diffBody(body), diffErrClass(err))
	if d := time.Since(start); d > testkit.Slack(diffSlowBody) {
		fmt.Fprintf(b, "  (the body took over %v to end)\n", diffSlowBody)
	}
	var tb strings.Builder
	diffDumpHeader(&tb, "trailer", resp.Trailer)
	b.WriteString(diffIndent(tb.String()))
}

func diffIndent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n  ") + "\n"
}

func diffBody(body []byte) string {
	if len(body) <= 120 {
		return fmt.Sprintf("%q", body)
	}
	return fmt.Sprintf("(%d bytes, sha256 %x, starting %q)", len(body), sha256.Sum256(body), body[:40])
}

// diffErrClass names an error without the addresses that differ between the
// two servers.
func diffErrClass(err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, io.EOF):
		return "EOF"
	case errors.Is(err, syscall.ECONNRESET):
		return "ECONNRESET"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected EOF"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe"
	}
	return err.Error()
}

// ---------------------------------------------------------------------
// The cases.

const diffHost = "Host: example.com\r\n"

// diffGet is a GET of / with a Host and the given header lines.
func diffGet(lines ...string) string {
	return "GET / HTTP/1.1\r\n" + diffHost + strings.Join(lines, "") + "\r\n"
}

func diffHead(lines ...string) string {
	return "HEAD / HTTP/1.1\r\n" + diffHost + strings.Join(lines, "") + "\r\n"
}

// one is a single request and its single response.
func oneExchange(raw string) []diffExchange {
	m := "GET"
	if strings.HasPrefix(raw, "HEAD ") {
		m = "HEAD"
	}
	return []diffExchange{{send: raw, methods: []string{m}}}
}

func diffOK(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
	io.WriteString(w, "ok\n")
}

// diffReqCase is a request answered by diffOK.
func diffReqCase(name, raw, via string) diffCase {
	return diffCase{name: name, ex: oneExchange(raw), handler: diffOK, via: via}
}

// diffRespCase is a plain GET answered by h, served by the loop.
func diffRespCase(name string, h diffHandler) diffCase {
	return diffCase{name: name, ex: oneExchange(diffGet()), handler: h, via: "L"}
}

// documented marks tc as a difference the package documents.
func (tc diffCase) documented(differs, loopShows string) diffCase {
	tc.differs, tc.loopShows = differs, loopShows
	return tc
}

// overTCPOnly marks tc's documented difference as one that shows over TCP
// only: over TLS, net/http's ReadFrom has no sendfile to take and copies
// with Write, as the loop does, and the two agree.
func (tc diffCase) overTCPOnly() diffCase {
	tc.tcpOnly = true
	return tc
}

// diffPadHead is a GET whose head is n bytes long.
// diffFieldsCase is a response case whose handler adds the fields kv
// (name, value, ...) and writes body.
func diffFieldsCase(name, body string, kv ...string) diffCase {
	return diffRespCase(name, func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
		for i := 0; i < len(kv); i += 2 {
			w.Header().Add(kv[i], kv[i+1])
		}
		diffWrite(w, note, body)
	})
}

func diffPadHead(n int) string {
	prefix := "GET / HTTP/1.1\r\n" + diffHost + "X-Pad: "
	return prefix + strings.Repeat("p", n-len(prefix)-4) + "\r\n\r\n"
}

func diffWrite(w http.ResponseWriter, note func(string, ...any), s string) {
	if n, err := io.WriteString(w, s); err != nil {
		note("write %d bytes: n=%d err=%v", len(s), n, err)
	}
}

// diffRelay writes a head of status code with the fields of nv (name,
// value, name, value...) after the header map's: as a list to a writer
// that takes one (the loop's, through an ongoing.Recorder as in the
// gateway), else into the map (net/http's), so that the two must answer
// alike.
func diffRelay(w http.ResponseWriter, code int, nv ...string) {
	var fs []h1wire.Field
	for i := 0; i+1 < len(nv); i += 2 {
		fs = append(fs, h1wire.Field{Name: nv[i], Value: nv[i+1]})
	}
	if fw, ok := ongoing.AsFieldWriter(ongoing.StatusWriter(w)); ok {
		fw.WriteHeaderFields(code, fs)
		return
	}
	h := w.Header()
	for _, f := range fs {
		h[f.Name] = append(h[f.Name], f.Value)
	}
	w.WriteHeader(code)
	if code < 200 { // an interim head's fields are its own, as the proxy passes it on
		for _, f := range fs {
			delete(h, f.Name)
		}
	}
}

// diffRelayCases are heads relayed as lists of fields (diffRelay).
func diffRelayCases(body5000 string) []diffCase {
	return []diffCase{
		diffRespCase("relay/with-the-map", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.Header().Set("Cache-Control", "no-store")
			diffRelay(w, http.StatusFound, "Location", "https://example.com/x", "Cache-Control", "private", "Content-Length", "2")
			diffWrite(w, note, "ok")
		}),
		diffRespCase("relay/date-type-encoding", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			diffRelay(w, http.StatusOK, "Date", "Mon, 02 Jan 2006 15:04:05 GMT", "Content-Type", "text/x-a", "Content-Encoding", "gzip")
			diffWrite(w, note, "abc")
		}),
		diffRespCase("relay/empty-in-the-map", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.Header()["Content-Encoding"] = nil
			w.Header()["X-E"] = []string{}
			diffRelay(w, http.StatusOK, "Content-Encoding", "gzip", "X-E", "e")
			diffWrite(w, note, "abc")
		}),
		diffRespCase("relay/chunked", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			diffRelay(w, http.StatusOK, "X-A", "1", "X-A", "2")
			diffWrite(w, note, body5000)
		}),
		diffRespCase("relay/connection-close", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			diffRelay(w, http.StatusOK, "Connection", "close", "Transfer-Encoding", "identity")
			diffWrite(w, note, "abc")
		}),
		diffRespCase("relay/invalid-length", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			diffRelay(w, http.StatusOK, "Content-Length", "x1")
			diffWrite(w, note, "abc")
		}),
		diffRespCase("relay/304", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			diffRelay(w, http.StatusNotModified, "Content-Type", "text/x-a", "Content-Length", "10", "Etag", `"e"`)
		}),
		diffRespCase("relay/103-then-200", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			diffRelay(w, http.StatusEarlyHints, "Link", "</a.css>; rel=preload")
			diffRelay(w, http.StatusOK, "X-B", "b")
			diffWrite(w, note, "abc")
		}),
		diffRespCase("relay/trailer", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.Header().Set("Trailer", "X-T")
			diffRelay(w, http.StatusOK, "Content-Type", "text/plain")
			diffWrite(w, note, "abc")
			w.Header().Set("X-T", "t")
		}),
		{name: "relay/head", via: "L", ex: oneExchange(diffHead()),
			handler: func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
				diffRelay(w, http.StatusOK, "Content-Length", "5000", "Content-Type", "text/plain")
			}},
	}
}

var diffDefaultMuxOnce sync.Once

type diffOnlyReader struct{ io.Reader }

func diffCases() []diffCase {
	body5000 := strings.Repeat("0123456789", 500)
	pngMagic := "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01"
	post := "POST /p HTTP/1.1\r\n" + diffHost + "Content-Length: 5\r\n\r\nhello"
	cases := []diffCase{
		// Requests the loop takes.
		diffReqCase("get/plain", diffGet(), "L"),
		diffReqCase("get/path-query-escapes", "GET /a/b%20c/d%2Fe/%E2%82%AC?x=1&y=%41&z=a+b&e=&%zz HTTP/1.1\r\n"+diffHost+"\r\n", "L"),
		diffReqCase("get/sub-delims", "GET /~u/%7E/a;b,c@d!$'()*+=:x?q=/?:@ HTTP/1.1\r\n"+diffHost+"\r\n", "L"),
		diffReqCase("get/double-slash", "GET //x/y HTTP/1.1\r\n"+diffHost+"\r\n", "L"),
		diffReqCase("get/empty-query", "GET /p? HTTP/1.1\r\n"+diffHost+"\r\n", "L"),
		diffReqCase("head/plain", diffHead(), "L"),
		diffReqCase("headers/duplicates", diffGet("X-A: 1\r\n", "X-B: 2\r\n", "X-A: 3\r\n", "Accept: text/html\r\n", "Accept: */*\r\n", "Cookie: a=1\r\n", "Cookie: b=2\r\n"), "L"),
		diffReqCase("headers/lowercase-names", "GET / HTTP/1.1\r\nhost: example.com\r\nuser-agent: t/1\r\naccept: */*\r\nx-custom-thing: v\r\naccept-encoding: gzip\r\nCONTENT-TYPE: text/plain\r\nx-forwarded-for: 1.2.3.4\r\nX-fOo-BaR: m\r\nwww-authenticate: w\r\n\r\n", "L"),
		diffReqCase("headers/underscore-name", diffGet("X_Under_score: 1\r\n"), "L"),
		diffReqCase("headers/value-whitespace", diffGet("X-A:   spaced  \t\r\n", "X-B:\tt\t\r\n", "X-C:\r\n", "X-D: a \t b\r\n", "X-E:no-space\r\n", "X-F: \t \r\n"), "L"),
		diffReqCase("headers/obs-text", diffGet("X-A: caf\xe9 \x80\xff\r\n", "X-B: \xc3\xa9t\xc3\xa9\r\n"), "L"),
		diffReqCase("host/port", "GET / HTTP/1.1\r\nHost: example.com:8080\r\n\r\n", "L"),
		diffReqCase("host/ipv6", "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", "L"),
		diffReqCase("host/empty", "GET / HTTP/1.1\r\nHost:\r\n\r\n", "L"),
		diffReqCase("host/upper-name", "GET / HTTP/1.1\r\nHOST: Example.COM\r\n\r\n", "L"),
		diffReqCase("host/not-first", "GET / HTTP/1.1\r\nX-A: 1\r\nHost: example.com\r\nX-B: 2\r\n\r\n", "L"),
		diffReqCase("pragma/no-cache", diffGet("Pragma: no-cache\r\n"), "L"),
		diffReqCase("pragma/no-cache-with-cache-control", diffGet("Pragma: no-cache\r\n", "Cache-Control: max-age=0\r\n"), "L"),
		diffReqCase("pragma/no-cache-not-first", diffGet("Pragma: foo\r\n", "Pragma: no-cache\r\n"), "L"),
		diffReqCase("pragma/lowercase-name", diffGet("pragma: no-cache\r\n"), "L"),
		diffReqCase("pragma/other-case-value", diffGet("Pragma: No-Cache\r\n"), "L"),
		diffReqCase("connection/close", diffGet("Connection: close\r\n"), "L"),
		diffReqCase("connection/close-upper", diffGet("Connection: CLOSE\r\n"), "L"),
		diffReqCase("connection/close-in-list", diffGet("Connection: keep-alive, close\r\n"), "L"),
		diffReqCase("connection/close-second-field", diffGet("Connection: keep-alive\r\n", "Connection: close\r\n"), "L"),
		diffReqCase("connection/keep-alive", diffGet("Connection: keep-alive\r\n"), "L"),
		// Not a list (no comma): net/http's wantsClose (hasToken) still
		// finds "close" in it, though r.Close is false.
		diffReqCase("connection/close-space-separated", diffGet("Connection: keep-alive close\r\n"), "L"),
		{name: "connection/close-chunked", ex: oneExchange(diffGet("Connection: close\r\n")), via: "L",
			handler: func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) { diffWrite(w, note, body5000) }},
		{name: "pipeline/three", via: "LLL", handler: diffOK, ex: []diffExchange{{
			send:    "GET /1 HTTP/1.1\r\n" + diffHost + "\r\nHEAD /2 HTTP/1.1\r\n" + diffHost + "\r\nGET /3?x HTTP/1.1\r\n" + diffHost + "\r\n",
			methods: []string{"GET", "HEAD", "GET"}}}},
		{name: "pipeline/close-in-middle", via: "LL", handler: diffOK, ex: []diffExchange{{
			send:    "GET /1 HTTP/1.1\r\n" + diffHost + "\r\nGET /2 HTTP/1.1\r\n" + diffHost + "Connection: close\r\n\r\nGET /3 HTTP/1.1\r\n" + diffHost + "\r\n",
			methods: []string{"GET", "GET"}}}},
		{name: "pipeline/get-then-post", via: "LN", handler: diffOK, ex: []diffExchange{{
			send: diffGet() + post, methods: []string{"GET", "POST"}}}},
		{name: "pipeline/get-then-bad", via: "L", handler: diffOK, ex: []diffExchange{{
			send: diffGet() + "GET / HTTP/1.1\r\n\r\n", methods: []string{"GET", "GET"}}}},
		{name: "handover/get-then-post-then-get", via: "LNN", handler: diffOK, ex: []diffExchange{
			{send: diffGet(), methods: []string{"GET"}},
			{send: post, methods: []string{"POST"}},
			{send: diffGet(), methods: []string{"GET"}}}},
		// The loop reuses a connection's header maps from request to
		// request: what a handler does to its request's and its answer's
		// must not reach the next request's.
		{name: "pipeline/header-maps-per-request", via: "LLL", ex: []diffExchange{
			{send: diffGet("X-A: 1\r\n", "X-A: 2\r\n", "Cookie: c=1\r\n"), methods: []string{"GET"}},
			{send: diffGet("X-B: b\r\n"), methods: []string{"GET"}},
			{send: diffGet("X-A: 3\r\n", "X-B: b\r\n"), methods: []string{"GET"}}},
			handler: func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
				note("header seen: %v", r.Header)
				r.Header.Add("X-A", "added")
				if v := r.Header["X-B"]; len(v) > 0 {
					v[0] = "changed"
				}
				r.Header.Del("Cookie")
				w.Header().Add("X-Seen", fmt.Sprint(r.Header["X-A"]))
				if r.Header.Get("Cookie") == "" && len(r.Header["X-A"]) == 3 {
					w.Header().Set("X-First", "only")
				}
				note("header after: %v", r.Header)
				diffWrite(w, note, "ok")
			}},
		diffReqCase("size/head-4096", diffPadHead(4096), "L"),
		diffReqCase("size/head-4097", diffPadHead(4097), "N"),

		// Requests handed to net/http.
		diffReqCase("host/missing", "GET / HTTP/1.1\r\n\r\n", ""),
		diffReqCase("host/two", "GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n", ""),
		diffReqCase("host/two-same", "GET / HTTP/1.1\r\n"+diffHost+diffHost+"\r\n", ""),
		diffReqCase("host/invalid", "GET / HTTP/1.1\r\nHost: exa mple.com\r\n\r\n", ""),
		diffReqCase("host/space-before-colon", "GET / HTTP/1.1\r\nHost : example.com\r\n\r\n", ""),
		diffReqCase("header/space-before-colon", diffGet("X-A : 1\r\n"), ""),
		diffReqCase("header/obs-fold", diffGet("X-A: 1\r\n", " 2\r\n"), "N"),
		diffReqCase("header/obs-fold-tab", diffGet("X-A: 1\r\n", "\t2\r\n"), "N"),
		diffReqCase("header/no-colon", diffGet("X-A\r\n"), ""),
		diffReqCase("header/empty-name", diffGet(": v\r\n"), ""),
		diffReqCase("header/bad-name-byte", diffGet("X(A): 1\r\n"), ""),
		// Bare LF line ends: the loop waits for a CRLFCRLF that never comes
		// (net/http's textproto reader takes LF alone as a line end).
		diffReqCase("lf/bare-everywhere", "GET / HTTP/1.1\nHost: example.com\nX-A: 1\n\n", "N"),
		diffReqCase("lf/bare-request-line", "GET / HTTP/1.1\nHost: example.com\r\n\r\n", "N"),
		diffReqCase("lf/bare-in-header", "GET / HTTP/1.1\r\nHost: example.com\nX-A: 1\r\n\r\n", "N"),
		diffReqCase("ctl/cr-in-value", diffGet("X-A: a\rb\r\n"), ""),
		diffReqCase("ctl/0x01-in-value", diffGet("X-A: a\x01b\r\n"), ""),
		diffReqCase("ctl/del-in-value", diffGet("X-A: a\x7fb\r\n"), ""),
		diffReqCase("ctl/nul-in-value", diffGet("X-A: a\x00b\r\n"), ""),
		diffReqCase("proto/http10", "GET / HTTP/1.0\r\n"+diffHost+"\r\n", "N"),
		diffReqCase("proto/http10-keep-alive", "GET / HTTP/1.0\r\n"+diffHost+"Connection: keep-alive\r\n\r\n", "N"),
		diffReqCase("proto/http10-no-host", "GET / HTTP/1.0\r\n\r\n", "N"),
		diffReqCase("proto/http12", "GET / HTTP/1.2\r\n"+diffHost+"\r\n", "N"),
		diffReqCase("proto/http20", "GET / HTTP/2.0\r\n"+diffHost+"\r\n", ""),
		diffReqCase("proto/lowercase", "GET / http/1.1\r\n"+diffHost+"\r\n", ""),
		diffReqCase("request-line/double-space", "GET  / HTTP/1.1\r\n"+diffHost+"\r\n", ""),
		diffReqCase("request-line/trailing-space", "GET / HTTP/1.1 \r\n"+diffHost+"\r\n", ""),
		diffReqCase("target/absolute-form", "GET http://other.example/p?q=1 HTTP/1.1\r\n"+diffHost+"\r\n", "N"),
		diffReqCase("target/asterisk-options", "OPTIONS * HTTP/1.1\r\n"+diffHost+"\r\n", ""),
		diffReqCase("target/asterisk-get", "GET * HTTP/1.1\r\n"+diffHost+"\r\n", "N"),
		diffReqCase("target/bad-escape", "GET /a%zz HTTP/1.1\r\n"+diffHost+"\r\n", ""),
		diffReqCase("target/non-ascii", "GET /caf\xc3\xa9 HTTP/1.1\r\n"+diffHost+"\r\n", "N"),
		diffReqCase("body/content-length-0-get", diffGet("Content-Length: 0\r\n"), "N"),
		diffReqCase("body/chunked-get", diffGet("Transfer-Encoding: chunked\r\n")+"5\r\nhello\r\n0\r\n\r\n", "N"),
		diffReqCase("body/unsupported-te", "POST / HTTP/1.1\r\n"+diffHost+"Transfer-Encoding: gzip\r\n\r\n", ""),
		diffReqCase("expect/100-continue-get", diffGet("Expect: 100-continue\r\n"), "N"),
		{name: "expect/100-continue-post", via: "N", handler: diffOK, ex: []diffExchange{{
			send: "POST / HTTP/1.1\r\n" + diffHost + "Expect: 100-continue\r\nContent-Length: 5\r\n\r\nhello", methods: []string{"POST"}}}},
		diffReqCase("expect/unknown", diffGet("Expect: something\r\n"), ""),
		diffReqCase("upgrade/websocket", diffGet("Connection: Upgrade\r\n", "Upgrade: websocket\r\n", "Sec-WebSocket-Version: 13\r\n", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"), "N"),
		diffReqCase("method/post-body", post, "N"),
		diffReqCase("method/post-empty", "POST / HTTP/1.1\r\n"+diffHost+"Content-Length: 0\r\n\r\n", "N"),
		diffReqCase("method/post-no-length", "POST / HTTP/1.1\r\n"+diffHost+"\r\n", "N"),
		diffReqCase("method/post-chunked", "POST / HTTP/1.1\r\n"+diffHost+"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\nX-T: t\r\n\r\n", "N"),
		diffReqCase("method/put-body", "PUT /x HTTP/1.1\r\n"+diffHost+"Content-Length: 3\r\n\r\nabc", "N"),
		diffReqCase("method/put-empty", "PUT /x HTTP/1.1\r\n"+diffHost+"\r\n", "N"),
		diffReqCase("method/delete", "DELETE /x HTTP/1.1\r\n"+diffHost+"\r\n", "N"),
		diffReqCase("method/delete-body", "DELETE /x HTTP/1.1\r\n"+diffHost+"Content-Length: 2\r\n\r\nid", "N"),
		diffReqCase("method/options", "OPTIONS /x HTTP/1.1\r\n"+diffHost+"\r\n", "N"),
		diffReqCase("method/options-body", "OPTIONS /x HTTP/1.1\r\n"+diffHost+"Content-Length: 1\r\n\r\n?", "N"),
		diffReqCase("method/lowercase-get", "get / HTTP/1.1\r\n"+diffHost+"\r\n", "N"),
		diffReqCase("method/custom", "PURGE / HTTP/1.1\r\n"+diffHost+"\r\n", "N"),
		diffReqCase("size/value-6000", diffGet("X-Big: "+strings.Repeat("b", 6000)+"\r\n"), "N"),
		// net/http's 431 path (closeWriteAndWait) half-closes the connection
		// through CloseWrite; a handed-over connection must offer it too.
		{name: "size/over-max-header-bytes", via: "", handler: diffOK,
			config: func(s *http.Server) { s.MaxHeaderBytes = 4096 },
			ex:     oneExchange(diffGet("X-Big: " + strings.Repeat("b", 10000) + "\r\n"))},

		// Handler behaviours, on a GET the loop takes.
		diffRespCase("resp/nothing", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {}),
		diffRespCase("resp/204", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.WriteHeader(http.StatusNoContent)
		}),
		diffRespCase("resp/204-with-length-and-body", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.Header().Set("Content-Length", "5")
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusNoContent)
			diffWrite(w, note, "hello")
		}),
		diffRespCase("resp/304", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Content-Length", "42")
			w.Header().Set("Etag", `"x"`)
			w.WriteHeader(http.StatusNotModified)
		}),
		diffFieldsCase("resp/sniff-html", "<html><body>hi</body></html>"),
		diffFieldsCase("resp/sniff-text", "hello world"),
		diffFieldsCase("resp/sniff-json", `{"a": [1, 2, "x"]}`),
		diffFieldsCase("resp/sniff-png", pngMagic),
		diffRespCase("resp/sniff-split-writes", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			diffWrite(w, note, "<ht")
			diffWrite(w, note, "ml><p>x")
		}),
		diffFieldsCase("resp/content-encoding-gzip", "<html>not really gzip</html>", "Content-Encoding", "gzip"),
		diffFieldsCase("resp/content-encoding-empty", "<html>sniffed</html>", "Content-Encoding", ""),
		diffRespCase("resp/content-type-nil", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.Header()["Content-Type"] = nil
			diffWrite(w, note, "<html>not sniffed</html>")
		}),
		diffFieldsCase("resp/content-length-correct", "hello", "Content-Length", "5"),
		diffRespCase("resp/content-length-too-short", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.Header().Set("Content-Length", "5")
			diffWrite(w, note, "hello")
			diffWrite(w, note, " world")
		}),
		diffFieldsCase("resp/content-length-too-short-one-write", "hello", "Content-Length", "3"),
		diffFieldsCase("resp/content-length-too-long", "hello", "Content-Length", "10"),
		// net/http deletes an invalid Content-Length from the handler's map
		// after WriteHeader cloned it: the clone still has it, so no
		// Content-Length is computed and the body is chunked.
		diffFieldsCase("resp/content-length-invalid", "hello", "Content-Length", "abc"),
		diffFieldsCase("resp/content-length-negative", "hello", "Content-Length", "-5"),
		// net/http drops the (empty) Content-Length field when chunking.
		diffFieldsCase("resp/content-length-empty", "hello", "Content-Length", ""),
		diffFieldsCase("resp/content-length-twice", "hello", "Content-Length", "5", "Content-Length", "5"),
		diffFieldsCase("resp/content-length-with-te-chunked", "hello", "Content-Length", "5", "Transfer-Encoding", "chunked"),
		diffFieldsCase("resp/body-5000", body5000),
		diffFieldsCase("resp/body-2048", body5000[:2048]),
		diffFieldsCase("resp/body-2049", body5000[:2049]),
		diffRespCase("resp/small-writes-2000", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			for i := range 100 {
				diffWrite(w, note, fmt.Sprintf("line %13d\n", i))
			}
		}),
		diffRespCase("resp/small-writes-3000", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			for i := range 150 {
				diffWrite(w, note, fmt.Sprintf("line %13d\n", i))
			}
		}),
		diffRespCase("resp/small-then-large", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			diffWrite(w, note, "<html>")
			diffWrite(w, note, body5000[:3000])
		}),
		diffRespCase("resp/flush-after-write", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			diffWrite(w, note, "first ")
			w.(http.Flusher).Flush()
			diffWrite(w, note, "second")
		}),
		// A flush with nothing written must not write an empty chunk (the
		// last-chunk marker) after the head.
		diffRespCase("resp/flush-before-write", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.(http.Flusher).Flush()
			diffWrite(w, note, "<html>after flush")
		}),
		diffRespCase("resp/flush-only", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.(http.Flusher).Flush()
		}),
		diffRespCase("resp/controller-flush", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			diffWrite(w, note, "first ")
			note("flush: %v", http.NewResponseController(w).Flush())
			diffWrite(w, note, "second")
		}),
		diffRespCase("resp/controller-flush-before-write", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			note("flush: %v", http.NewResponseController(w).Flush())
			diffWrite(w, note, "x")
		}),
		diffRespCase("resp/controller-deadlines", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			rc := http.NewResponseController(w)
			note("read deadline: %v", rc.SetReadDeadline(time.Now().Add(time.Minute)))
			note("write deadline: %v", rc.SetWriteDeadline(time.Now().Add(time.Minute)))
			note("full duplex: %v", rc.EnableFullDuplex())
			diffWrite(w, note, "x")
		}),
		diffRespCase("resp/103-early-hints", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.Header().Add("Link", "</style.css>; rel=preload; as=style")
			w.Header().Add("Link", "</script.js>; rel=preload; as=script")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Set("Content-Type", "text/plain")
			diffWrite(w, note, "final")
		}),
		diffRespCase("resp/103-twice-then-201", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.Header().Set("Link", "</a>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Set("Link", "</b>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusCreated)
		}),
		diffRespCase("resp/100-explicit", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.WriteHeader(http.StatusContinue)
			diffWrite(w, note, "after 100")
		}),
		diffRespCase("resp/1xx-with-length-and-te", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.Header().Set("Content-Length", "5")
			w.Header().Set("Transfer-Encoding", "identity")
			w.Header().Set("X-Kept", "1")
			w.WriteHeader(http.StatusProcessing)
			diffWrite(w, note, "hello")
		}),
		diffRespCase("resp/writeheader-twice", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.WriteHeader(http.StatusCreated)
			w.WriteHeader(http.StatusInternalServerError)
			diffWrite(w, note, "created")
		}),
		diffRespCase("resp/write-then-writeheader", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			diffWrite(w, note, "ok")
			w.WriteHeader(http.StatusInternalServerError)
		}),
		diffRespCase("resp/header-changed-after-writeheader", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.Header().Set("X-A", "before")
			w.WriteHeader(http.StatusOK)
			w.Header().Set("X-A", "after")
			w.Header().Set("X-B", "after")
			w.Header().Set("Content-Type", "application/x-late")
			diffWrite(w, note, "<html>")
		}),
		diffRespCase("resp/header-after-writeheader-first-call", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.WriteHeader(http.StatusAccepted)
			w.Header().Set("X-Late", "1")
			w.Header().Set("Content-Length", "1")
			diffWrite(w, note, "accepted")
		}),
		diffRespCase("resp/header-after-write", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			diffWrite(w, note, "x")
			w.Header().Set("X-Late", "1")
		}),
		diffFieldsCase("resp/connection-close", "bye", "Connection", "close"),
		diffRespCase("resp/connection-close-flushed", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.Header().Set("Connection", "close")
			diffWrite(w, note, "bye")
			w.(http.Flusher).Flush()
		}),
		diffFieldsCase("resp/connection-close-in-list", "stays open", "Connection", "close, x-other"),
		diffFieldsCase("resp/connection-keep-alive", "x", "Connection", "keep-alive"),
		{name: "resp/connection-keep-alive-request-close", via: "L", ex: oneExchange(diffGet("Connection: close\r\n")),
			handler: func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
				w.Header().Set("Connection", "keep-alive")
				diffWrite(w, note, "x")
			}},
		// net/http keeps the handler's Connection when it holds "close"
		// as hasToken reads it (space separated here).
		{name: "resp/connection-space-close-request-close", via: "L", ex: oneExchange(diffGet("Connection: close\r\n")),
			handler: func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
				w.Header().Set("Connection", "x-other close")
				diffWrite(w, note, "x")
			}},
		diffFieldsCase("resp/te-identity", "<html>till close", "Transfer-Encoding", "identity"),
		diffFieldsCase("resp/te-identity-with-length", "hello", "Transfer-Encoding", "identity", "Content-Length", "5"),
		diffFieldsCase("resp/te-chunked-by-handler", "<html>chunked", "Transfer-Encoding", "chunked"),
		diffFieldsCase("resp/te-gzip-by-handler", "not gzip", "Transfer-Encoding", "gzip"),
		diffRespCase("resp/trailer-declared", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.Header().Set("Trailer", "X-T1, X-T2")
			w.Header().Add("Trailer", "X-T3")
			diffWrite(w, note, "body")
			w.Header().Set("X-T1", "one")
			w.Header().Add("X-T2", "two-a")
			w.Header().Add("X-T2", "two-b")
			w.Header().Set("X-Undeclared", "u")
		}),
		diffRespCase("resp/trailer-forbidden-and-odd-names", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.Header().Set("Trailer", " ,content-length, x-lower ,, Transfer-Encoding,X-T ")
			diffWrite(w, note, "body")
			w.Header().Set("Content-Length", "99")
			w.Header().Set("X-Lower", "l")
			w.Header().Set("X-T", "t")
		}),
		diffRespCase("resp/trailer-no-body", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.Header().Set("Trailer", "X-T")
			w.Header().Set("X-T", "t")
		}),
		diffRespCase("resp/trailer-with-content-length", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.Header().Set("Trailer", "X-T")
			w.Header().Set("Content-Length", "4")
			diffWrite(w, note, "body")
			w.Header().Set("X-T", "t")
		}),
		diffRespCase("resp/trailer-prefix", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			diffWrite(w, note, "body")
			w.Header().Set(http.TrailerPrefix+"X-P", "p")
		}),
		diffRespCase("resp/trailer-prefix-before-body", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.Header().Set(http.TrailerPrefix+"X-P", "early")
			diffWrite(w, note, "body")
			w.Header().Set(http.TrailerPrefix+"X-Q", "late")
		}),
		diffFieldsCase("resp/header-value-crlf", "x", "X-Inject", "a\r\nX-Injected: 1", "X-Lead", "\r\n lead and trail \r\n", "X-Lf", "a\nb", "X-Spaces", "  \t padded \t "),
		diffRespCase("resp/invalid-header-names", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.Header()["Bad Name"] = []string{"1"}
			w.Header()["X:Colon"] = []string{"2"}
			w.Header()[""] = []string{"3"}
			w.Header()["X-Ok"] = []string{"4"}
			w.Header()["lower-case"] = []string{"5"}
			diffWrite(w, note, "x")
		}),
		diffRespCase("resp/status-599", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.WriteHeader(599)
			diffWrite(w, note, "x")
		}),
		diffRespCase("resp/status-999", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.WriteHeader(999)
		}),
		diffRespCase("resp/status-101-no-upgrade", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.WriteHeader(http.StatusSwitchingProtocols)
		}),
		diffRespCase("resp/status-0-panics", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.WriteHeader(0)
		}),
		diffFieldsCase("resp/date-set-by-handler", "x", "Date", "Mon, 02 Jan 2006 15:04:05 GMT"),
		// io.Copy into net/http's writer goes through its ReadFrom, which
		// writes the head after the first 512 bytes (so: chunked).
		diffRespCase("resp/io-copy", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			n, err := io.Copy(w, diffOnlyReader{strings.NewReader(body5000[:1000])})
			note("copied %d: %v", n, err)
		}).documented("io.Copy: no ReadFrom, so a small body gets a Content-Length", `"Content-Length": ["1000"]`).overTCPOnly(),
		// Hijacker aside (documented), net/http's writer also offers these.
		diffRespCase("resp/optional-interfaces", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			_, flusher := w.(http.Flusher)
			//lint:ignore SA1019 the case lists what net/http's writer offers, the deprecated CloseNotifier among it
			_, closeNotifier := w.(http.CloseNotifier)
			_, readerFrom := w.(io.ReaderFrom)
			_, stringWriter := w.(io.StringWriter)
			note("Flusher=%v CloseNotifier=%v io.ReaderFrom=%v io.StringWriter=%v", flusher, closeNotifier, readerFrom, stringWriter)
		}).documented("no CloseNotifier, ReadFrom or WriteString", "CloseNotifier=false io.ReaderFrom=false io.StringWriter=false"),
		{name: "head/small-body", via: "L", ex: oneExchange(diffHead()),
			handler: func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
				diffWrite(w, note, "<html>hello")
			}},
		{name: "head/nothing", via: "L", ex: oneExchange(diffHead()),
			handler: func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {}},
		{name: "head/large-body", via: "L", ex: oneExchange(diffHead()),
			handler: func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) { diffWrite(w, note, body5000) }},
		{name: "head/content-length-no-write", via: "L", ex: oneExchange(diffHead()),
			handler: func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
				w.Header().Set("Content-Length", "100")
			}},
		{name: "head/flush", via: "L", ex: oneExchange(diffHead()),
			handler: func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
				diffWrite(w, note, "x")
				w.(http.Flusher).Flush()
			}},
		{name: "head/then-get", via: "LL", handler: diffOK, ex: []diffExchange{{
			send: diffHead() + diffGet(), methods: []string{"HEAD", "GET"}}}},
		diffRespCase("panic/abort-before-write", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			panic(http.ErrAbortHandler)
		}),
		diffRespCase("panic/abort-after-unflushed-write", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			diffWrite(w, note, "lost")
			panic(http.ErrAbortHandler)
		}),
		diffRespCase("panic/abort-after-flush", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			diffWrite(w, note, "partial")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}),
		// On a panic net/http flushes only what reached its connection's
		// buffer, not what its 2048-byte response buffer still held.
		diffRespCase("panic/abort-after-flush-and-write", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			diffWrite(w, note, "partial")
			w.(http.Flusher).Flush()
			diffWrite(w, note, "-more")
			panic(http.ErrAbortHandler)
		}).documented("a panic sends all that was written", `body="partial-more" err=unexpected EOF`),
		diffRespCase("panic/abort-after-large-write", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			diffWrite(w, note, body5000[:3000])
			panic(http.ErrAbortHandler)
		}).documented("a panic sends all that was written", "body=(3000 bytes"),
		diffRespCase("panic/other-value", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			panic("boom")
		}),

		diffRespCase("resp/te-chunked-no-body", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.Header().Set("Transfer-Encoding", "chunked")
		}),
		diffRespCase("resp/writeheader-then-flush", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			w.WriteHeader(http.StatusAccepted)
			w.(http.Flusher).Flush()
		}),
		diffRespCase("resp/flush-twice-between-writes", func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
			diffWrite(w, note, "a")
			w.(http.Flusher).Flush()
			w.(http.Flusher).Flush()
			diffWrite(w, note, "b")
			w.(http.Flusher).Flush()
		}),
		diffReqCase("get/fragment-in-target", "GET /a#frag?x HTTP/1.1\r\n"+diffHost+"\r\n", "L"),
		diffReqCase("get/escaped-nul", "GET /%00?%00 HTTP/1.1\r\n"+diffHost+"\r\n", "L"),
		diffReqCase("proto/h2-preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "N"),

		// The client and timing.
		{name: "client/half-close-slow-handler", via: "L", ex: []diffExchange{{send: diffGet(), methods: []string{"GET"}, closeWrite: true}},
			handler: func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
				select {
				case <-r.Context().Done():
					note("context done: %v", r.Context().Err())
				case <-time.After(testkit.Slack(time.Second)):
					note("context not done after 1s (stretched by the machine's pace)")
				}
				diffWrite(w, note, "x")
			}},
		{name: "client/half-close-fast-handler", via: "L", handler: diffOK, ex: []diffExchange{{send: diffGet(), methods: []string{"GET"}, closeWrite: true}}},
		{name: "pipeline/slow-handler", via: "LL", ex: []diffExchange{{
			send: "GET /slow HTTP/1.1\r\n" + diffHost + "\r\nGET /fast HTTP/1.1\r\n" + diffHost + "\r\n", methods: []string{"GET", "GET"}}},
			handler: func(w http.ResponseWriter, r *http.Request, note func(string, ...any)) {
				if r.URL.Path == "/slow" {
					time.Sleep(40 * time.Millisecond) // past the 20 ms after which the loop watches
				}
				note("context: %v", r.Context().Err())
				diffWrite(w, note, r.URL.Path)
			}},
		{name: "timeout/read-header", via: "", handler: diffOK,
			config: func(s *http.Server) { s.ReadHeaderTimeout = testkit.Slack(500 * time.Millisecond) },
			ex:     oneExchange("GET / HTTP/1.1\r\nHost: exa")},
		{name: "timeout/idle", via: "L", handler: diffOK, ex: oneExchange(diffGet()),
			config: func(s *http.Server) { s.IdleTimeout = testkit.Slack(500 * time.Millisecond) }},
		{name: "timeout/read-as-idle", via: "L", handler: diffOK, ex: oneExchange(diffGet()),
			config: func(s *http.Server) { s.ReadTimeout = testkit.Slack(500 * time.Millisecond) }},
		// A negative IdleTimeout or ReadHeaderTimeout means none (net/http's
		// idleTimeout and readHeaderTimeout fall back on ReadTimeout only
		// when they are 0).
		{name: "timeout/idle-negative", via: "L", handler: diffOK, ex: oneExchange(diffGet()),
			config: func(s *http.Server) { s.IdleTimeout = -1; s.ReadTimeout = testkit.Slack(500 * time.Millisecond) }},
		{name: "timeout/read-header-negative", via: "", handler: diffOK, ex: oneExchange("GET / HTTP/1.1\r\nHost: exa"),
			config: func(s *http.Server) { s.ReadHeaderTimeout = -1; s.ReadTimeout = testkit.Slack(500 * time.Millisecond) }},

		// Server settings.
		// SetKeepAlivesEnabled(false): every answer says Connection: close.
		{name: "server/keep-alives-disabled", via: "L", ex: oneExchange(diffGet()), handler: diffOK,
			differs: "SetKeepAlivesEnabled(false) is not seen", loopShows: "after: connection open",
			config: func(s *http.Server) { s.SetKeepAlivesEnabled(false) }},
		// A nil Handler means http.DefaultServeMux.
		{name: "server/nil-handler-default-mux", via: "", ex: oneExchange("GET /h1serve-diff-default-mux HTTP/1.1\r\n" + diffHost + "\r\n"),
			config: func(s *http.Server) {
				diffDefaultMuxOnce.Do(func() {
					http.HandleFunc("/h1serve-diff-default-mux", func(w http.ResponseWriter, r *http.Request) {
						io.WriteString(w, "default mux\n")
					})
				})
				s.Handler = nil
			}},
	}
	return append(cases, diffRelayCases(body5000)...)
}

// ---------------------------------------------------------------------
// The tests.

func TestDifferential(t *testing.T) {
	t.Parallel()
	runDifferential(t, nil)
}

// TestDifferentialTLS runs the cases over TLS: the loop serves HTTP/1.1
// over TLS as net/http's ServeTLS does, the requests carrying the same
// TLS state.
func TestDifferentialTLS(t *testing.T) {
	t.Parallel()
	runDifferential(t, diffTLSConfig(t))
}

// diffTLSConfig is a server's TLS config with a fresh self-signed
// certificate, offering h2 and http/1.1 as net/http's ServeTLS does.
func diffTLSConfig(t *testing.T) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), DNSNames: []string{"example.com"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		NextProtos:   []string{"h2", "http/1.1"},
	}
}

func runDifferential(t *testing.T, tlsCfg *tls.Config) {
	cases := diffCases()
	names := make(map[string]bool)
	for _, tc := range cases {
		if names[tc.name] {
			t.Fatalf("duplicate case name %q", tc.name)
		}
		names[tc.name] = true
	}

	// Run the cases' exchanges diffCasesAtOnce at a time (most of the time
	// goes to waiting for a connection's close or its absence), then
	// compare.
	type result struct{ loop, std diffSide }
	results := make([]result, len(cases))
	var wg sync.WaitGroup
	slots := make(chan struct{}, diffCasesAtOnce)
	for i := range cases {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			var both sync.WaitGroup
			both.Go(func() { results[i].loop = runDiffSide(t, true, tlsCfg, &cases[i]) })
			results[i].std = runDiffSide(t, false, tlsCfg, &cases[i])
			both.Wait()
		})
	}
	testkit.Await(t, wg.Wait, 10*time.Minute, "every case on both servers")

	for i, tc := range cases {
		res := results[i]
		if tc.tcpOnly && tlsCfg != nil {
			tc.differs, tc.loopShows = "", ""
		}
		t.Run(tc.name, func(t *testing.T) {
			loop, std := res.loop, res.std
			// A case whose two sides differ, or whose handshake failed, runs
			// again alone, a few times at most: the burst of every case at
			// once on a busy machine can stall one side past a wait (a
			// body slow to end, a handshake cut off by a case's short
			// timeouts, which bound it as in net/http); a real difference
			// shows alone as well.
			differ := func(a, b diffSide) bool {
				return a.render != b.render || strings.Join(a.obs, "----\n") != strings.Join(b.obs, "----\n")
			}
			for try := 0; try < 3 && (tc.differs == "" && differ(loop, std) ||
				strings.HasPrefix(loop.render, "handshake:") || strings.HasPrefix(std.render, "handshake:")); try++ {
				loop, std = runDiffSide(t, true, tlsCfg, &cases[i]), runDiffSide(t, false, tlsCfg, &cases[i])
			}
			var problems []string
			lo, so := strings.Join(loop.obs, "----\n"), strings.Join(std.obs, "----\n")
			switch {
			case tc.differs != "":
				if loop.render == std.render && lo == so {
					problems = append(problems, "documented as differing ("+tc.differs+"), the two now agree: drop the note")
				}
				if !strings.Contains(loop.render+lo, tc.loopShows) {
					problems = append(problems, fmt.Sprintf("h1serve's side does not show %q (%s)", tc.loopShows, tc.differs))
				}
			case loop.render != std.render:
				problems = append(problems, "the responses differ")
			}
			if tc.differs == "" && lo != so {
				problems = append(problems, fmt.Sprintf("the handlers saw different requests\n--- h1serve's handler saw:\n%s--- net/http's handler saw:\n%s", lo, so))
			}
			var via strings.Builder
			for _, w := range loop.writers {
				switch w {
				case "*h1serve.response":
					via.WriteByte('L')
				case "*http.response":
					via.WriteByte('N')
				default:
					via.WriteString("(" + w + ")")
				}
			}
			if via.String() != tc.via {
				problems = append(problems, fmt.Sprintf("h1serve served the handler calls via %q (L: its loop, N: net/http), want %q", via.String(), tc.via))
			}
			for _, w := range std.writers {
				if w != "*http.response" {
					problems = append(problems, "net/http's handler got a "+w)
				}
			}
			if len(std.writers) != len(tc.via) {
				problems = append(problems, fmt.Sprintf("net/http ran the handler %d times, the case expects %d", len(std.writers), len(tc.via)))
			}
			if len(problems) == 0 {
				return
			}
			var b strings.Builder
			for _, p := range problems {
				b.WriteString(p + "\n")
			}
			for k, e := range tc.ex {
				fmt.Fprintf(&b, "request bytes (write %d): %s\n", k, diffClip(e.send, 600))
			}
			fmt.Fprintf(&b, "--- h1serve answered:\n%s--- net/http answered:\n%s", loop.render, std.render)
			fmt.Fprintf(&b, "--- h1serve raw: %s\n--- net/http raw: %s", diffClip(loop.raw, 1500), diffClip(std.raw, 1500))
			t.Error(b.String())
		})
	}
}

// clip quotes s, cutting its middle when it is longer than n.
func diffClip(s string, n int) string {
	if len(s) <= n {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q ...(%d bytes in all)... %q", s[:n*2/3], len(s), s[len(s)-n/3:])
}

// serveWatched serves h through the loop until the test ends, and returns
// its address and the ConnState calls net/http made so far.
func serveWatched(t *testing.T, h http.Handler) (addr string, states func() []http.ConnState) {
	var mu sync.Mutex
	var seen []http.ConnState
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		ErrorLog: diffDiscardLog,
		Handler:  h,
		ConnState: func(c net.Conn, s http.ConnState) {
			mu.Lock()
			seen = append(seen, s)
			mu.Unlock()
		},
	}
	s := h1serve.New(srv)
	testkit.ServeOn(t, ln, s.Serve, s.Close)
	return ln.Addr().String(), func() []http.ConnState {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// TestLoopServesWithoutNetHTTP checks that net/http never sees a
// connection of simple requests (ConnState is called only for the
// connections it serves), and that it takes the connection over from the
// first request the loop does not take, for good.
func TestLoopServesWithoutNetHTTP(t *testing.T) {
	t.Parallel()
	addr, getStates := serveWatched(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Writer", fmt.Sprintf("%T", w))
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	roundTrip := func(req, method, wantWriter string) {
		t.Helper()
		c.SetDeadline(time.Now().Add(testkit.Slack(2 * time.Second)))
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("%q: %v", req, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-Writer") != wantWriter {
			t.Fatalf("%q: status %d, writer %q, want 200 from %q", req, resp.StatusCode, resp.Header.Get("X-Writer"), wantWriter)
		}
	}

	roundTrip(diffGet(), "GET", "*h1serve.response")
	roundTrip(diffHead(), "HEAD", "*h1serve.response")
	roundTrip(diffGet("Pragma: no-cache\r\n", "Connection: keep-alive\r\n"), "GET", "*h1serve.response")
	// Had net/http served a request, ConnState(StateNew) would have run
	// before its response was written.
	if st := getStates(); len(st) != 0 {
		t.Fatalf("ConnState saw %v for a connection of GETs the loop should serve", st)
	}

	roundTrip("POST /p HTTP/1.1\r\n"+diffHost+"Content-Length: 5\r\n\r\nhello", "POST", "*http.response")
	if st := getStates(); len(st) < 2 || st[0] != http.StateNew || st[1] != http.StateActive {
		t.Fatalf("after a POST, ConnState saw %v, want [new active ...]", st)
	}
	// The connection stays with net/http.
	roundTrip(diffGet(), "GET", "*http.response")

	c.Close()
	deadline := time.Now().Add(testkit.Slack(2 * time.Second))
	for !slices.Contains(getStates(), http.StateClosed) {
		if time.Now().After(deadline) {
			t.Fatalf("ConnState never saw the handed-over connection close: %v", getStates())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLoopConnectionNeverSeenByNetHTTP checks, on connections of
// simple requests only (one, one with Connection: close, a pipeline of
// three), that ConnState never runs: the loop served them alone.
func TestLoopConnectionNeverSeenByNetHTTP(t *testing.T) {
	t.Parallel()
	addr, getStates := serveWatched(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))

	for _, e := range []diffExchange{
		{send: diffGet(), methods: []string{"GET"}},
		{send: diffGet("Connection: close\r\n"), methods: []string{"GET"}},
		{send: diffGet() + diffHead() + diffGet("X-A: 1\r\n", "x-b: 2\r\n"), methods: []string{"GET", "HEAD", "GET"}},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(testkit.Slack(2 * time.Second)))
		io.WriteString(c, e.send)
		br := bufio.NewReader(c)
		for _, m := range e.methods {
			resp, err := http.ReadResponse(br, &http.Request{Method: m})
			if err != nil {
				t.Fatalf("%q: %v", e.send, err)
			}
			io.Copy(io.Discard, resp.Body)
		}
		c.Close()
	}
	// Had net/http served one of these requests, ConnState(StateNew) would
	// have run before its response was written.
	if st := getStates(); len(st) != 0 {
		t.Fatalf("ConnState saw %v on connections the loop should serve alone", st)
	}
}
