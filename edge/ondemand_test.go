package edge_test

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/edge"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/limit"
)

// These tests take the on-demand decisions alone, as certmagic asks for
// them (edge.Decide is its DecisionFunc), with a clock of their own and a
// real ask endpoint; tls_test.go takes them through handshakes and pebble.

// askServer is the tiny-URL service's ask endpoint: 200 for names under
// ok.test, 500 under err.test, 404 for every other name. A name under
// hold.test is answered 200 once release is closed. It records the
// requests.
type askServer struct {
	*httptest.Server
	release chan struct{}
	held    chan struct{} // one value per request held
	mu      sync.Mutex
	calls   map[string]int // by name
	reqs    []*http.Request
}

func newAsk(t *testing.T) *askServer {
	a := &askServer{release: make(chan struct{}), held: make(chan struct{}, 16), calls: map[string]int{}}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("domain")
		a.mu.Lock()
		a.calls[name]++
		a.reqs = append(a.reqs, r)
		a.mu.Unlock()
		switch {
		case strings.HasSuffix(name, ".hold.test"):
			a.held <- struct{}{}
			select {
			case <-a.release:
			case <-r.Context().Done():
			}
		case strings.HasSuffix(name, ".ok.test"):
		case strings.HasSuffix(name, ".err.test"):
			w.WriteHeader(http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(func() {
		select {
		case <-a.release:
		default:
			close(a.release)
		}
		a.Close()
	})
	return a
}

// asked returns how many times name was asked for.
func (a *askServer) asked(name string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls[name]
}

// onDemand is a server.tls section with on-demand certificates, asking ask,
// storing in a folder of the test's. Its CA is never reached: a decision
// orders nothing.
func onDemand(t *testing.T, ask string) edge.Config {
	c := paced()
	c.OnDemand.Ask = ask
	c.Storage.Path = t.TempDir()
	return c
}

// paced is the default server.tls section with its handshake and ask
// timeouts stretched by the machine's pace (within the ranges a config
// may have): a busy machine answers an ask or makes an order in its own
// time, and an answer late by its load is not the failure a test checks.
func paced() edge.Config {
	c := edge.DefaultConfig()
	c.HandshakeTimeout = min(testkit.Slack(c.HandshakeTimeout), 5*time.Minute)
	c.OnDemand.AskTimeout = min(testkit.Slack(c.OnDemand.AskTimeout), time.Minute)
	return c
}

// newEdge compiles c and starts its edge with opts, on the clock clk when
// it is not nil, reporting to a registry of its own.
func newEdge(t *testing.T, c edge.Config, opts edge.Options, clk *testkit.Clock) (*edge.Edge, *prometheus.Registry) {
	t.Helper()
	p, err := edge.Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	opts.Metrics = edge.NewMetrics(reg)
	e, err := edge.New(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if clk != nil {
		e.SetClock(clk.Now)
	}
	return e, reg
}

// fromClient returns the context certmagic gives a decision for a
// handshake from ip (a loopback address: 127.0.0.2, 127.0.0.3, ...): its
// ClientHelloInfo, on the server's side of a real connection dialed from
// ip.
func fromClient(t *testing.T, ip string) context.Context {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial from %s: %v", ip, err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	hello := &tls.ClientHelloInfo{Conn: s}
	return context.WithValue(context.Background(), certmagic.ClientHelloInfoCtxKey, hello)
}

// TestAskAnswersCached: an ask's 200 allows a name and is kept allow_ttl,
// its 404 denies it and is kept deny_ttl, each asked once meanwhile; a 500
// is a failure, never kept. The ask is GET <ask>&domain=<name>, the ask
// URL's own query kept.
func TestAskAnswersCached(t *testing.T) {
	ask := newAsk(t)
	clk := testkit.NewClock(time.Date(2026, 3, 28, 10, 0, 0, 0, time.UTC))
	c := onDemand(t, ask.URL+"/tls/ask?token=s3cret")
	c.OnDemand.AllowTTL, c.OnDemand.DenyTTL = time.Hour, 10*time.Minute
	e, reg := newEdge(t, c, edge.Options{}, clk)
	ctx := context.Background()

	for range 3 {
		if err := e.Decide(ctx, "brand.ok.test"); err != nil {
			t.Fatalf("an allowed name: %v", err)
		}
		if err := e.Decide(ctx, "junk.no.test"); err == nil || !strings.Contains(err.Error(), "denies") {
			t.Fatalf("a denied name: %v, want the ask's denial", err)
		}
	}
	for range 2 {
		if err := e.Decide(ctx, "down.err.test"); err == nil {
			t.Fatalf("a name the ask failed for was allowed")
		}
	}
	for name, want := range map[string]int{"brand.ok.test": 1, "junk.no.test": 1, "down.err.test": 2} {
		if got := ask.asked(name); got != want {
			t.Errorf("%s asked %d times, want %d", name, got, want)
		}
	}
	ask.mu.Lock()
	r := ask.reqs[0]
	ask.mu.Unlock()
	if r.Method != http.MethodGet || r.URL.Path != "/tls/ask" || r.URL.Query().Get("token") != "s3cret" || r.URL.Query().Get("domain") != "brand.ok.test" {
		t.Errorf("the ask was %s %s, want GET /tls/ask?token=s3cret&domain=brand.ok.test", r.Method, r.URL)
	}

	clk.Advance(10*time.Minute + time.Second) // the denial expired, not the allowance
	e.Decide(ctx, "brand.ok.test")
	e.Decide(ctx, "junk.no.test")
	if a, d := ask.asked("brand.ok.test"), ask.asked("junk.no.test"); a != 1 || d != 2 {
		t.Errorf("after deny_ttl: the allowed name asked %d times, the denied %d; want 1 and 2", a, d)
	}
	clk.Advance(time.Hour)
	e.Decide(ctx, "brand.ok.test")
	if got := ask.asked("brand.ok.test"); got != 2 {
		t.Errorf("after allow_ttl the allowed name was asked %d times, want 2", got)
	}

	for decision, want := range map[string]float64{"allowed": 5, "denied": 4, "ask_failed": 2} {
		if got := testkit.Metric(t, reg, "linkgate_tls_on_demand_decisions_total", "decision", decision); got != want {
			t.Errorf("decisions %s: %v, want %v", decision, got, want)
		}
	}
	for answer, want := range map[string]float64{"allow": 2, "deny": 2, "error": 2} {
		if got := testkit.Metric(t, reg, "linkgate_tls_ask_requests_total", "answer", answer); got != want {
			t.Errorf("asks answered %s: %v, want %v", answer, got, want)
		}
	}
}

// TestAskOncePerName: a decision for a name whose ask is in flight waits
// for that ask rather than asking again: a handshake given up meanwhile
// returns at once, and the answer, once in, is every handshake's.
func TestAskOncePerName(t *testing.T) {
	ask := newAsk(t)
	e, _ := newEdge(t, onDemand(t, ask.URL), edge.Options{}, nil)
	first := make(chan error, 1)
	go func() { first <- e.Decide(context.Background(), "slow.hold.test") }()
	testkit.Recv(t, ask.held, 30*time.Second, "the first decision's ask")
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.Decide(gone, "slow.hold.test"); !errors.Is(err, context.Canceled) {
		t.Errorf("a second handshake, given up, during the ask: %v, want context.Canceled", err)
	}
	close(ask.release)
	if err := testkit.Recv(t, first, 30*time.Second, "the first decision, its ask answered"); err != nil {
		t.Errorf("the first decision: %v, want allowed", err)
	}
	if err := e.Decide(context.Background(), "slow.hold.test"); err != nil {
		t.Errorf("a third decision: %v, want allowed", err)
	}
	if got := ask.asked("slow.hold.test"); got != 1 {
		t.Errorf("the name was asked %d times, want once", got)
	}
}

// TestApplyKeepsOrDropsAnswers: a reload with the same ask settings keeps
// the answers; one that changes the ask URL or a TTL drops them.
func TestApplyKeepsOrDropsAnswers(t *testing.T) {
	ask := newAsk(t)
	c := onDemand(t, ask.URL)
	e, _ := newEdge(t, c, edge.Options{}, nil)
	ctx := context.Background()
	apply := func(c edge.Config) {
		t.Helper()
		p, err := edge.Compile(c)
		if err != nil {
			t.Fatal(err)
		}
		e.Apply(p)
	}
	e.Decide(ctx, "kept.ok.test")
	apply(c)
	e.Decide(ctx, "kept.ok.test")
	if got := ask.asked("kept.ok.test"); got != 1 {
		t.Errorf("after a reload that changed nothing the name was asked %d times, want 1", got)
	}
	for _, change := range []func(*edge.Config){
		func(c *edge.Config) { c.OnDemand.Ask = ask.URL + "/other" },
		func(c *edge.Config) { c.OnDemand.AllowTTL = 2 * time.Hour },
		func(c *edge.Config) { c.OnDemand.DenyTTL = time.Hour },
	} {
		change(&c)
		apply(c)
		e.Decide(ctx, "kept.ok.test")
	}
	if got := ask.asked("kept.ok.test"); got != 4 {
		t.Errorf("after three reloads that changed the ask the name was asked %d times, want 4", got)
	}
}

// TestHandshakesPerClient: a client address may make handshakes_per_client
// handshakes for names whose answer is not known yet; the next is refused
// without an ask, while another address still asks, and a name answered
// already is answered from memory whoever asks. Once the window passed the
// address asks again.
func TestHandshakesPerClient(t *testing.T) {
	ask := newAsk(t)
	clk := testkit.NewClock(time.Date(2026, 3, 28, 10, 0, 0, 0, time.UTC))
	c := onDemand(t, ask.URL)
	c.OnDemand.HandshakesPerClient = []limit.Limit{{N: 2, Window: time.Minute}}
	e, reg := newEdge(t, c, edge.Options{LimitStore: limit.NewMemoryAt(clk.Now)}, clk)
	a, b := fromClient(t, "127.0.0.2"), fromClient(t, "127.0.0.3")

	e.Decide(a, "a1.no.test")
	e.Decide(a, "a2.ok.test")
	if err := e.Decide(a, "a3.ok.test"); err == nil || !strings.Contains(err.Error(), "handshakes_per_client") {
		t.Errorf("the client's third unknown name: %v, want refused by handshakes_per_client", err)
	}
	if got := ask.asked("a3.ok.test"); got != 0 {
		t.Errorf("a refused handshake asked %d times", got)
	}
	if err := e.Decide(b, "b1.ok.test"); err != nil {
		t.Errorf("another client's first name: %v", err)
	}
	if err := e.Decide(a, "a2.ok.test"); err != nil {
		t.Errorf("a name answered already, for the client over its limit: %v", err)
	}
	if got := testkit.Metric(t, reg, "linkgate_tls_on_demand_decisions_total", "decision", "limited"); got != 1 {
		t.Errorf("%v limited decisions counted, want 1", got)
	}
	clk.Advance(time.Minute + time.Second)
	if err := e.Decide(a, "a3.ok.test"); err != nil {
		t.Errorf("the client's next name a minute later: %v", err)
	}
}

// TestClientKey: the counted value of an address is Options.ClientKey's
// (an IPv6 prefix, say): addresses it gives one value share a limit.
func TestClientKey(t *testing.T) {
	ask := newAsk(t)
	c := onDemand(t, ask.URL)
	c.OnDemand.HandshakesPerClient = []limit.Limit{{N: 1, Window: time.Hour}}
	var keyed []netip.Addr
	var mu sync.Mutex
	e, _ := newEdge(t, c, edge.Options{ClientKey: func(a netip.Addr) string {
		mu.Lock()
		keyed = append(keyed, a)
		mu.Unlock()
		return "one network"
	}}, nil)
	if err := e.Decide(fromClient(t, "127.0.0.2"), "x.ok.test"); err != nil {
		t.Fatal(err)
	}
	if err := e.Decide(fromClient(t, "127.0.0.3"), "y.ok.test"); err == nil {
		t.Errorf("a second address of the same key was not limited")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keyed) != 2 || keyed[0] != netip.MustParseAddr("127.0.0.2") || keyed[1] != netip.MustParseAddr("127.0.0.3") {
		t.Errorf("ClientKey was given %v, want the two client addresses", keyed)
	}
}

// downStore is a limiter store that cannot be reached.
type downStore struct{}

var errStoreDown = errors.New("limiter store down")

func (downStore) Load(context.Context, limit.Counter, []limit.Bucket, []int64) error {
	return errStoreDown
}
func (downStore) Add(context.Context, limit.Counter, []limit.Bucket, int64) error {
	return errStoreDown
}
func (downStore) AddNow(context.Context, limit.Counter, []limit.Bucket, int64) error {
	return errStoreDown
}
func (downStore) Reset(context.Context, limit.Counter, []limit.Bucket) error { return errStoreDown }
func (downStore) PutBox(context.Context, limit.Counter, limit.Box, int64) error {
	return errStoreDown
}
func (downStore) Boxes(context.Context, int64, func(limit.Boxed) bool) error { return errStoreDown }

// TestLimitStoreDown: while the limiter's store cannot be reached the
// handshakes are not limited (the ask endpoint still decides), and the
// failure is logged once every 10 seconds, with the count held back.
func TestLimitStoreDown(t *testing.T) {
	ask := newAsk(t)
	clk := testkit.NewClock(time.Date(2026, 3, 28, 10, 0, 0, 0, time.UTC))
	c := onDemand(t, ask.URL)
	c.OnDemand.HandshakesPerClient = []limit.Limit{{N: 1, Window: time.Hour}}
	logs := &testkit.Logs{}
	e, _ := newEdge(t, c, edge.Options{LimitStore: downStore{}, Log: slog.New(logs.Handler())}, clk)
	a := fromClient(t, "127.0.0.2")
	for _, name := range []string{"p.ok.test", "q.ok.test", "r.ok.test"} {
		if err := e.Decide(a, name); err != nil {
			t.Errorf("%s with the limiter's store down: %v, want allowed", name, err)
		}
	}
	const msg = "handshake limit store failed; the handshake is not limited"
	if got := logs.Count(msg, nil); got != 1 {
		t.Errorf("three failures logged %d times, want once:\n%s", got, logs.String())
	}
	clk.Advance(10 * time.Second)
	e.Decide(a, "s.ok.test")
	if !logs.Logged(msg, map[string]string{"suppressed": "2"}) {
		t.Errorf("ten seconds later the failure was not logged again with the 2 held back:\n%s", logs.String())
	}
}

// TestHandshakeCountsApartFromRules: the handshakes of a client are
// counted apart from the requests a rule of the limiter counts for it in
// the same store, whatever the rule is named.
func TestHandshakeCountsApartFromRules(t *testing.T) {
	ask := newAsk(t)
	store := limit.NewMemory()
	rule := limit.Rule{Name: "tls_handshake", Match: limit.Match{Path: "/"}, Key: limit.IP, Limits: []limit.Limit{{N: 1, Window: time.Hour}}}
	plan, err := limit.Compile([]limit.Rule{rule}, limit.DefaultIdentity(), limit.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := limit.New(plan, store, nil, nil).Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "127.0.0.2:4000"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("the rule's first request: %d", rec.Code)
	}

	c := onDemand(t, ask.URL)
	c.OnDemand.HandshakesPerClient = []limit.Limit{{N: 1, Window: time.Hour}}
	e, _ := newEdge(t, c, edge.Options{LimitStore: store}, nil)
	if err := e.Decide(fromClient(t, "127.0.0.2"), "s.ok.test"); err != nil {
		t.Errorf("the client's first handshake, after a request a rule counted: %v", err)
	}
}
