package visitclass_test

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/visitclass"
	"github.com/linkgate/linkgate/visitor/visitortest"
)

// chromeVisit is a person's Chrome navigation.
func chromeVisit() *http.Request {
	h := http.Header{}
	h.Set("User-Agent", "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36")
	h.Set("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
	h.Set("Accept-Language", "en")
	h.Set("Sec-Fetch-Mode", "navigate")
	h.Set("Sec-Fetch-Dest", "document")
	return &http.Request{Method: "GET", Header: h}
}

func TestNetworks(t *testing.T) {
	path := visitortest.ASNDB(t, map[string]visitortest.AS{
		"198.18.1.0/24":  {Number: 64500, Org: "PROOFPOINT-ASN-US-WEST"},
		"198.18.2.0/24":  {Number: 16509, Org: "AMAZON-02"},
		"198.18.3.0/24":  {Number: 64501, Org: "Example Mail Security"},
		"198.18.4.0/24":  {Number: 64502, Org: "Example Hosting"},
		"198.18.5.0/24":  {Number: 7922, Org: "COMCAST-7922"},
		"2001:db8::/32":  {Number: 64500, Org: "PROOFPOINT-ASN-US-WEST"},
		"198.18.6.0/24":  {Number: 64503, Org: "both lists"},
		"198.18.64.0/18": {Number: 64504, Org: "ACME CLOUD"},
	})
	nets, err := visitclass.OpenNetworks(path,
		append(visitclass.DefaultScannerNetworks, "example mail", "both"),
		append(visitclass.DefaultCloudNetworks, "AS64502", "AS64503", "acme cloud"))
	if err != nil {
		t.Fatal(err)
	}
	if s, c := nets.Listed(); s != 3 || c != 3 {
		t.Errorf("Listed = %d scanner, %d cloud records; want 3, 3", s, c)
	}
	if nets.Type() != "GeoLite2-ASN" || nets.Path() != path {
		t.Errorf("Type, Path = %q, %q", nets.Type(), nets.Path())
	}
	c := visitclass.New(visitclass.Options{Networks: nets, BurstWindow: time.Minute})
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		addr string
		at   time.Duration
		link string
		want visitclass.Reason
	}{
		{"198.18.1.9", 0, "a", visitclass.ScannerNet},             // by the default organization name
		{"::ffff:198.18.1.9", 0, "a", visitclass.ScannerNet},      // an IPv4-mapped address
		{"2001:db8::1", 0, "a", visitclass.ScannerNet},            // IPv6
		{"198.18.3.9", 0, "a", visitclass.ScannerNet},             // by an added name, case ignored
		{"198.18.6.9", 0, "a", visitclass.ScannerNet},             // on both lists: a scanner
		{"198.18.5.9", 0, "a", visitclass.None},                   // a residential network
		{"203.0.113.9", 0, "a", visitclass.None},                  // not in the database
		{"198.18.2.9", 0, "b", visitclass.Burst},                  // the first cloud visit to b
		{"198.18.4.9", 30 * time.Second, "b", visitclass.Burst},   // within the window, by an added number
		{"198.18.100.9", 59 * time.Second, "b", visitclass.Burst}, // by an added name
		{"198.18.2.9", 61 * time.Second, "b", visitclass.None},    // after it: a person on a VPN
		{"198.18.2.9", 61 * time.Second, "c", visitclass.Burst},   // another link's first
		{"198.18.5.9", 62 * time.Second, "c", visitclass.None},    // a residential visit in c's burst
		{"198.18.2.9", 30 * time.Second, "c", visitclass.Burst},   // an earlier time moves the first back
		{"198.18.2.9", 89 * time.Second, "c", visitclass.Burst},
		{"198.18.2.9", 91 * time.Second, "c", visitclass.None},
	} {
		_, got := c.Classify(chromeVisit(), visitclass.Visit{Client: netip.MustParseAddr(tc.addr), Key: tc.link, Time: t0.Add(tc.at)})
		if got != tc.want {
			t.Errorf("%s on %s at +%v: %v, want %v", tc.addr, tc.link, tc.at, got, tc.want)
		}
	}
}

func TestOpenNetworksRefuses(t *testing.T) {
	countries := visitortest.CountryDB(t, visitortest.GeoLite2, map[string]string{"198.18.0.0/16": "DE"})
	asn := visitortest.ASNDB(t, map[string]visitortest.AS{"198.18.0.0/16": {Number: 1, Org: "x"}})
	for _, tc := range []struct {
		name, path     string
		scanner, cloud []string
		want           string
	}{
		{"missing file", "/nonexistent/asn.mmdb", nil, nil, "no such file"},
		{"a country database", countries, nil, nil, "not an ASN database"},
		{"a bad AS number", asn, []string{"AS12x"}, nil, `"AS12x" is not an AS number`},
		{"an AS number too large", asn, nil, []string{"AS99999999999"}, "not an AS number"},
		{"an empty entry", asn, nil, []string{" "}, "an empty entry"},
	} {
		_, err := visitclass.OpenNetworks(tc.path, tc.scanner, tc.cloud)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}
