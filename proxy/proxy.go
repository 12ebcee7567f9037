// Package proxy is linkgate's reverse proxy: it balances requests
// round-robin over the healthy upstream targets, takes a target out when it
// refuses connections or fails its health check and puts it back when the
// check passes, retries a request that could not connect on another target
// when the request may be sent twice, keeps a connection pool sized for the
// load, sets the X-Forwarded-* headers believing a client's own only from
// trusted proxies, streams bodies untouched, and answers 502/504 with RFC 9457
// problem bodies when the upstream cannot (408 or 400 when the client's body
// arrives too slowly or malformed).
//
// Requests go upstream through one client of the package's own, an
// HTTP/1.1 client over TCP to http:// targets and over TLS to https://
// ones (client.go). httputil.ReverseProxy over an http.Transport serves
// only the https:// targets that choose HTTP/2 when offered it: HTTP/2's
// framing, flow control and multiplexing are net/http's to speak, and a
// target that offers it is reached over it, as it always was.
package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/problem"
)

// Proxy is an http.Handler that forwards requests to the targets of one
// upstream Plan. It is safe for concurrent use; the zero value is not
// usable, call New. The gateway builds a new Proxy when the upstream section
// changes and Closes the old one.
type Proxy struct {
	// h1 is set unless the proxy is NewStdlib's: requests go through the
	// proxy's own HTTP/1.1 client (client.go) and the targets' pools
	// (h1Pool), but for the targets that speak HTTP/2, which go through
	// rp and transport (serveTransport).
	h1        bool
	rp        *httputil.ReverseProxy
	pool      *pool
	transport *http.Transport
	dialer    *net.Dialer
	trust     *forwarded.Trust
	headers   forwarded.Policy // which of the client's headers reach the upstream
	rht       time.Duration    // upstream.response_header_timeout
	m         *Metrics
	log       *slog.Logger
	opened    *atomic.Int64 // shared with the Proxies renewed from this one

	checkPath    string
	checkTimeout time.Duration

	stop      context.CancelFunc
	done      chan struct{} // closed when the health loop has returned
	rounds    atomic.Int64  // health-check rounds completed
	closeOnce sync.Once
}

// New builds the client of plan and starts health checking in a
// goroutine until Close; the first check runs at once, and until it answers
// every target counts as healthy so the gateway serves immediately. m and
// log may be nil.
//
// Requests go through the proxy's own HTTP/1.1 client, which keeps a
// connection pool per target, over TLS to an https:// target. An https://
// target that chooses HTTP/2 when offered it (its first connection's
// ALPN) is served by httputil.ReverseProxy over an http.Transport
// instead, for as long as its pool lives: HTTP/2's framing, flow control
// and stream multiplexing are net/http's to speak, not a second client's
// to copy.
func New(plan *Plan, m *Metrics, log *slog.Logger) *Proxy {
	return Renew(nil, plan, m, log)
}

// Renew is New for a plan that replaces the Proxies of old (a reload):
// the targets that plan lists and one of old lists too, with the same
// dial timeout, idle cap and TLS settings, keep that Proxy's idle connections,
// which its Close then leaves open. The gateway passes every Proxy of the
// running config, one per pool, so that a target keeps its connections
// when it moves from one pool to another. old may be empty.
func Renew(old []*Proxy, plan *Plan, m *Metrics, log *slog.Logger) *Proxy {
	return newProxy(old, plan, m, log, false)
}

func newProxy(old []*Proxy, plan *Plan, m *Metrics, log *slog.Logger, stdlib bool) *Proxy {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := plan.cfg
	p := &Proxy{
		pool:         newPool(plan.targets, m),
		dialer:       &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second},
		trust:        plan.trust,
		headers:      plan.headers,
		rht:          cfg.ResponseHeaderTimeout,
		m:            m,
		log:          log,
		opened:       new(atomic.Int64),
		checkPath:    cfg.HealthCheck.Path,
		checkTimeout: cfg.DialTimeout,
		done:         make(chan struct{}),
	}
	if len(old) > 0 {
		p.opened = old[0].opened
	}
	p.h1 = !stdlib
	if p.h1 {
		p.sharePools(old, plan)
	}
	p.transport = newTransport(plan, p.dial)
	p.rp = &httputil.ReverseProxy{
		Rewrite:      p.rewrite,
		Transport:    retrier{p},
		BufferPool:   &buffers,
		ErrorHandler: p.handleError,
		// An upstream may answer a body that the client was too slow to
		// send, or framed badly, having read it cut short: the client gets
		// 408 or 400 instead.
		ModifyResponse: func(resp *http.Response) error {
			if bodyTimedOut(resp.Request.Context()) {
				return ErrBodyTimeout
			}
			if clientBodyFailed(resp.Request.Context()) {
				return errClientBody
			}
			return nil
		},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// FlushInterval 0: a response of known length is written through a
		// buffer; one of unknown length (chunked, event streams) is flushed
		// after every read, so streaming works.
	}
	ctx, stop := context.WithCancel(context.Background())
	p.stop = stop
	go p.healthLoop(ctx, cfg.HealthCheck.Interval)
	return p
}

