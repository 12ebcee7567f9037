package problem_test

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/linkgate/linkgate/problem"
)

func TestWriteDetails(t *testing.T) {
	rec := httptest.NewRecorder()
	rec.Header().Set("Retry-After", "3")
	problem.WriteDetails(rec, problem.Details{Status: 429, Detail: "slow down", Extra: map[string]any{"rule": "login_ip", "status": 200}})
	if rec.Code != 429 || rec.Header().Get("Content-Type") != "application/problem+json" || rec.Header().Get("Retry-After") != "3" {
		t.Fatalf("got %d %v", rec.Code, rec.Header())
	}
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"type": "about:blank", "title": "Too Many Requests", "status": 429.0, "detail": "slow down", "rule": "login_ip"}
	for k, v := range want {
		if body[k] != v {
			t.Errorf("%s = %v, want %v", k, body[k], v)
		}
	}
}

func TestMethodNotAllowed(t *testing.T) {
	rec := httptest.NewRecorder()
	problem.MethodNotAllowed(rec, httptest.NewRequest("PUT", "/healthz", nil))
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != 405 || body["detail"] != "PUT is not allowed on /healthz" {
		t.Fatalf("got %d %v (%v), want 405 naming the method and the path", rec.Code, body, err)
	}
}
