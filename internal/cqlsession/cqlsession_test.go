package cqlsession

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gocql/gocql"

	"github.com/linkgate/linkgate/analytics/cassandra/cqlmodel"
	"github.com/linkgate/linkgate/internal/testkit"
)

// TestStateWhileConnecting: a Handle says connecting (no failed attempt),
// then why the cluster is not reachable with the attempts counted, then
// ready, its schema created; after Close, closed.
func TestStateWhileConnecting(t *testing.T) {
	srv := cqlmodel.New(t)
	synctest.Test(t, func(t *testing.T) {
		p := NewPool(nil)
		dials := 0
		release := make(chan struct{})
		p.dial = func(ctx context.Context, c Config) (*gocql.Session, error) {
			dials++
			if dials == 1 {
				<-release
			}
			if dials < 3 {
				return nil, errors.New("dial tcp 10.0.0.1:9042: connection refused")
			}
			return &gocql.Session{}, nil // never used: no schema, no query
		}
		h := p.Open(Config{Hosts: []string{srv.Addr()}, Timeout: time.Second}, "test", nil)
		synctest.Wait()
		if st := h.State(); st.Connected || st.Attempts != 0 || !errors.Is(st.Err, ErrNotConnected) || !strings.Contains(st.Err.Error(), "connecting") {
			t.Errorf("State during the first attempt = %+v, want not connected, 0 attempts, connecting", st)
		}
		close(release)
		synctest.Wait()
		if st := h.State(); st.Connected || st.Attempts != 1 || !strings.Contains(st.Err.Error(), "connection refused") {
			t.Errorf("State after a failed attempt = %+v, want 1 attempt and its error", st)
		}
		time.Sleep(2 * time.Second) // the backoff: 0.5 s, then 1 s
		synctest.Wait()
		if st := h.State(); !st.Connected || st.Err != nil || st.Attempts != 2 {
			t.Errorf("State once connected = %+v, want connected, usable, 2 failed attempts", st)
		}
		select {
		case <-h.Ready():
		default:
			t.Error("not ready once connected with no schema to create")
		}
		p.mu.Lock()
		c := p.clusters[Config{Hosts: []string{srv.Addr()}, Timeout: time.Second}.key()]
		p.mu.Unlock()
		c.mu.Lock()
		c.sess = nil // the fake session must not be closed
		c.mu.Unlock()
		h.Close()
		if _, err := h.Session(); !errors.Is(err, ErrClosed) {
			t.Errorf("Session after Close = %v, want ErrClosed", err)
		}
	})
}

// TestOneSessionPerCluster: two stores naming the same cluster (hosts in
// another order, the same timeout) share one session, connected once, each
// with its schema run; a third with another timeout has its own; the
// session closes with its last Handle, and a Handle opened then connects
// anew.
func TestOneSessionPerCluster(t *testing.T) {
	a, b := cqlmodel.New(t), cqlmodel.New(t)
	p := NewPool(nil)
	cfg := Config{Hosts: []string{a.Addr(), b.Addr()}, Timeout: 2 * time.Second}
	h1 := p.Open(cfg, "analytics", []string{"CREATE KEYSPACE IF NOT EXISTS one WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"})
	h2 := p.Open(Config{Hosts: []string{b.Addr(), a.Addr()}, Timeout: 2 * time.Second}, "tls", []string{"CREATE KEYSPACE IF NOT EXISTS two WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"})
	h3 := p.Open(Config{Hosts: cfg.Hosts, Timeout: 3 * time.Second}, "other", nil)
	defer h3.Close()
	s1, s2, s3 := ready(t, h1), ready(t, h2), ready(t, h3)
	if s1 != s2 || s1 == s3 {
		t.Errorf("sessions %p %p %p: want the first two shared, the third apart", s1, s2, s3)
	}
	a.Mu.Lock()
	b.Mu.Lock()
	ddl := append(append([]string{}, a.DDL...), b.DDL...)
	b.Mu.Unlock()
	a.Mu.Unlock()
	if len(ddl) != 2 || !strings.Contains(strings.Join(ddl, "\n"), "one") || !strings.Contains(strings.Join(ddl, "\n"), "two") {
		t.Errorf("DDL run: %q, want each handle's once", ddl)
	}
	h1.Close()
	if s, err := h2.Session(); err != nil || s != s2 || s.Closed() {
		t.Fatalf("the other handle's session after one Close: %v, closed %v", err, s.Closed())
	}
	h2.Close()
	if !s2.Closed() {
		t.Error("the session is open after its last handle closed")
	}
	h4 := p.Open(cfg, "again", nil)
	defer h4.Close()
	if s4 := ready(t, h4); s4 == s2 || s4.Closed() {
		t.Error("a handle opened after the last one closed got the closed session")
	}
}

func ready(t *testing.T, h *Handle) *gocql.Session {
	t.Helper()
	select {
	case <-h.Ready():
	case <-time.After(testkit.Slack(20 * time.Second)):
		t.Fatalf("not ready: %v", h.State().Err)
	}
	s, err := h.Session()
	if err != nil {
		t.Fatal(err)
	}
	return s
}