// sharePools gives each target its connection pool for the own client:
// the pool of a Proxy of old with the same key, or a new one.
func (p *Proxy) sharePools(old []*Proxy, plan *Plan) {
	cfg := plan.cfg
	for _, t := range p.pool.targets {
		key := poolKey{addr: hostPort(t.url), https: t.url.Scheme == "https", dialTimeout: cfg.DialTimeout, maxIdle: cfg.MaxIdleConnsPerHost, maxOpen: cfg.MaxConnsPerHost}
		if key.https {
			key.tls = plan.tlsKey()
		}
	search:
		for _, o := range old {
			if o == nil || !o.h1 {
				continue
			}
			for _, ot := range o.pool.targets {
				if ot.h1.key == key {
					t.h1 = ot.h1
					break search
				}
			}
		}
		if t.h1 == nil {
			t.h1 = newH1Pool(key, plan.tls, p.opened, p.m)
		}
		t.h1.acquire()
	}
}

// ServeHTTP forwards r to the next healthy target.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Body != nil && r.Body != http.NoBody {
		b := &clientBody{ReadCloser: r.Body}
		r = r.WithContext(context.WithValue(r.Context(), clientBodyKey{}, b))
		r.Body = b
	}
	if p.h1 {
		if r.Context().Value(http.ServerContextKey) == nil {
			// Not under an http.Server (a test calling ServeHTTP): a
			// response cut short just ends, as with httputil.ReverseProxy.
			defer func() {
				if v := recover(); v != nil && v != errAbortNoServer {
					panic(v)
				}
			}()
		}
		p.serveH1(w, r)
		return
	}
	p.rp.ServeHTTP(w, r)
}

// hostPort is the address to dial for a target.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return net.JoinHostPort(u.Hostname(), "443")
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// clientBody is a request body as the proxy reads it from the client. It
// notes a read that failed, so that a body the client framed badly (a
// malformed chunk) is answered as the client's error, not counted as the
// upstream's: the transport reports it as a failed exchange like any other.
type clientBody struct {
	io.ReadCloser
	failed atomic.Bool // a read returned an error other than io.EOF
}

func (b *clientBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.failed.Store(true)
	}
	return n, err
}

// errClientBody is ModifyResponse's error for an answer to a body that
// failed to arrive whole.
var errClientBody = errors.New("proxy: the client's request body could not be read")

type clientBodyKey struct{}

// clientBodyFailed reports whether reading the client's body of the
// request of ctx failed. ReverseProxy wraps the outgoing request's body, so
// the context, not the body, carries it.
func clientBodyFailed(ctx context.Context) bool {
	b, ok := ctx.Value(clientBodyKey{}).(*clientBody)
	return ok && b.failed.Load()
}

// Ready reports whether at least one target is healthy.
func (p *Proxy) Ready() bool { return p.pool.anyHealthy() }

// TargetStatus is the health of one target, as Status reports it.
type TargetStatus struct {
	Target  string `json:"target"` // scheme://host:port
	Healthy bool   `json:"healthy"`
}

// Status returns the health of each target, in config order, for readiness
// and admin pages.
func (p *Proxy) Status() []TargetStatus {
	out := make([]TargetStatus, len(p.pool.targets))
	for i, t := range p.pool.targets {
		out[i] = TargetStatus{Target: t.name, Healthy: t.healthy.Load()}
	}
	return out
}

// ConnectionsOpened returns how many upstream connections this Proxy has
// opened, health checks included.
func (p *Proxy) ConnectionsOpened() int64 { return p.opened.Load() }

// Close stops the health checks and closes the idle upstream connections.
// Requests in flight finish normally; their connections close when they go
// idle (IdleConnTimeout). Close is idempotent.
func (p *Proxy) Close() {
	p.closeOnce.Do(func() {
		p.stop()
		<-p.done
		p.transport.CloseIdleConnections()
		for _, t := range p.pool.targets {
			if t.h1 != nil {
				t.h1.release()
			}
			p.m.release(t.name)
		}
	})
}

// rewrite points the outgoing request at the next healthy target and sets
// the forwarding headers. ReverseProxy has already removed the client's
// Forwarded and X-Forwarded-* headers from pr.Out (they stay in pr.In).
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	out, in := pr.Out, pr.In
	t, _ := in.Context().Value(targetKey{}).(*target) // serveTransport's choice
	if t == nil {
		t = p.pool.pick()
	}
	if t != nil {
		out.URL.Scheme, out.URL.Host = t.url.Scheme, t.url.Host
	} else {
		// An absolute-form request line (GET http://elsewhere/) leaves a host
		// here; clear it so the transport refuses with ErrNoHealthyTarget.
		out.URL.Scheme, out.URL.Host = "", ""
	}
	// The Host header goes upstream as the client sent it: the web servers
	// see the public name (for absolute redirects, virtual hosts and cookies)
	// rather than an internal address. Upstreams that need their own name
	// must be configured to answer to the public one.
	out.Host = in.Host
	// Who the client is, and which of its headers are believed, is decided
	// by forwarded alone: the limiter asks the same Trust.
	p.trust.SetHeaders(out.Header, in, p.headers)
}

