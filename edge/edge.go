// Package edge is linkgate's TLS edge: it terminates TLS on the client
// listener with a static certificate (read again when its files change),
// certificates obtained by ACME for configured names, and certificates
// obtained on demand at the first handshake for names the tiny-URL
// service approves (branded short domains); it answers ACME challenges
// (TLS-ALPN-01 on the TLS listener, HTTP-01 on the plain one, which
// redirects everything else to https://) and adds HSTS where configured.
//
// ACME is certmagic's (github.com/caddyserver/certmagic): its Config and
// Cache hold, renew and serve the certificates, its Storage keeps them
// (the file storage by default, edge/cassandra for a fleet) and locks a
// name across a fleet while one gateway obtains it. The edge decides what
// certmagic may obtain (OnDemandConfig.DecisionFunc: the ask endpoint,
// its cached answers, a per-client limit on handshakes for unknown names,
// and an hourly cap on new orders), and keeps serving a stored valid
// certificate when the ask endpoint is down (certmagic#272).
package edge

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3"
	"go.uber.org/zap"

	"github.com/linkgate/linkgate/limit"
)

// Options are what an Edge needs besides its Plan.
type Options struct {
	// Log receives the edge's logs. Nil: discarded.
	Log *slog.Logger
	// Metrics are the collectors the edge reports through. Nil: its own,
	// registered nowhere.
	Metrics *Metrics
	// LimitStore is where handshakes_per_client counts. Nil: an in-process
	// store of the edge's own.
	LimitStore limit.Store
	// ClientKey is the counted value of a client address (an IPv6 prefix,
	// say). Nil: the address.
	ClientKey func(netip.Addr) string
	// Boxed reports whether a client address is in a penalty box the edge
	// honours (the limiter's rules marked edge): such a client gets no
	// ask and no handshake for a name without an answer. Nil: none is.
	Boxed func(ctx context.Context, addr netip.Addr) bool
	// Learn is told the tenant the ask endpoint puts each name it allows
	// in: the value of the answer's Linkgate-Tenant header, "" without one
	// (see TenantHeader). Nil: the header is not read.
	Learn func(name, tenant string)
	// Storage is where certificates are kept, closed by Close when it has
	// a Close method. Nil: the file storage at storage.path. A Storage
	// that connects in the background (Connecting) is waited for: see
	// Connecting.
	Storage certmagic.Storage
	// ListenHost, TLSPort and HTTPPort are where the gateway answers ACME
	// challenges: certmagic must not open listeners of its own. HTTPPort
	// 0: no plain listener, so no HTTP-01.
	ListenHost        string
	TLSPort, HTTPPort int
}

// Connecting is a certificate Storage that connects in the background
// (edge/cassandra): the gateway starts listening before it answers. Until
// Ready returns nil the edge serves the certificates it has (the static
// one, those in memory), obtains nothing, and fails a handshake for a name
// it has no certificate for at once, with a log line, without asking the
// ask endpoint: it could neither load a stored certificate nor lock the
// name across the fleet before ordering one. The certificates of
// acme.domains are managed once Connected is closed.
type Connecting interface {
	// Ready returns nil once the storage answers, else why it does not.
	Ready() error
	// Connected is closed once the storage is connected.
	Connected() <-chan struct{}
}

// Edge is a running TLS edge. It is safe for concurrent use. Create it
// with New, update it with Apply on reload, stop it with Close.
type Edge struct {
	opts Options
	log  *slog.Logger
	m    *metrics

	plan   atomic.Pointer[Plan]
	static atomic.Pointer[tls.Certificate]

	storage certmagic.Storage
	cache   *certmagic.Cache  // nil without ACME
	magic   *certmagic.Config // nil without ACME
	issuer  *certmagic.ACMEIssuer
	gate    *gate

	health storageHealth // the storage's last check (storagecheck.go)

	mu    sync.Mutex
	certs map[string]*certState // ACME names seen, for Certificates

	ticketSecret []byte // the session tickets' secret without secret_env

	stop context.CancelFunc
	done chan struct{}
	bg   sync.WaitGroup // goroutines waiting for the storage to connect
}

// certState is what the edge knows of an ACME name beyond the cache.
type certState struct {
	lastRenewal time.Time
	lastError   string
	lastErrorAt time.Time
}

// New builds the edge of plan: the static certificate, certmagic's cache
// and config when certificates are obtained by ACME, and the watch of the
// certificate files. Certificates of acme.domains are obtained in the
// background. New fails only on a resource it cannot have (the storage
// folder), never on config grounds.
func New(plan *Plan, opts Options) (*Edge, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.LimitStore == nil {
		opts.LimitStore = limit.NewMemory()
	}
	e := &Edge{opts: opts, log: opts.Log, certs: map[string]*certState{}, done: make(chan struct{}), ticketSecret: newTicketSecret()}
	e.health.poke = make(chan struct{}, 1)
	e.m = opts.Metrics
	if e.m == nil {
		e.m = NewMetrics(nil)
	}
	e.m.edge.Store(e)
	e.plan.Store(plan)
	e.static.Store(plan.static)
	var err error
	if e.gate, err = newGate(e, plan); err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	e.stop = stop
	if plan.cfg.Managed() {
		if err := e.startACME(ctx, plan); err != nil {
			stop()
			return nil, err
		}
	}
	go func() { defer close(e.done); e.watchFiles(ctx) }()
	return e, nil
}

func (e *Edge) startACME(ctx context.Context, plan *Plan) error {
	st := e.opts.Storage
	if st == nil {
		st = &certmagic.FileStorage{Path: plan.cfg.Storage.Path}
	}
	e.storage = st
	zl := zapToSlog(e.log)
	// Two certmagic configs share the cache, the storage and the CA
	// account. magic serves every handshake and obtains a name without a
	// certificate on demand, as gate.decide allows. certmagic renews the
	// certificates of a config with OnDemand only in a handshake, and
	// manages its names at the first: those of acme.domains belong to
	// managed, without it, which obtains them at start and renews them in
	// the background.
	var magic, managed *certmagic.Config
	e.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(c certmagic.Certificate) (*certmagic.Config, error) {
			// A certificate of certmagic's holds one name: the one it
			// was obtained for.
			if managed != nil && len(c.Names) == 1 && slices.Contains(plan.domains, c.Names[0]) {
				return managed, nil
			}
			return magic, nil
		},
		Logger: zl,
	})
	magic, e.issuer = e.newConfig(plan, st, zl, &certmagic.OnDemandConfig{DecisionFunc: e.gate.decide})
	if len(plan.domains) > 0 {
		magic.DefaultServerName = plan.domains[0]
		managed, _ = e.newConfig(plan, st, zl, nil)
	}
	e.magic = magic
	e.bg.Go(func() { e.watchStorage(ctx) })
	if len(plan.domains) == 0 {
		return nil
	}
	if c, ok := st.(Connecting); ok && c.Ready() != nil {
		// Managing loads the certificates from storage and orders those it
		// lacks: it waits for the storage.
		e.log.Warn("the certificate storage is not connected yet: the certificates of acme.domains are managed once it is", "domains", plan.domains)
		e.bg.Go(func() {
			select {
			case <-c.Connected():
			case <-ctx.Done():
				return
			}
			if ctx.Err() != nil {
				return
			}
			if err := managed.ManageAsync(ctx, plan.domains); err != nil {
				e.log.Error("managing the certificates of acme.domains failed", "err", err)
			}
		})
		return nil
	}
	if err := managed.ManageAsync(ctx, plan.domains); err != nil {
		e.cache.Stop()
		return fmt.Errorf("edge: acme.domains: %w", err)
	}
	return nil
}

// newConfig returns a certmagic config on the edge's cache and st, with
// onDemand (nil: none), and its ACME issuer: the CA of plan, whose
// challenges the gateway's own listeners answer.
func (e *Edge) newConfig(plan *Plan, st certmagic.Storage, zl *zap.Logger, onDemand *certmagic.OnDemandConfig) (*certmagic.Config, *certmagic.ACMEIssuer) {
	cfg := certmagic.New(e.cache, certmagic.Config{Storage: st, Logger: zl, OnEvent: e.onEvent, OnDemand: onDemand})
	a := plan.cfg.ACME
	iss := certmagic.NewACMEIssuer(cfg, certmagic.ACMEIssuer{
		CA:                      a.CA,
		Email:                   a.Email,
		Agreed:                  true,
		TrustedRoots:            plan.roots,
		DisableHTTPChallenge:    !slices.Contains(a.Challenges, HTTP01) || e.opts.HTTPPort == 0,
		DisableTLSALPNChallenge: !slices.Contains(a.Challenges, TLSALPN01),
		// The gateway's own listeners answer the challenges: certmagic
		// finds these ports taken and stores the challenge for them.
		ListenHost:     e.opts.ListenHost,
		AltHTTPPort:    e.opts.HTTPPort,
		AltTLSALPNPort: e.opts.TLSPort,
		Logger:         zl,
	})
	cfg.Issuers = []certmagic.Issuer{iss}
	return cfg, iss
}

