package visitor

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/oschwald/maxminddb-golang/v2"

	"github.com/linkgate/linkgate/internal/mmdb"
)

// GeoIP answers the country of an address from a MaxMind-format database
// (.mmdb): MaxMind's GeoLite2-Country or GeoIP2-Country (the record's
// country.iso_code), or a database of the ip-location-db project such as
// the CC0 geo-whois-asn-country (its country_code). It is safe for
// concurrent use. Use OpenGeoIP.
//
// A lookup walks the database's tree to the record's offset without
// allocating; the code of each record is decoded once and kept by offset
// (a country database has a few hundred distinct records), so a lookup
// never decodes twice.
type GeoIP struct {
	db   *maxminddb.Reader
	path string

	mu    sync.Mutex                         // serializes additions to codes
	codes atomic.Pointer[map[uintptr]string] // record offset → code; replaced, never modified
}

// OpenGeoIP reads the database at path whole into memory (a country
// database is a few MB; no file stays open) and checks that it answers
// countries.
func OpenGeoIP(path string) (*GeoIP, error) {
	db, err := mmdb.Load(path)
	if err != nil {
		return nil, fmt.Errorf("geoip: %w", err)
	}
	g := &GeoIP{db: db, path: path}
	m := map[uintptr]string{}
	g.codes.Store(&m)
	return g, nil
}

// Path returns the file the database was read from.
func (g *GeoIP) Path() string { return g.path }

// Type returns the database's type as its metadata names it
// ("GeoLite2-Country").
func (g *GeoIP) Type() string { return g.db.Metadata.DatabaseType }

// record is what a country database holds, in either layout.
type record struct {
	Country struct {
		ISOCode string `maxminddb:"iso_code"`
	} `maxminddb:"country"`
	CountryCode string `maxminddb:"country_code"`
}

// Country returns the ISO 3166-1 alpha-2 code of a, upper case, or
// Unknown when the database has no country for it.
func (g *GeoIP) Country(a netip.Addr) string {
	res := g.db.Lookup(a)
	if !res.Found() {
		return Unknown
	}
	off := res.Offset()
	if c, ok := (*g.codes.Load())[off]; ok {
		return c
	}
	var rec record
	code := Unknown
	if err := res.Decode(&rec); err == nil {
		switch {
		case validCode(rec.Country.ISOCode):
			code = rec.Country.ISOCode
		case validCode(rec.CountryCode):
			code = rec.CountryCode
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	old := *g.codes.Load()
	if len(old) < maxCodes {
		m := make(map[uintptr]string, len(old)+1)
		for k, v := range old {
			m[k] = v
		}
		m[off] = code
		g.codes.Store(&m)
	}
	return code
}

// maxCodes bounds the offsets kept: a country database has a few hundred
// records; a city database would have millions, which are then decoded at
// every lookup rather than kept.
const maxCodes = 4096

// validCode says whether s is two upper-case ASCII letters.
func validCode(s string) bool {
	return len(s) == 2 && s[0] >= 'A' && s[0] <= 'Z' && s[1] >= 'A' && s[1] <= 'Z'
}