// targetKey is the context key of the target serveTransport chose.
type targetKey struct{}

// serveTransport forwards r to t through httputil.ReverseProxy over the
// http.Transport: the own client's way for a target that speaks HTTP/2.
func (p *Proxy) serveTransport(w http.ResponseWriter, r *http.Request, t *target) {
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, t)))
}

// handleError is the ReverseProxy's ErrorHandler: r is the outgoing
// request, pointed at its target.
func (p *Proxy) handleError(w http.ResponseWriter, r *http.Request, err error) {
	p.fail(w, r, p.pool.lookup(r.URL), err)
}

// fail answers a request the upstream did not: 502 when no target could
// be reached or the connection broke, 503 when every connection the
// target may have is in use (max_conns_per_host), 504 when the upstream
// did not answer in time. t is the target tried last, nil for none. The detail never
// names a target.
func (p *Proxy) fail(w http.ResponseWriter, r *http.Request, t *target, err error) {
	var cut bodyCutError
	if errors.As(err, &cut) {
		// The proxy stopped reading the client's body when the upstream
		// failed: the body's failed read and the request's ended context
		// are its own doing. The rest of the body is unread, so the
		// connection cannot carry another request.
		problem.CloseConnection(w, r)
		p.upstreamFailed(w, r, t, cut.err)
		return
	}
	if errors.Is(err, ErrBodyTimeout) || bodyTimedOut(r.Context()) {
		// The client, not the upstream, was too slow: RFC 9110 §15.5.9.
		// The server cancelled the request when the read failed, so this
		// comes before "the client went away": it is still there to read
		// the answer. What is left of its body is unread, so the
		// connection cannot carry another request.
		p.log.Debug("client sent its body too slowly", "method", r.Method, "path", r.URL.Path)
		problem.CloseConnection(w, r)
		problem.Write(w, http.StatusRequestTimeout, "the request body arrived too slowly")
		return
	}
	if errors.Is(err, context.Canceled) || errors.Is(r.Context().Err(), context.Canceled) {
		// The client went away; there is no one to answer.
		p.log.Debug("client gone before the upstream answered", "method", r.Method, "path", r.URL.Path)
		return
	}
	if errors.Is(err, errClientBody) || clientBodyFailed(r.Context()) {
		// The client sent a body that cannot be read (a malformed chunk:
		// RFC 9112 section 7.1); the exchange with the upstream broke
		// because of it. The rest of the connection cannot be framed.
		p.log.Debug("client sent a malformed request body", "method", r.Method, "path", r.URL.Path, "err", err)
		problem.CloseConnection(w, r)
		problem.Write(w, http.StatusBadRequest, "the request body is malformed")
		return
	}
	p.upstreamFailed(w, r, t, err)
}

// upstreamFailed answers a request that failed for the upstream's part
// (fail).
func (p *Proxy) upstreamFailed(w http.ResponseWriter, r *http.Request, t *target, err error) {
	target := ""
	if t != nil {
		target = t.name
	}
	var ne net.Error
	switch {
	case errors.Is(err, errPoolBusy):
		// Every connection the target may have is in use: the client may
		// try again in a moment (RFC 9110 section 15.6.4).
		p.m.failed(reasonBusy)
		p.log.Warn("upstream connections all in use", "target", target, "method", r.Method, "path", r.URL.Path)
		w.Header().Set("Retry-After", "1")
		problem.Write(w, http.StatusServiceUnavailable, "the upstream is busy; try again in a moment")
	case errors.Is(err, ErrNoHealthyTarget):
		p.m.failed(reasonUnreachable)
		p.log.Debug("no healthy upstream target", "method", r.Method, "path", r.URL.Path)
		problem.Write(w, http.StatusBadGateway, "upstream unreachable")
	case errors.Is(r.Context().Err(), context.DeadlineExceeded):
		// The request's own deadline (set by the gateway) ran out, whatever
		// stage the upstream exchange was in.
		p.m.failed(reasonTimeout)
		p.log.Warn("request deadline passed before the upstream answered", "target", target, "method", r.Method, "path", r.URL.Path, "err", err)
		problem.Write(w, http.StatusGatewayTimeout, "upstream did not answer in time")
	case isDialError(err):
		p.m.failed(reasonUnreachable)
		p.log.Warn("upstream unreachable", "target", target, "method", r.Method, "path", r.URL.Path, "err", err)
		problem.Write(w, http.StatusBadGateway, "upstream unreachable")
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		p.m.failed(reasonTimeout)
		p.log.Warn("upstream timed out", "target", target, "method", r.Method, "path", r.URL.Path, "err", err)
		problem.Write(w, http.StatusGatewayTimeout, "upstream did not answer in time")
	default:
		p.m.failed(reasonFailed)
		p.log.Warn("upstream failed", "target", target, "method", r.Method, "path", r.URL.Path, "err", err)
		problem.Write(w, http.StatusBadGateway, "upstream connection failed")
	}
}

// buffers recycles the 32 KiB buffers ReverseProxy copies bodies through;
// without a pool it allocates one per request.
var buffers bufferPool

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }
