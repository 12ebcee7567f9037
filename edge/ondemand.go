package edge

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"
	"golang.org/x/net/publicsuffix"

	"github.com/linkgate/linkgate/limit"
	"github.com/linkgate/linkgate/logthrottle"
)

// gate decides which names certmagic may hold a certificate for, and caps
// new orders. It is safe for concurrent use.
type gate struct {
	e          *Edge
	plan       atomic.Pointer[Plan]
	handshakes atomic.Pointer[limit.Windows] // handshakes_per_client
	client     *http.Client
	now        func() time.Time // the clock of the answers' lifetimes, the handshake counts and the order cap

	logs logthrottle.Throttle[string] // repeated log lines, by kind

	mu      sync.Mutex
	answers map[string]answer       // the ask endpoint's answers, until they expire
	asking  map[string]*askInFlight // one ask per name at a time
	orders  []time.Time             // starts of new orders in the last hour, oldest first
	// charged is the starts of the new orders of the last hour charged to
	// each client ("client " + key) and registered domain ("domain " +
	// name), oldest first. Only orders made count, so it holds at most
	// orders_per_hour times two.
	charged map[string][]time.Time
}

type answer struct {
	allowed bool
	until   time.Time
}

type askInFlight struct {
	done    chan struct{}
	allowed bool
	err     error
}

// maxAnswers bounds the answers kept; past it, expired ones are dropped,
// then the cache is emptied (a flood of junk names costs asks, bounded per
// client by handshakes_per_client, not memory).
const maxAnswers = 100000

// errLimited is the decision for a client over handshakes_per_client.
var errLimited = errors.New("edge: too many handshakes for unknown names from this client (server.tls.on_demand.handshakes_per_client)")

// errBoxed is the decision for a client in a penalty box.
var errBoxed = errors.New("edge: the client address is in the penalty box of a rule marked edge")

// Errors of an order over orders_per_hour, or over the share of one client
// or of one registered domain.
var (
	errOrderCap       = errors.New("edge: server.tls.on_demand.orders_per_hour reached; no new certificate is ordered until an hour after the oldest")
	errClientOrderCap = errors.New("edge: server.tls.on_demand.orders_per_hour_per_client reached for this client address")
	errDomainOrderCap = errors.New("edge: server.tls.on_demand.orders_per_hour_per_domain reached for this registered domain")
)

// errUnavailable is wrapped by the decision for a name without a
// certificate in memory while the storage is not connected.
var errUnavailable = errors.New("edge: the certificate storage is not connected yet")

// errAskFailed is wrapped by the decision when the ask endpoint gives no
// answer (an error, a 5xx, a redirect).
var errAskFailed = errors.New("edge: on_demand.ask failed")

func newGate(e *Edge, plan *Plan) (*gate, error) {
	g := &gate{e: e, answers: map[string]answer{}, asking: map[string]*askInFlight{}, charged: map[string][]time.Time{}, now: time.Now}
	g.logs.Every = 10 * time.Second
	g.client = &http.Client{
		// The ask endpoint is the operator's own service: no redirects to
		// follow, no environment proxy.
		Transport:     &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 8, IdleConnTimeout: time.Minute},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	if err := g.apply(plan); err != nil {
		return nil, err
	}
	return g, nil
}

// apply takes plan's on-demand settings. A changed ask URL or TTL drops
// the cached answers; counts of handshakes survive unless the limits
// changed.
func (g *gate) apply(plan *Plan) error {
	old := g.plan.Swap(plan)
	if old == nil || !slices.Equal(old.cfg.OnDemand.HandshakesPerClient, plan.cfg.OnDemand.HandshakesPerClient) {
		// Named with a '/', which no rule's name holds: the counts of a
		// rule named tls_handshake stay its own.
		ws, err := limit.NewWindows("tls/handshake", plan.cfg.OnDemand.HandshakesPerClient, g.e.opts.LimitStore)
		if err != nil {
			return err
		}
		g.handshakes.Store(ws)
	}
	if old != nil && (old.cfg.OnDemand.Ask != plan.cfg.OnDemand.Ask || old.cfg.OnDemand.AllowTTL != plan.cfg.OnDemand.AllowTTL || old.cfg.OnDemand.DenyTTL != plan.cfg.OnDemand.DenyTTL) {
		g.mu.Lock()
		g.answers = map[string]answer{}
		g.mu.Unlock()
	}
	return nil
}

