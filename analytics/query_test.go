package analytics

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"
)

var queryNow = time.Date(2026, 3, 31, 12, 0, 0, 0, time.UTC)

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
		{"html", "format=html&other=ignored", query{from: queryNow.Add(-24 * time.Hour), to: queryNow, format: formatHTML}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := url.ParseQuery(tc.raw)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseQuery(v, queryNow)
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
	} {
		v, _ := url.ParseQuery(raw)
		_, err := parseQuery(v, queryNow)
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
	params := "last from to step stitch format"
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q, err := parseQuery(v, queryNow)
		if err != nil {
			var pe *paramError
			if !errors.As(err, &pe) || !strings.Contains(params, pe.param) || pe.param == "" {
				t.Fatalf("parseQuery(%q): error %v names no parameter", raw, err)
			}
			return
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
