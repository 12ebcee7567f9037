package ongoing

import (
	"context"
	"time"
)

// StartKey is the key under which a server's request contexts hold when
// the request began, as a *time.Time: the server reads the clock once per
// request, and the layers that time a request or count it in a window
// (the metrics, the limiter, the visit counter) take that read (Start)
// rather than one each.
type StartKey struct{}

// Start is when the request whose context is ctx began: its server's one
// read of the clock where the server notes it (StartKey; h1serve's and
// h2serve's loops do, in a RequestContext), else time.Now().
func Start(ctx context.Context) time.Time {
	if t, ok := ctx.Value(StartKey{}).(*time.Time); ok {
		return *t
	}
	return time.Now()
}