// storageReady returns nil when the certificate storage can be used now,
// else why not (a Connecting storage not connected yet).
func (e *Edge) storageReady() error {
	if c, ok := e.storage.(Connecting); ok {
		return c.Ready()
	}
	return nil
}

// Managed reports whether the edge obtains certificates by ACME, and so
// keeps a certificate storage.
func (e *Edge) Managed() bool { return e.magic != nil }

// Apply makes plan's reloadable settings current: the static certificate,
// the on-demand settings and HSTS. The ACME settings and the storage stay
// as they started (the gateway reports them as needing a restart).
func (e *Edge) Apply(plan *Plan) {
	e.plan.Store(plan)
	e.static.Store(plan.static)
	e.gate.apply(plan)
}

// Close stops the certificate maintenance and the file watch.
func (e *Edge) Close() {
	e.stop()
	<-e.done
	e.bg.Wait()
	if e.cache != nil {
		e.cache.Stop()
	}
	if c, ok := e.storage.(interface{ Close() }); ok {
		c.Close() // a storage with connections (Cassandra)
	}
}

// NextProtos are the ALPN protocols the listener offers: HTTP/2 first,
// HTTP/1.1, and acme-tls/1 for TLS-ALPN-01 challenges (RFC 8737).
var NextProtos = []string{"h2", "http/1.1", acmez.ACMETLS1Protocol}

// TLSConfig returns the listener's TLS settings: TLS 1.2 at least, 1.3
// on, Go's default cipher suites, the edge choosing the certificate, and
// session tickets with the keys of session_tickets (see tickets.go).
func (e *Edge) TLSConfig() *tls.Config {
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     NextProtos,
		GetCertificate: e.getCertificate,
	}
	(&ticketer{e: e}).install(cfg)
	return cfg
}

// now is the edge's clock: the on-demand decisions' and the tickets'.
func (e *Edge) now() time.Time { return e.gate.now() }

// getCertificate picks the certificate of a handshake: an ACME
// challenge's, the static one when it covers the name (or when there is
// no ACME), else certmagic's (from memory, storage, or obtained on
// demand).
func (e *Edge) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if e.magic != nil && len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == acmez.ACMETLS1Protocol {
		return e.magic.GetCertificate(hello)
	}
	static := e.static.Load()
	if static != nil && (e.magic == nil || hello.ServerName == "" || static.Leaf.VerifyHostname(hello.ServerName) == nil) {
		return static, nil
	}
	if e.magic == nil {
		return nil, errors.New("edge: no certificate")
	}
	cert, err := e.magic.GetCertificate(hello)
	if err != nil {
		e.handshakeFailed(hello.ServerName, err)
	}
	return cert, err
}

// onEvent follows certmagic's events: it caps new orders (returning an
// error from cert_obtaining aborts the order), and counts and records
// issuance for the metrics and the certificate listing.
func (e *Edge) onEvent(ctx context.Context, event string, data map[string]any) error {
	name, _ := data["identifier"].(string)
	renewal, _ := data["renewal"].(bool)
	kind := "obtain"
	if renewal {
		kind = "renew"
	}
	switch event {
	case "cert_obtaining":
		if !renewal {
			if err := e.gate.order(name, e.clientKey(ctx), e.gate.now()); err != nil {
				e.m.issuance.WithLabelValues(kind, "capped").Inc()
				e.log.Warn("certificate order refused", "name", name, "reason", err)
				e.record(name, func(s *certState) { s.lastError, s.lastErrorAt = err.Error(), time.Now() })
				return certmagic.ErrNoRetry{Err: err}
			}
		}
		e.m.issuance.WithLabelValues(kind, "started").Inc()
	case "cert_obtained":
		e.m.issuance.WithLabelValues(kind, "ok").Inc()
		e.log.Info("certificate obtained", "name", name, "renewal", renewal)
		e.record(name, func(s *certState) { s.lastRenewal, s.lastError = time.Now(), "" })
	case "cert_failed":
		e.m.issuance.WithLabelValues(kind, "failed").Inc()
		msg := fmt.Sprint(data["error"])
		e.log.Warn("certificate issuance failed", "name", name, "renewal", renewal, "err", msg)
		e.record(name, func(s *certState) { s.lastError, s.lastErrorAt = msg, time.Now() })
	case "cached_managed_cert":
		if sans, ok := data["sans"].([]string); ok {
			for _, n := range sans {
				e.record(n, func(*certState) {})
			}
		}
	}
	return nil
}

