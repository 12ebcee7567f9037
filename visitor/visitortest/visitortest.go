// Package visitortest writes small MaxMind-format country databases for
// tests and the demo, with MaxMind's own writer
// (github.com/maxmind/mmdbwriter), so that the gateway's country lookups
// are tested on a real .mmdb file.
package visitortest

import (
	"fmt"
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
	path := filepath.Join(t.TempDir(), layout.databaseType()+".mmdb")
	if err := WriteCountryDB(path, layout, "linkgate test countries", countries); err != nil {
		t.Fatal(err)
	}
	return path
}

// WriteCountryDB writes a country database to path, as CountryDB does,
// described as description: the demo writes one for the addresses of the
// visits it makes up.
func WriteCountryDB(path string, layout Layout, description string, countries map[string]string) error {
	w, err := mmdbwriter.New(mmdbwriter.Options{DatabaseType: layout.databaseType(), RecordSize: 24, IncludeReservedNetworks: true,
		Description: map[string]string{"en": description}})
	if err != nil {
		return err
	}
	for cidr, code := range countries {
		_, n, err := net.ParseCIDR(cidr)
		if err != nil {
			return err
		}
		var rec mmdbtype.Map
		if layout == IPLocationDB {
			rec = mmdbtype.Map{"country_code": mmdbtype.String(code)}
		} else {
			rec = mmdbtype.Map{"country": mmdbtype.Map{"iso_code": mmdbtype.String(code), "geoname_id": mmdbtype.Uint32(1)}}
		}
		if err := w.Insert(n, rec); err != nil {
			return fmt.Errorf("insert %s: %w", cidr, err)
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := w.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// databaseType is the type a database of the layout says it is.
func (l Layout) databaseType() string {
	if l == IPLocationDB {
		return "geo-whois-asn-country"
	}
	return "GeoLite2-Country"
}

// AS is an autonomous system as an ASN database names it.
type AS struct {
	Number uint32
	Org    string
}

// ASNDB writes an ASN database in the layout of MaxMind's GeoLite2-ASN
// (which the ip-location-db project's asn databases share), mapping each
// CIDR network to its autonomous system, into a file of t's temporary
// directory and returns its path.
func ASNDB(t testing.TB, networks map[string]AS) string {
	t.Helper()
	w, err := mmdbwriter.New(mmdbwriter.Options{DatabaseType: "GeoLite2-ASN", RecordSize: 24, IncludeReservedNetworks: true,
		Description: map[string]string{"en": "linkgate test networks"}})
	if err != nil {
		t.Fatal(err)
	}
	for cidr, as := range networks {
		_, n, err := net.ParseCIDR(cidr)
		if err != nil {
			t.Fatal(err)
		}
		rec := mmdbtype.Map{"autonomous_system_number": mmdbtype.Uint32(as.Number),
			"autonomous_system_organization": mmdbtype.String(as.Org)}
		if err := w.Insert(n, rec); err != nil {
			t.Fatalf("insert %s: %v", cidr, err)
		}
	}
	path := filepath.Join(t.TempDir(), "GeoLite2-ASN.mmdb")
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
