package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// A kind of visit: a protocol, with or without a session to resume.
type kind struct {
	proto   string
	cache   tls.ClientSessionCache // nil: a full handshake every time
	times   []time.Duration
	failed  int
	resumed int
}

// visits makes n visits of each kind in turn (h2, h3, h2, ...), each on a
// new transport and so a new connection (TCP+TLS or QUIC), and prints the
// time from the dial to the response's head per kind: its median, p90 and
// p99, and h3's over h2's. With resume, the kinds with a session cache
// first make a visit to fill it, not counted.
func visits(url string, n int, resume bool) {
	kinds := []*kind{{proto: "h2"}, {proto: "h3"}}
	if resume {
		kinds = append(kinds, &kind{proto: "h2", cache: tls.NewLRUClientSessionCache(1)},
			&kind{proto: "h3", cache: tls.NewLRUClientSessionCache(1)})
		for _, k := range kinds[2:] {
			visit(url, k)
			k.times, k.failed, k.resumed = nil, 0, 0
		}
	}
	for range n {
		for _, k := range kinds {
			visit(url, k)
		}
	}
	for i, k := range kinds {
		name := k.proto + " full"
		if k.cache != nil {
			name = fmt.Sprintf("%s resumed (%d of %d)", k.proto, k.resumed, len(k.times))
		}
		slices.Sort(k.times)
		fmt.Printf("%-24s median %7.1f ms  p90 %7.1f ms  p99 %7.1f ms  max %7.1f ms  %d failed\n",
			name, ms(pct(k.times, 50)), ms(pct(k.times, 90)), ms(pct(k.times, 99)), ms(pct(k.times, 100)), k.failed)
		if k.proto == "h3" {
			h2 := kinds[i-1].times
			fmt.Printf("%-24s median %7.2f×    p90 %7.2f×    p99 %7.2f×\n", "  h3 ÷ h2",
				ratio(pct(k.times, 50), pct(h2, 50)), ratio(pct(k.times, 90), pct(h2, 90)), ratio(pct(k.times, 99), pct(h2, 99)))
		}
	}
}

// visit GETs url once over a transport of its own and records the time
// until the response's head (its status line) came, or a failure.
func visit(url string, k *kind) {
	cfg := &tls.Config{InsecureSkipVerify: true, ClientSessionCache: k.cache}
	var rt http.RoundTripper
	if k.proto == "h3" {
		t := &http3.Transport{TLSClientConfig: cfg}
		defer t.Close()
		rt = t
	} else {
		t := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
		defer t.CloseIdleConnections()
		rt = t
	}
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	c := &http.Client{Transport: rt, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t0 := time.Now()
	resp, err := c.Do(req)
	took := time.Since(t0)
	if err != nil {
		k.failed++
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 400 || resp.ProtoMajor != map[string]int{"h2": 2, "h3": 3}[k.proto] {
		k.failed++
		return
	}
	if resp.TLS != nil && resp.TLS.DidResume {
		k.resumed++
	}
	k.times = append(k.times, took)
}

// pct is the nearest-rank p-th percentile of sorted times (0 when none).
func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (p*len(sorted) + 99) / 100
	return sorted[max(i, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