func (e *Edge) record(name string, f func(*certState)) {
	if name == "" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.certs[name]
	if s == nil {
		if len(e.certs) >= maxListed {
			return
		}
		s = &certState{}
		e.certs[name] = s
	}
	f(s)
}

// maxListed bounds the names the edge remembers for Certificates.
const maxListed = 100000

// CertInfo is one certificate the edge serves or tried to obtain, as the
// admin API lists it.
type CertInfo struct {
	Names       []string  `json:"names"`
	Source      string    `json:"source"` // static or acme
	Issuer      string    `json:"issuer,omitempty"`
	Serial      string    `json:"serial,omitempty"`
	NotBefore   time.Time `json:"not_before,omitzero"`
	NotAfter    time.Time `json:"not_after,omitzero"`
	LastRenewal time.Time `json:"last_renewal,omitzero"` // when this gateway last obtained it
	LastError   string    `json:"last_error,omitempty"`  // the last failure to obtain or renew it
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
}

// Certificates lists the static certificate and every ACME name the edge
// has held or tried to obtain, sorted by first name.
func (e *Edge) Certificates() []CertInfo {
	var out []CertInfo
	if s := e.static.Load(); s != nil {
		out = append(out, certInfo(s.Leaf, "static"))
	}
	if e.cache == nil {
		return out
	}
	e.mu.Lock()
	names := make([]string, 0, len(e.certs))
	states := make(map[string]certState, len(e.certs))
	for n, s := range e.certs {
		names = append(names, n)
		states[n] = *s
	}
	e.mu.Unlock()
	sort.Strings(names)
	for _, n := range names {
		ci := CertInfo{Names: []string{n}, Source: "acme"}
		if certs := e.cache.AllMatchingCertificates(n); len(certs) > 0 {
			best := certs[0]
			for _, c := range certs[1:] {
				if c.Leaf.NotAfter.After(best.Leaf.NotAfter) {
					best = c
				}
			}
			ci = certInfo(best.Leaf, "acme")
		}
		s := states[n]
		ci.LastRenewal, ci.LastError, ci.LastErrorAt = s.lastRenewal, s.lastError, s.lastErrorAt
		out = append(out, ci)
	}
	return out
}

func certInfo(leaf *x509.Certificate, source string) CertInfo {
	names := slices.Clone(leaf.DNSNames)
	for _, ip := range leaf.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 && leaf.Subject.CommonName != "" {
		names = []string{leaf.Subject.CommonName}
	}
	return CertInfo{
		Names: names, Source: source,
		Issuer:    leaf.Issuer.String(),
		Serial:    leaf.SerialNumber.Text(16),
		NotBefore: leaf.NotBefore, NotAfter: leaf.NotAfter,
	}
}

// clientKey returns the counted key of the client of the handshake that
// ctx belongs to (see Options.ClientKey), "" when no handshake asked.
func (e *Edge) clientKey(ctx context.Context) string {
	addr, ok := clientOf(ctx)
	switch {
	case !ok:
		return ""
	case e.opts.ClientKey != nil:
		return e.opts.ClientKey(addr)
	}
	return addr.String()
}

// clientOf returns the address of the client of a handshake, from the
// ClientHelloInfo certmagic puts in ctx.
func clientOf(ctx context.Context) (netip.Addr, bool) {
	hello, ok := ctx.Value(certmagic.ClientHelloInfoCtxKey).(*tls.ClientHelloInfo)
	if !ok || hello == nil || hello.Conn == nil {
		return netip.Addr{}, false
	}
	ap, err := netip.ParseAddrPort(hello.Conn.RemoteAddr().String())
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap().WithZone(""), true
}
