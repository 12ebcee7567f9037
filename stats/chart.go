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
// their hashes (CSP Level 3), fetch from its origin, and nothing else; no
// page may frame it but the embed view's ancestors.
var chartCSP = "default-src 'none'; connect-src 'self'; script-src " + inlineHash("script") +
	"; style-src " + inlineHash("style") + "; base-uri 'none'; form-action 'none'; frame-ancestors "

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

// serveChart writes the chart page: framed by none, or, as the embed view,
// by the sources of ancestors (none when it is empty).
func serveChart(w http.ResponseWriter, embed bool, ancestors []string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	fa := "'none'"
	if embed && len(ancestors) > 0 {
		fa = strings.Join(ancestors, " ")
	}
	h.Set("Content-Security-Policy", chartCSP+fa)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-cache")
	w.Write(chartHTML)
}
