package limit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/linkgate/linkgate/limit"
)

func ExampleLimiter_Middleware() {
	now := time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	rules := []limit.Rule{{
		Name:   "login_ip",
		Match:  limit.Match{Methods: []string{"POST"}, Path: "/login"},
		Key:    limit.IP,
		Limits: []limit.Limit{{N: 2, Window: time.Second}, {N: 5, Window: time.Minute}},
	}}
	// Compile checks everything; New cannot refuse what it accepted.
	plan, err := limit.Compile(rules, limit.DefaultIdentity(), limit.DefaultConfig(), nil)
	if err != nil {
		panic(err)
	}
	l := limit.New(plan, limit.NewMemoryAt(clock), nil, nil)
	h := l.WithClock(clock).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 3 {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/login", nil)
		req.RemoteAddr = "203.0.113.7:5555"
		h.ServeHTTP(rec, req)
		fmt.Println(strings.TrimSpace(fmt.Sprint(rec.Code, " ", rec.Header().Get("RateLimit"), " ", rec.Header().Get("Retry-After"))))
	}
	// Output:
	// 200 "login_ip-1s";r=1;t=1
	// 200 "login_ip-1s";r=0;t=1
	// 429 "login_ip-1s";r=0;t=1 1
}
