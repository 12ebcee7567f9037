// Package visitortest writes small MaxMind-format country databases for
// tests, with MaxMind's own writer (github.com/maxmind/mmdbwriter), so
// that the gateway's country lookups are tested on a real .mmdb file.
package visitortest

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
)

// Layout is how a database stores a network's country.
type Layout int

const (
	// GeoLite2 is MaxMind's layout: {"country": {"iso_code": "DE"}}.
	GeoLite2 Layout = iota
	// IPLocationDB is the layout of the ip-location-db project's country
	// databases (geo-whois-asn-country): {"country_code": "DE"}.
	IPLocationDB
)

// CountryDB writes a country database mapping each CIDR network of
// countries to its ISO code into a file of t's temporary directory and
// returns its path. Reserved networks (loopback, the documentation
// ranges 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32)
// may be used: tests run on loopback.
func CountryDB(t testing.TB, layout Layout, countries map[string]string) string {
	t.Helper()
	typ := "GeoLite2-Country"
	if layout == IPLocationDB {
		typ = "geo-whois-asn-country"
	}
	w, err := mmdbwriter.New(mmdbwriter.Options{DatabaseType: typ, RecordSize: 24, IncludeReservedNetworks: true,
		Description: map[string]string{"en": "linkgate test countries"}})
	if err != nil {
		t.Fatal(err)
	}
	for cidr, code := range countries {
		_, n, err := net.ParseCIDR(cidr)
		if err != nil {
			t.Fatal(err)
		}
		var rec mmdbtype.Map
		if layout == IPLocationDB {
			rec = mmdbtype.Map{"country_code": mmdbtype.String(code)}
		} else {
			rec = mmdbtype.Map{"country": mmdbtype.Map{"iso_code": mmdbtype.String(code), "geoname_id": mmdbtype.Uint32(1)}}
		}
		if err := w.Insert(n, rec); err != nil {
			t.Fatalf("insert %s: %v", cidr, err)
		}
	}
	path := filepath.Join(t.TempDir(), typ+".mmdb")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteTo(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}
