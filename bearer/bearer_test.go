package bearer_test

import (
	"net/http/httptest"
	"testing"

	"github.com/linkgate/linkgate/bearer"
)

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		header, token string
		want          bool
	}{
		{"Bearer s3cret", "s3cret", true},
		{"bearer s3cret", "s3cret", true},
		{"BEARER s3cret", "s3cret", true},
		{"Bearer   s3cret ", "s3cret", true},
		{"Bearer s3cre", "s3cret", false},
		{"Bearer s3cret2", "s3cret", false},
		{"Basic s3cret", "s3cret", false},
		{"Bearers3cret", "s3cret", false},
		{"s3cret", "s3cret", false},
		{"", "s3cret", false},
		{"Bearer ", "", false},
		{"Bearer x", "", false},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		if got := bearer.Match(r, tc.token); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.header, tc.token, got, tc.want)
		}
	}
}

func TestChallenge(t *testing.T) {
	w := httptest.NewRecorder()
	bearer.Challenge(w, httptest.NewRequest("GET", "/", nil), "linkgate admin")
	if got := w.Header().Get("WWW-Authenticate"); got != `Bearer realm="linkgate admin"` {
		t.Errorf("without credentials: %q", got)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer nope")
	w = httptest.NewRecorder()
	bearer.Challenge(w, r, "linkgate stats")
	if got := w.Header().Get("WWW-Authenticate"); got != `Bearer realm="linkgate stats", error="invalid_token"` {
		t.Errorf("with credentials: %q", got)
	}
}
