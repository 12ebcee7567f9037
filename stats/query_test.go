package stats

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/rollup"
)

var queryNow = time.Date(2026, 3, 31, 12, 0, 0, 0, time.UTC)

// queryEarliest is where the default tiers' curves begin: the first Monday
// after the unix epoch.
var queryEarliest = time.Date(1970, 1, 5, 0, 0, 0, 0, time.UTC)

func TestParseQuery(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			panic(err)
		}
		return v.UTC()
	}
	for _, tc := range []struct {
		name, raw string
		want      query
	}{
		{"default 24h", "", query{from: queryNow.Add(-24 * time.Hour), to: queryNow}},
		{"90m", "last=90m", query{from: queryNow.Add(-90 * time.Minute), to: queryNow}},
		{"go duration", "last=1h30m", query{from: queryNow.Add(-90 * time.Minute), to: queryNow}},
		{"3d", "last=3d", query{from: queryNow.Add(-72 * time.Hour), to: queryNow}},
		{"2w", "last=2w", query{from: queryNow.Add(-14 * 24 * time.Hour), to: queryNow}},
		{"2mo is calendar months", "last=2mo", query{from: at("2026-01-31T12:00:00Z"), to: queryNow}},
		{"1mo from March 31 normalises Feb 31", "last=1mo", query{from: at("2026-03-03T12:00:00Z"), to: queryNow}},
		{"1y is a calendar year", "last=1y", query{from: at("2025-03-31T12:00:00Z"), to: queryNow}},
		{"from/to rfc3339", "from=2026-03-01T00:00:00Z&to=2026-03-02T00:00:00%2B02:00",
			query{from: at("2026-03-01T00:00:00Z"), to: at("2026-03-01T22:00:00Z")}},
		{"from unix, to now", "from=1774051200", query{from: time.Unix(1774051200, 0).UTC(), to: queryNow}},
		{"to alone: a day before it", "to=1774051200", query{from: time.Unix(1774051200-86400, 0).UTC(), to: time.Unix(1774051200, 0).UTC()}},
		{"step", "last=6h&step=5m", query{from: queryNow.Add(-6 * time.Hour), to: queryNow, step: 5 * time.Minute}},
		{"stitch csv", "last=1y&stitch=true&format=csv", query{from: at("2025-03-31T12:00:00Z"), to: queryNow, stitch: true, format: formatCSV}},
		{"stitch false with step", "stitch=0&step=1w", query{from: queryNow.Add(-24 * time.Hour), to: queryNow, step: 7 * 24 * time.Hour}},
		{"html", "format=html", query{from: queryNow.Add(-24 * time.Hour), to: queryNow, format: formatHTML}},
		{"from=0 starts where curves begin", "from=0", query{from: queryEarliest, to: queryNow}},
		{"from=1 is clamped too", "from=1&to=1970-02-01T00:00:00Z", query{from: queryEarliest, to: time.Date(1970, 2, 1, 0, 0, 0, 0, time.UTC)}},
		{"last reaching before 1970", "last=60y", query{from: queryEarliest, to: queryNow}},
		{"from just after earliest is kept", "from=345601", query{from: time.Unix(345601, 0).UTC(), to: queryNow}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := url.ParseQuery(tc.raw)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseQuery(v, queryNow, queryEarliest)
			if err != nil || !got.from.Equal(tc.want.from) || !got.to.Equal(tc.want.to) || got.step != tc.want.step || got.stitch != tc.want.stitch || got.format != tc.want.format {
				t.Errorf("parseQuery(%q) = %+v, %v; want %+v", tc.raw, got, err, tc.want)
			}
		})
	}
}

func TestParseQueryErrors(t *testing.T) {
	for raw, param := range map[string]string{
		"last=":                     "", // empty means absent: not an error
		"last=0h":                   "last",
		"last=-3d":                  "last",
		"last=3x":                   "last",
		"last=0mo":                  "last",
		"last=1000y":                "last",
		"last=200y":                 "last",
		"last=2000000h":             "last",
		"last=1d&from=1":            "last",
		"last=1d&last=2d":           "last",
		"from=yesterday":            "from",
		"from=-5":                   "from",
		"from=0500-01-01T00:00:00Z": "from",
		"from=10&to=10":             "from",
		"from=20&to=10":             "from",
		"from=0&to=253402300799":    "from", // longer than 100y
		"to=99999999999999":         "to",
		"to=2026-13-01T00:00:00Z":   "to",
		"step=fast":                 "step",
		"step=0m":                   "step",
		"stitch=maybe":              "stitch",
		"stitch=true&step=1h":       "stitch",
		"format=xml":                "format",
		"format=json&format=csv":    "format",
		"lst=1h":                    "lst",
		"last=1h&Last=2h":           "Last",
		"format=html&other=x":       "other",
		"zz=1&aa=2&last=1h":         "aa", // the first unknown, in sorted order
		"=1":                        "",   // "" names the nameless parameter: see below
		"from=1&to=345600":          "to", // the range ends where curves begin
		"to=86400":                  "to",
	} {
		v, _ := url.ParseQuery(raw)
		_, err := parseQuery(v, queryNow, queryEarliest)
		if raw == "=1" {
			var pe *paramError
			if !errors.As(err, &pe) || pe.param != "" || !strings.Contains(pe.reason, "unknown parameter") {
				t.Errorf("parseQuery(%q) error = %v; want an unknown parameter with an empty name", raw, err)
			}
			continue
		}
		var pe *paramError
		switch {
		case param == "" && err != nil:
			t.Errorf("parseQuery(%q): %v, want no error", raw, err)
		case param != "" && (!errors.As(err, &pe) || pe.param != param):
			t.Errorf("parseQuery(%q) error = %v; want one naming %q", raw, err, param)
		}
	}
}