// decide is certmagic's OnDemandConfig.DecisionFunc, called for a name
// with no certificate in memory (before loading one from storage, and
// before ordering one) and before renewing one on demand. nil allows it.
func (g *gate) decide(ctx context.Context, name string) error {
	if err := g.e.storageReady(); err != nil {
		// Nothing can be loaded or ordered without the storage: fail the
		// handshake now rather than at its deadline, and ask no one.
		g.e.m.decisions.WithLabelValues("unavailable").Inc()
		if n, ok := g.logs.Allow("storage", g.now()); ok {
			g.e.log.Warn("TLS handshake for a name without a certificate in memory refused: the certificate storage is not connected yet", "name", name, "err", err, "suppressed", n)
		}
		return fmt.Errorf("%w: %s: %w", errUnavailable, name, err)
	}
	p := g.plan.Load()
	if slices.Contains(p.domains, name) {
		return nil
	}
	if p.ask == nil {
		g.e.m.decisions.WithLabelValues("denied").Inc()
		return fmt.Errorf("edge: %s is not in acme.domains and on_demand.ask is not set", name)
	}
	now := g.now()
	g.mu.Lock()
	a, ok := g.answers[name]
	g.mu.Unlock()
	if ok && now.Before(a.until) {
		return g.verdict(name, a.allowed)
	}
	addr, hasAddr := clientOf(ctx)
	if hasAddr {
		if g.e.opts.Boxed != nil && g.e.opts.Boxed(ctx, addr) {
			g.e.m.decisions.WithLabelValues("boxed").Inc()
			return errBoxed
		}
		key := addr.String()
		if g.e.opts.ClientKey != nil {
			key = g.e.opts.ClientKey(addr)
		}
		ok, err := g.handshakes.Load().Allow(ctx, key, now)
		if err != nil {
			// Every handshake for an unknown name fails so while the store
			// is down: a line now and then, with the count held back.
			if n, logIt := g.logs.Allow("limit_store", now); logIt {
				g.e.log.Warn("handshake limit store failed; the handshake is not limited", "err", err, "suppressed", n)
			}
		}
		if !ok {
			g.e.m.decisions.WithLabelValues("limited").Inc()
			return errLimited
		}
	}
	client := ""
	if hasAddr {
		client = addr.String()
	}
	allowed, err := g.askOnce(ctx, p, name, client)
	if err != nil {
		// The ask endpoint is down: a name whose valid certificate is
		// stored keeps being served (certmagic#272); nothing is ordered.
		if g.storedValid(ctx, name) {
			g.e.m.decisions.WithLabelValues("stored").Inc()
			return nil
		}
		g.e.m.decisions.WithLabelValues("ask_failed").Inc()
		return fmt.Errorf("%w: %w", errAskFailed, err)
	}
	return g.verdict(name, allowed)
}

