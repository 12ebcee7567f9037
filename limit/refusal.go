package limit

import (
	"context"
	"net/http"
)

// Refusal is what the access log says of a request the limiter refused
// with 429: the rule, and whether the client was in its penalty box (or
// was just put there).
type Refusal struct {
	Rule  string // "": no rule refused the request
	Boxed bool
}

type refusalKey struct{}

// WithRefusal returns ctx holding r, which the Middleware fills in when a
// rule refuses the request with 429, for the access log to name it.
func WithRefusal(ctx context.Context, r *Refusal) context.Context {
	return context.WithValue(ctx, refusalKey{}, r)
}

// noteRefusal fills in the Refusal the request's context holds, if any.
func noteRefusal(r *http.Request, rule string, boxed bool) {
	if ref, _ := r.Context().Value(refusalKey{}).(*Refusal); ref != nil {
		*ref = Refusal{Rule: rule, Boxed: boxed}
	}
}
