package stats

import (
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"net/http"
	"strings"
)

// chartHTML is the chart page: self-contained (inline script and style, no
// CDN, no data), it fetches the JSON answer of its own URL and draws humans
// and bots as an SVG line chart.
//
//go:embed chart.html
var chartHTML []byte

// chartCSP lets the page run its own inline script and style, identified by
// their hashes (CSP Level 3), fetch from its origin, and nothing else.
var chartCSP = "default-src 'none'; connect-src 'self'; script-src " + inlineHash("script") +
	"; style-src " + inlineHash("style") + "; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// inlineHash returns the CSP source of the page's one inline <tag> element.
func inlineHash(tag string) string {
	page := string(chartHTML)
	_, rest, ok1 := strings.Cut(page, "<"+tag+">")
	body, _, ok2 := strings.Cut(rest, "</"+tag+">")
	if !ok1 || !ok2 {
		panic("analytics: chart.html has no <" + tag + "> element")
	}
	sum := sha256.Sum256([]byte(body))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

// serveChart writes the chart page.
func serveChart(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", chartCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-cache")
	w.Write(chartHTML)
}
