package limit_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/limit"
)

// guessesPerDay runs a password guesser against rule for days days, on a
// fake clock, through the limiter's middleware in front of a login that
// answers 401 to every guess: it guesses again at once after a 401 and
// waits the Retry-After of a 429. It returns the guesses the login saw
// each day.
func guessesPerDay(t *testing.T, rule limit.Rule, days int) []int {
	t.Helper()
	clk := testkit.NewClock(time.Date(2026, 3, 28, 0, 0, 0, 0, time.UTC))
	start := clk.Now()
	l := limit.New(compile(t, []limit.Rule{rule}, limit.DefaultIdentity(), limit.DefaultConfig()), limit.NewMemoryAt(clk.Now), nil, nil).WithClock(clk.Now)
	per := make([]int, days)
	h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		per[int(clk.Now().Sub(start)/(24*time.Hour))]++
		w.WriteHeader(http.StatusUnauthorized)
	}))
	for clk.Now().Sub(start) < time.Duration(days)*24*time.Hour {
		req := httptest.NewRequest("POST", "/login", strings.NewReader("email=victim%40example.com&password=guess"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		switch w.Code {
		case http.StatusUnauthorized:
		case http.StatusTooManyRequests:
			n, err := strconv.Atoi(w.Header().Get("Retry-After"))
			if err != nil || n < 1 {
				t.Fatalf("Retry-After %q", w.Header().Get("Retry-After"))
			}
			clk.Advance(time.Duration(n) * time.Second)
		default:
			t.Fatalf("status %d", w.Code)
		}
	}
	return per
}

// TestGuesserPerDay computes the guesses a password guesser gets each
// day for a week under the seed's login rule (5 wrong passwords per email
// a minute, 10 a day, counting 401s) and under its minute limit alone,
// with and without a penalty box, and checks that the docs' table of them
// (its rows in the Limiter section) says so.
func TestGuesserPerDay(t *testing.T) {
	pen := limit.Penalty{Duration: 15 * time.Minute, Factor: 2, Max: 24 * time.Hour, ForgetAfter: 7 * 24 * time.Hour}
	docs := docsText(t)
	for _, tc := range []struct {
		limits  string
		penalty string
		pen     limit.Penalty
	}{
		{"5/m", "none", limit.Penalty{}},
		{"5/m", "{duration: 15m, factor: 2, max: 24h, forget_after: 168h}", pen},
		{"5/m, 10/d", "none", limit.Penalty{}},
		{"5/m, 10/d", "{duration: 15m, factor: 2, max: 24h, forget_after: 168h}", pen},
	} {
		r := loginEmailRule(t)
		r.Limits = limits(t, strings.Split(tc.limits, ", ")...)
		r.CountStatus = []int{401}
		r.Penalty = tc.pen
		per := guessesPerDay(t, r, 7)
		row := "| `[" + tc.limits + "]` | `" + tc.penalty + "` |"
		week := 0
		for _, n := range per {
			row += " " + thousands(n) + " |"
			week += n
		}
		row += " " + thousands(week) + " |"
		if !strings.Contains(docs, row) {
			t.Errorf("the docs' table of guesses per day lacks the row\n%s", row)
		}
	}
}

// thousands writes n with a comma between thousands: 7,200.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// docsText returns README.md and the files of docs/, joined.
func docsText(t *testing.T) string {
	t.Helper()
	paths, _ := filepath.Glob("../docs/*.md")
	var b strings.Builder
	for _, p := range append([]string{"../README.md"}, paths...) {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}
