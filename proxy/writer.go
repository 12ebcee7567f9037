package proxy

import (
	"net/http"

	"github.com/go-chi/chi/v5/middleware"
)

// StatusWriter returns w as a chi middleware.WrapResponseWriter, which
// records the status and the bytes of the answer to r: w itself when it is
// one already, else a new wrap of w. One wrap thus serves a whole request:
// the gateway's outermost middleware makes it, and the middlewares inside
// that wait for the upstream's status (the limiter's count_status, the
// visit counter) reuse it, as chi's own middlewares share theirs; each of
// them still wraps for itself when used alone. Reuse assumes nothing has
// answered through w yet, as holds for any middleware before it calls next.
//
// Status is 0 until a final status is written (a handler that writes
// nothing answers 200). Flush, Hijack and http.ResponseController reach w
// through the wrap.
func StatusWriter(w http.ResponseWriter, r *http.Request) middleware.WrapResponseWriter {
	if ww, ok := w.(middleware.WrapResponseWriter); ok {
		return ww
	}
	return middleware.NewWrapResponseWriter(w, r.ProtoMajor)
}
