package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"
)

// ErrNoHealthyTarget is the error of a request that found every target out
// of the pool.
var ErrNoHealthyTarget = errors.New("proxy: no healthy upstream target")

// NewTransport returns the tuned transport the proxy sends requests with,
// without its connection counting and retries: keep-alive pooling sized by
// upstream.max_idle_conns_per_host (Go's default of 2 idle connections per
// host makes a loaded proxy open thousands of connections a second), the
// plan's dial and response-header timeouts, no environment proxy, and no
// transparent gzip (the body is passed on exactly as the upstream sent it),
// and the pool's TLS settings (upstream.tls) for https:// targets.
// BenchmarkBareReverseProxy uses it for the bare httputil.ReverseProxy the
// proxy is compared with.
func NewTransport(p *Plan) *http.Transport {
	d := &net.Dialer{Timeout: p.cfg.DialTimeout, KeepAlive: 30 * time.Second}
	return newTransport(p, d.DialContext)
}

func newTransport(p *Plan, dial func(context.Context, string, string) (net.Conn, error)) *http.Transport {
	cfg := p.cfg
	https := false
	for _, t := range cfg.Targets {
		https = https || strings.HasPrefix(t, "https:")
	}
	var tc *tls.Config
	if p.tls != nil {
		// A copy per transport: setting up HTTP/2 adds "h2" to the
		// transport's NextProtos, and the plan may serve several proxies.
		tc = p.tls.Clone()
	}
	return &http.Transport{
		TLSClientConfig:     tc,
		Proxy:               nil, // never an environment proxy: packages do not read the environment
		DialContext:         dial,
		MaxIdleConns:        0, // no global cap; the per-host cap bounds the pool
		MaxIdleConnsPerHost: cfg.MaxIdleConnsPerHost,
		MaxConnsPerHost:     cfg.MaxConnsPerHost,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		// A slow upstream yields 504 instead of holding the client forever.
		ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
		ExpectContinueTimeout: 1 * time.Second,
		// Without this the transport adds "Accept-Encoding: gzip" and
		// decompresses behind the client's back.
		DisableCompression: true,
		// HTTP/2 only matters over TLS; plain-http targets stay on HTTP/1.1
		// keep-alive connections.
		ForceAttemptHTTP2: https,
	}
}

// dial opens an upstream connection and counts it.
func (p *Proxy) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := p.dialer.DialContext(ctx, network, addr)
	if err == nil {
		p.opened.Add(1)
		p.m.connOpened()
	}
	return c, err
}

// retrier is the proxy's http.RoundTripper. It sends the request to the
// target Rewrite chose and, when connecting to it failed (so not one byte was
// sent), takes that target out of the pool and, if the request may be sent
// twice, sends it to the next healthy target.
type retrier struct{ p *Proxy }

func (rt retrier) RoundTrip(req *http.Request) (*http.Response, error) {
	p := rt.p
	t := p.pool.lookup(req.URL)
	if t == nil {
		// Rewrite found no healthy target. Checking here also guarantees
		// that a request is only ever sent to a configured target.
		closeBody(req)
		return nil, ErrNoHealthyTarget
	}
	resp, err := p.send(t, req)
	if err == nil || !isDialError(err) || req.Context().Err() != nil {
		return resp, err
	}
	p.connectFailed(t, err)
	if !replayable(req) {
		return nil, err
	}
	tried := []*target{t}
	for {
		next := p.pool.pickExcept(tried)
		if next == nil {
			return nil, err
		}
		r2, rerr := retarget(req, next)
		if rerr != nil {
			return nil, err
		}
		p.m.retried()
		p.log.Debug("upstream retry", "from", t.name, "to", next.name, "method", req.Method, "err", err)
		resp, err = p.send(next, r2)
		if err == nil || !isDialError(err) || req.Context().Err() != nil {
			return resp, err
		}
		p.connectFailed(next, err)
		tried = append(tried, next)
		t = next
	}
}

// send sends req to t, timing the wait for the response headers.
func (p *Proxy) send(t *target, req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := p.transport.RoundTrip(req)
	if err == nil && t.latency != nil {
		t.latency.Observe(time.Since(start).Seconds())
	}
	return resp, err
}

// isDialError reports whether err means the connection could not be opened
// (refused, unreachable, dial timeout, DNS): nothing was sent upstream.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// replayable reports whether req may be sent again: its method is idempotent
// (RFC 9110 section 9.2.2) or it carries an Idempotency-Key, and it has no
// body or one that can be produced again. The same rule as net/http's own
// retries on a reused connection.
func replayable(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
	default:
		if _, ok := req.Header["Idempotency-Key"]; !ok {
			if _, ok := req.Header["X-Idempotency-Key"]; !ok {
				return false
			}
		}
	}
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// retarget returns a shallow copy of req pointed at t, with a fresh body.
func retarget(req *http.Request, t *target) (*http.Request, error) {
	r2 := req.WithContext(req.Context())
	u := *req.URL
	u.Scheme, u.Host = t.url.Scheme, t.url.Host
	r2.URL = &u
	if req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		r2.Body = body
	}
	return r2, nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