// allowed reports whether name may have a certificate, as last decided:
// in acme.domains, or allowed by the ask endpoint within allow_ttl.
func (g *gate) allowed(name string) bool {
	if slices.Contains(g.plan.Load().domains, name) {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	a, ok := g.answers[name]
	return ok && a.allowed && g.now().Before(a.until)
}

func (g *gate) verdict(name string, allowed bool) error {
	if allowed {
		g.e.m.decisions.WithLabelValues("allowed").Inc()
		return nil
	}
	g.e.m.decisions.WithLabelValues("denied").Inc()
	return fmt.Errorf("edge: the ask endpoint denies a certificate for %s", name)
}

// askOnce asks for name, sharing one request among concurrent handshakes
// for the same name (the first one's client is the one named), and caches
// the answer.
func (g *gate) askOnce(ctx context.Context, p *Plan, name, client string) (bool, error) {
	g.mu.Lock()
	if f, ok := g.asking[name]; ok {
		g.mu.Unlock()
		select {
		case <-f.done:
			return f.allowed, f.err
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	f := &askInFlight{done: make(chan struct{})}
	g.asking[name] = f
	g.mu.Unlock()

	f.allowed, f.err = g.ask(p, name, client)
	g.mu.Lock()
	delete(g.asking, name)
	if f.err == nil {
		ttl := p.cfg.OnDemand.DenyTTL
		if f.allowed {
			ttl = p.cfg.OnDemand.AllowTTL
		}
		if len(g.answers) >= maxAnswers {
			now := g.now()
			for n, a := range g.answers {
				if !now.Before(a.until) {
					delete(g.answers, n)
				}
			}
			if len(g.answers) >= maxAnswers {
				g.answers = map[string]answer{}
			}
		}
		g.answers[name] = answer{allowed: f.allowed, until: g.now().Add(ttl)}
	}
	g.mu.Unlock()
	close(f.done)
	return f.allowed, f.err
}

// TenantHeader is the header of an ask endpoint's 200 answer that names
// the tenant of the name it allows (package tenant): the name's visits
// are counted as that tenant's links from its first one. Without it the
// name is in no tenant, unless the config puts it in one.
const TenantHeader = "Linkgate-Tenant"

// ask requests GET <ask>?domain=<name>&client=<address>: 200 allows, a
// 4xx denies, anything else (no answer, a 5xx, a redirect) is an error,
// which is not cached. A 200 names the name's tenant to Options.Learn
// (TenantHeader). client is the address of the handshake's client
// ("" when unknown: no client parameter), so that the link service can
// decide with it too. It runs on its own deadline, not the handshake's, so
// that the answer is cached for the next handshake even if this one's
// client gave up.
func (g *gate) ask(p *Plan, name, client string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.OnDemand.AskTimeout)
	defer cancel()
	u := *p.ask
	q := u.Query()
	q.Set("domain", name)
	if client != "" {
		q.Set("client", client)
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("User-Agent", "linkgate-on-demand-ask")
	resp, err := g.client.Do(req)
	if err != nil {
		g.e.m.asks.WithLabelValues("error").Inc()
		return false, fmt.Errorf("edge: on_demand.ask: %w", redact(err))
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
		g.e.m.asks.WithLabelValues("allow").Inc()
		if learn := g.e.opts.Learn; learn != nil {
			learn(name, strings.TrimSpace(resp.Header.Get(TenantHeader)))
		}
		return true, nil
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		g.e.m.asks.WithLabelValues("deny").Inc()
		if learn := g.e.opts.Learn; learn != nil {
			learn(name, "") // a name denied is no tenant's any more
		}
		return false, nil
	}
	g.e.m.asks.WithLabelValues("error").Inc()
	return false, fmt.Errorf("edge: on_demand.ask answered %s", resp.Status)
}

// redact drops the URL from a client error: the log names the field.
func redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// storedValid reports whether storage holds an unexpired certificate for
// name from the configured CA.
func (g *gate) storedValid(ctx context.Context, name string) bool {
	if g.e.issuer == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	data, err := g.e.storage.Load(ctx, certmagic.StorageKeys.SiteCert(g.e.issuer.IssuerKey(), name))
	if err != nil {
		return false
	}
	b, _ := pem.Decode(data)
	if b == nil {
		return false
	}
	leaf, err := x509.ParseCertificate(b.Bytes)
	return err == nil && time.Now().Before(leaf.NotAfter) && leaf.VerifyHostname(name) == nil
}

// order records the start at now of a new order for name, made for a
// handshake of client (its key; "" when no handshake asked for it: the
// names of acme.domains), or refuses it when orders_per_hour orders
// started in the hour before, or, for a client's, when
// orders_per_hour_per_client of them were the same client's or
// orders_per_hour_per_domain were for names of the same registered
// domain. A refused order is charged to no one.
func (g *gate) order(name, client string, now time.Time) error {
	o := g.plan.Load().cfg.OnDemand
	g.mu.Lock()
	defer g.mu.Unlock()
	g.orders = lastHour(g.orders, now)
	if len(g.orders) >= o.OrdersPerHour {
		return errOrderCap
	}
	if client == "" {
		g.orders = append(g.orders, now)
		return nil
	}
	domain, err := publicsuffix.EffectiveTLDPlusOne(name)
	if err != nil {
		domain = name // a public suffix itself, or not a name
	}
	ck, dk := "client "+client, "domain "+domain
	for k, v := range g.charged {
		if v = lastHour(v, now); len(v) == 0 {
			delete(g.charged, k)
		} else {
			g.charged[k] = v
		}
	}
	switch {
	case len(g.charged[ck]) >= o.OrdersPerHourPerClient:
		return errClientOrderCap
	case len(g.charged[dk]) >= o.OrdersPerHourPerDomain:
		return errDomainOrderCap
	}
	g.orders = append(g.orders, now)
	g.charged[ck] = append(g.charged[ck], now)
	g.charged[dk] = append(g.charged[dk], now)
	return nil
}

// lastHour returns the times of ts, oldest first, that are less than an
// hour before now.
func lastHour(ts []time.Time, now time.Time) []time.Time {
	i := 0
	for i < len(ts) && now.Sub(ts[i]) >= time.Hour {
		i++
	}
	return ts[i:]
}