// FuzzParseQuery checks that any query string either parses into a sane
// range or fails naming one of the parameters.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"", "last=2mo", "last=1h30m&step=5m", "from=2026-03-01T00:00:00Z&to=1774051200", "stitch=true&format=csv", "last=9999y", "from=-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q, err := parseQuery(v, queryNow, queryEarliest)
		if err != nil {
			var pe *paramError
			if !errors.As(err, &pe) || !v.Has(pe.param) && !slices.Contains(queryParams[:], pe.param) {
				t.Fatalf("parseQuery(%q): error %v names no parameter of the query", raw, err)
			}
			return
		}
		for name := range v {
			if !slices.Contains(queryParams[:], name) {
				t.Fatalf("parseQuery(%q) accepted the unknown parameter %q", raw, name)
			}
		}
		if q.from.Before(queryEarliest) {
			t.Fatalf("parseQuery(%q) starts at %v, before %v", raw, q.from, queryEarliest)
		}
		if !q.from.Before(q.to) || q.to.Sub(q.from) > maxRange || q.from.Location() != time.UTC || q.to.Location() != time.UTC {
			t.Fatalf("parseQuery(%q) = [%v, %v): not a valid UTC range", raw, q.from, q.to)
		}
		if q.step < 0 || (q.stitch && q.step != 0) {
			t.Fatalf("parseQuery(%q): step %v with stitch %v", raw, q.step, q.stitch)
		}
	})
}

func TestNegotiate(t *testing.T) {
	for accept, want := range map[string]string{
		"":                                       formatJSON,
		"*/*":                                    formatJSON,
		"application/json":                       formatJSON,
		"text/csv":                               formatCSV,
		"text/csv;q=0.9, application/json;q=0.5": formatCSV,
		"text/*":                                 formatCSV, // csv is offered before html
		"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8": formatHTML, // Chromium, Firefox
		"text/html;q=0.1, */*":       formatJSON,
		"text/html;q=0, */*;q=0.5":   formatJSON,
		"TEXT/HTML":                  formatHTML,
		"application/json, text/csv": formatJSON,
	} {
		if got := negotiate(accept); got != want {
			t.Errorf("negotiate(%q) = %q, want %q", accept, got, want)
		}
	}
}

func TestUnknownParamSuggestion(t *testing.T) {
	for name, want := range map[string]string{
		"lst":                      "did you mean last?",
		"LAST":                     "did you mean last?",
		"fromm":                    "did you mean from?",
		"stich":                    "did you mean stitch?",
		"steps":                    "did you mean step?",
		"fmt":                      "", // three edits from format: no guess
		"period":                   "",
		strings.Repeat("x", 10000): "",
	} {
		err := checkParams(url.Values{name: {"1"}})
		var pe *paramError
		if !errors.As(err, &pe) || pe.param != name {
			t.Errorf("checkParams(%.20q) = %v, want an error naming it", name, err)
			continue
		}
		if !strings.Contains(pe.reason, "last, from, to, step, stitch, format") {
			t.Errorf("checkParams(%q): reason %q does not list the known parameters", name, pe.reason)
		}
		if got := strings.Contains(pe.reason, "did you mean"); got != (want != "") || want != "" && !strings.Contains(pe.reason, want) {
			t.Errorf("checkParams(%.20q): reason %q, want the guess %q", name, pe.reason, want)
		}
	}
	if err := checkParams(url.Values{"last": {"1h"}, "step": {"5m"}}); err != nil {
		t.Errorf("known parameters: %v", err)
	}
}

func TestEpochStart(t *testing.T) {
	for step, want := range map[time.Duration]int64{
		time.Minute:     0,
		5 * time.Minute: 0,
		time.Hour:       0,
		rollup.Day:      0,
		rollup.Week:     345600, // Monday 1970-01-05
	} {
		if got := epochStart(step).Unix(); got != want {
			t.Errorf("epochStart(%v) = %d, want %d", step, got, want)
		}
	}
	// A multi-week step: the first of its buckets at or after the epoch.
	for _, step := range []time.Duration{2 * rollup.Week, 4 * rollup.Week} {
		got := epochStart(step)
		if got.Unix() < 0 || got.Sub(time.Unix(0, 0)) >= step || !rollup.Align(got, step).Equal(got) {
			t.Errorf("epochStart(%v) = %v: not the first bucket start from the epoch", step, got)
		}
	}
}

func TestAcceptsGzip(t *testing.T) {
	for header, want := range map[string]bool{
		"":                              false,
		"identity":                      false,
		"gzip":                          true,
		"GZIP":                          true,
		"x-gzip":                        true,
		"gzip, deflate, br, zstd":       true, // browsers
		"br;q=1.0, gzip;q=0.8, *;q=0.1": true,
		"gzip;q=0":                      false,
		"gzip;q=0.000":                  false,
		"gzip; q=0.5":                   true,
		"gzip;Q=0.5":                    true,
		"*":                             true,
		"*;q=0":                         false,
		"gzip;q=0, *":                   false, // the explicit entry wins over *
		"*;q=0, gzip":                   true,
		"br, *;q=0":                     false,
		"deflate":                       false,
		"gzip;q=2":                      false, // a broken weight allows nothing
		"gzip;q=abc":                    false,
		" gzip ; q=1 ":                  true,
	} {
		if got := acceptsGzip(header); got != want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", header, got, want)
		}
	}
}
