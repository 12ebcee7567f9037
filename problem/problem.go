// Package problem writes HTTP error answers as RFC 9457 problem details
// (application/problem+json), the one error shape every linkgate endpoint uses.
package problem

import (
	"encoding/json"
	"net/http"
)

// Details is an RFC 9457 problem object. Extra members (a rule's name, the
// limit that was hit) go in Extra and are written beside the standard ones.
type Details struct {
	Type   string         `json:"type"`
	Title  string         `json:"title"`
	Status int            `json:"status"`
	Detail string         `json:"detail,omitempty"`
	Extra  map[string]any `json:"-"`
}

// Write answers status with a problem body whose title is the status text.
func Write(w http.ResponseWriter, status int, detail string) {
	WriteDetails(w, Details{Status: status, Detail: detail})
}

// MethodNotAllowed answers 405 naming the method and the path: a router's
// handler for a path that exists under other methods.
func MethodNotAllowed(w http.ResponseWriter, r *http.Request) {
	Write(w, http.StatusMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path)
}

// WriteDetails answers d.Status with d as the body, filling Type and Title
// when empty. Headers set on w before the call (Retry-After) are kept.
func WriteDetails(w http.ResponseWriter, d Details) {
	if d.Type == "" {
		d.Type = "about:blank" // RFC 9457 section 4.2.1: the title is the status text
	}
	if d.Title == "" {
		d.Title = http.StatusText(d.Status)
	}
	body := map[string]any{"type": d.Type, "title": d.Title, "status": d.Status}
	if d.Detail != "" {
		body["detail"] = d.Detail
	}
	for k, v := range d.Extra {
		if _, std := body[k]; !std {
			body[k] = v
		}
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	w.WriteHeader(d.Status)
	json.NewEncoder(w).Encode(body)
}

// CloseConnection asks the server to close the connection of r after the
// answer being written, whose request's body will not be read to its end:
// on HTTP/1 the connection cannot carry another request then. An HTTP/2
// or HTTP/3 stream ends on its own (the server resets one whose body is
// left unread), and the other streams of its connection are not the
// request's to end: there it does nothing (x/net/http2 takes the field
// as a GOAWAY for the whole connection, and HTTP/3 forbids it).
func CloseConnection(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
}
