package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"strconv"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/linkgate/linkgate/config"

	"github.com/linkgate/linkgate/edge"
	certcassandra "github.com/linkgate/linkgate/edge/cassandra"
	"github.com/linkgate/linkgate/limit"
	"github.com/linkgate/linkgate/problem"
	"github.com/linkgate/linkgate/tenant"
)

// restartOnlyEdge restores into eff the running values of the TLS edge's
// fields that a reload cannot change, and names them: the listeners beside
// server.listen, whether TLS is on at all, and the ACME account, CA and
// storage certmagic runs with. The static certificate, HSTS and the
// on-demand settings are applied by reload.
func restartOnlyEdge(run, next config.Server, eff *config.Server) (changed []string) {
	keep := func(name string, same bool, restore func()) {
		if !same {
			changed = append(changed, name)
			restore()
		}
	}
	keep("server.http_listen", run.HTTPListen == next.HTTPListen, func() { eff.HTTPListen = run.HTTPListen })
	keep("server.internal_listen", run.InternalListen == next.InternalListen, func() { eff.InternalListen = run.InternalListen })
	keep("server.http3", run.HTTP3 == next.HTTP3, func() { eff.HTTP3 = run.HTTP3 })
	keep("server.max_concurrent_streams", run.MaxConcurrentStreams == next.MaxConcurrentStreams, func() { eff.MaxConcurrentStreams = run.MaxConcurrentStreams })
	rt, nt := run.TLS, next.TLS
	if rt.Enabled() != nt.Enabled() || rt.Managed() != nt.Managed() {
		keep("server.tls", false, func() { eff.TLS = rt })
		return changed
	}
	keep("server.tls.handshake_timeout", rt.HandshakeTimeout == nt.HandshakeTimeout, func() { eff.TLS.HandshakeTimeout = rt.HandshakeTimeout })
	keep("server.tls.acme", reflect.DeepEqual(rt.ACME, nt.ACME), func() { eff.TLS.ACME = rt.ACME })
	keep("server.tls.storage", reflect.DeepEqual(rt.Storage, nt.Storage), func() { eff.TLS.Storage = rt.Storage })
	return changed
}

// startEdge builds the TLS edge once the listeners are bound (certmagic
// must know the ports that answer ACME challenges).
func (g *Gateway) startEdge(p *Plan) error {
	if !p.tls.Enabled() {
		return nil
	}
	host, _, _ := net.SplitHostPort(g.ln.Addr().String())
	prefix := p.cfg.Identity.IPv6Prefix
	storage, err := g.openCertStorage(p.tls.Config())
	if err != nil {
		return err
	}
	e, err := edge.New(p.tls, edge.Options{
		Storage:    storage,
		Log:        g.log.With("component", "tls"),
		Metrics:    g.edgeM,
		ClientKey:  func(a netip.Addr) string { return limit.IPValue(a, prefix) },
		LimitStore: currentLimitStore{g},
		ListenHost: host,
		TLSPort:    portOf(g.ln.Addr()),
		HTTPPort:   portOf(addrOf(g.hln)),
		// The rules marked edge of the snapshot serving now.
		Boxed: func(ctx context.Context, a netip.Addr) bool {
			s := g.current()
			return s.limiter.EdgeBoxed(ctx, limit.IPValue(a, s.plan.cfg.Identity.IPv6Prefix))
		},
		Learn: g.learnTenant,
	})
	if err != nil {
		if c, ok := storage.(interface{ Close() }); ok {
			c.Close()
		}
		return err
	}
	g.edge = e
	return nil
}

// openCertStorage is the one place that picks the certificate storage:
// Cassandra when storage.cassandra.hosts is set (a fleet shares it), else
// nil, which the edge takes as the file storage at storage.path. The
// Cassandra storage connects in the background, as every store of the
// gateway does: the gateway listens at once, serves the certificates it
// has in memory or from static files, and obtains new ones once the
// storage answers (see edge.Connecting).
func (g *Gateway) openCertStorage(c edge.Config) (certmagic.Storage, error) {
	cc := c.Storage.Cassandra
	if !c.Managed() || len(cc.Hosts) == 0 {
		return nil, nil
	}
	st, err := certcassandra.Open(context.Background(), cc, g.log.With("component", "tls"), certcassandra.Options{Pool: g.cql})
	if err != nil {
		return nil, fmt.Errorf("gateway: server.tls.storage.cassandra: %w", err)
	}
	return st, nil
}

func portOf(a net.Addr) int {
	if a == nil {
		return 0
	}
	_, p, err := net.SplitHostPort(a.String())
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// handleCertificates lists the certificates the TLS edge serves or tried to
// obtain: names, issuer, serial, validity, last renewal, last error.
func (g *Gateway) handleCertificates(w http.ResponseWriter, r *http.Request) {
	if g.edge == nil {
		problem.Write(w, http.StatusNotFound, "server.tls is not set: this gateway serves no certificate")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	certs := g.edge.Certificates()
	if certs == nil {
		certs = []edge.CertInfo{}
	}
	json.NewEncoder(w).Encode(map[string]any{"certificates": certs})
}

// currentLimitStore is the limiter store of the snapshot serving now: the
// edge counts handshakes where the rules count requests (in-process, or
// memcached shared by a fleet), and a reload that replaces the store
// carries the edge along.
type currentLimitStore struct{ g *Gateway }

func (s currentLimitStore) Load(ctx context.Context, c limit.Counter, b []limit.Bucket, counts []int64) error {
	return s.g.current().limitStore.Load(ctx, c, b, counts)
}

func (s currentLimitStore) Add(ctx context.Context, c limit.Counter, b []limit.Bucket, n int64) error {
	return s.g.current().limitStore.Add(ctx, c, b, n)
}

func (s currentLimitStore) AddNow(ctx context.Context, c limit.Counter, b []limit.Bucket, n int64) error {
	return s.g.current().limitStore.AddNow(ctx, c, b, n)
}

func (s currentLimitStore) Reset(ctx context.Context, c limit.Counter, b []limit.Bucket) error {
	return s.g.current().limitStore.Reset(ctx, c, b)
}

func (s currentLimitStore) PutBox(ctx context.Context, c limit.Counter, b limit.Box, keep int64) error {
	return s.g.current().limitStore.PutBox(ctx, c, b, keep)
}

func (s currentLimitStore) Boxes(ctx context.Context, now int64, yield func(limit.Boxed) bool) error {
	return s.g.current().limitStore.Boxes(ctx, now, yield)
}

var _ limit.Store = currentLimitStore{}

// learnTenant records the tenant the ask endpoint named for a name it
// allowed ("" for none), logging the answers it cannot take: a name that
// is not a tenant's, or a name past the hosts it can remember.
func (g *Gateway) learnTenant(name, t string) {
	if g.learned.Set(name, t) {
		return
	}
	reason := "the ask endpoint's " + edge.TenantHeader + " is not a tenant name (1 to 63 lower-case letters, digits and -); the name is in no tenant"
	if tenant.ValidName(t) {
		reason = "the gateway remembers the tenants of at most 100,000 names; this one is in no tenant"
	}
	if n, ok := g.tenantLog.Allow(reason, time.Now()); ok {
		g.log.Warn("tenant of an allowed name not learned", "name", name, "tenant", t, "reason", reason, "suppressed", n)
	}
}
