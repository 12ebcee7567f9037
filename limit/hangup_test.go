package limit_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/limit"
)

// The victim of the password guessing in these tests, and the upstream's
// only user.
const (
	victim         = "sam@example.com"
	victimPassword = "right"
)

// TestHangUpAfterStatusIsCounted: a client that reads the status line of
// the upstream's 401 and hangs up (while the upstream is still sending the
// body) must be counted like any other: a count that honours the request's
// cancellation would let such a client guess passwords unlimited.
func TestHangUpAfterStatusIsCounted(t *testing.T) {
	// The upstream sends the 401's header at once and, for a client that
	// asks for it (X-Slow), the body only when the request is over: such a
	// client can take the status and hang up in between.
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("password") == victimPassword {
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
		if r.Header.Get("X-Slow") != "" {
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}
	})
	upSrv := httptest.NewServer(upstream)
	defer upSrv.Close()
	target, _ := url.Parse(upSrv.URL)
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) }}
	rule := limit.Rule{Name: "login_email", Match: limit.Match{Methods: []string{"POST"}, Path: "/login"}, Key: limit.Email,
		Limits: limits(t, "5/m"), CountStatus: []int{401}}
	l := limit.New(compile(t, []limit.Rule{rule}, limit.DefaultIdentity(), limit.DefaultConfig()), limit.NewMemory(), nil, nil)
	gw := l.Middleware(proxy)
	var served sync.WaitGroup // the gateway's handler returned: the attempt is counted, or never will be
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer served.Done()
		gw.ServeHTTP(w, r)
	}))
	defer srv.Close()

	body := "email=" + url.QueryEscape(victim) + "&password=wrong"
	for i := range 5 {
		served.Add(1)
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST /login HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s", "application/x-www-form-urlencoded", len(body), body)
		status, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || !strings.Contains(status, " 401 ") {
			t.Fatalf("attempt %d: status line %q (%v), want the upstream's 401", i+1, status, err)
		}
		c.Close()
	}
	done := make(chan struct{})
	go func() { served.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(testkit.Slack(10 * time.Second)):
		t.Fatal("the gateway never noticed the clients hang up")
	}
	served.Add(1)
	resp, err := srv.Client().Post(srv.URL+"/login", "application/x-www-form-urlencoded", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 {
		t.Fatalf("6th attempt after 5 hang-ups: status %d, want 429 (the hang-ups were not counted)", resp.StatusCode)
	}
}
