package analytics

import (
	"fmt"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5/middleware"
)

// NewMiddleware returns the middleware that counts visits: a request that
// matches cfg.Match (its {short_key} names the link) and that the next
// handler answers with a status in cfg.CountStatus is recorded in rec, as a
// bot visit when its User-Agent is a known bot and cfg.Bots is "separate".
// Anything else, a 404 for an unknown key above all, is not a visit, so
// random paths cannot grow memory or storage; nor is a request whose short
// key is longer than cfg.MaxKeyBytes (default 256), counted instead in
// linkgate_analytics_keys_too_long_total, so that made-up keys of tens of
// kilobytes cannot either. With cfg.Enabled false it passes requests
// through untouched.
//
// Build one per config snapshot; rec outlives them (call rec.SetMaxKeys and
// rec.SetMaxBytes with the new cfg.MaxKeys and cfg.MaxBufferBytes once a
// reload is accepted). Usage:
//
//	mw, err := analytics.NewMiddleware(cfg.Analytics, rec)
//	handler := mw(proxyHandler)
func NewMiddleware(cfg Config, rec *Recorder) (func(http.Handler) http.Handler, error) {
	if !cfg.Enabled {
		return func(next http.Handler) http.Handler { return next }, nil
	}
	if rec == nil {
		return nil, fmt.Errorf("analytics: middleware: no recorder")
	}
	mt, err := cfg.Match.Compile()
	if err != nil {
		return nil, fmt.Errorf("analytics: match: %w", err)
	}
	bots, err := ParseBotPolicy(cfg.Bots)
	if err != nil {
		return nil, err
	}
	maxKey := cfg.MaxKeyBytes
	if maxKey <= 0 {
		maxKey = DefaultMaxKeyBytes
	}
	var count [600]bool
	for _, s := range cfg.CountStatus {
		if s < 100 || s >= len(count) {
			return nil, fmt.Errorf("analytics: count_status: %d is not an HTTP status", s)
		}
		count[s] = true
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key, ok := mt.Param(r.Method, r.URL.Path, "short_key")
			if !ok || key == "" || key == AllLinks { // a pattern like {short_key:.*} must not count all links twice
				next.ServeHTTP(w, r)
				return
			}
			if len(key) > maxKey {
				rec.m.keyTooLong()
				next.ServeHTTP(w, r)
				return
			}
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r)
			status := ww.Status()
			if status == 0 { // nothing written: net/http answers 200
				status = http.StatusOK
			}
			if status >= len(count) || !count[status] {
				return
			}
			bot := false
			if bots != BotsCount && IsBot(r.UserAgent()) {
				if bots == BotsIgnore {
					return
				}
				bot = true
			}
			rec.Record(key, time.Now(), bot)
		})
	}, nil
}
