// Package visitor reads where a visit comes from: its referrer domain, its
// source (a utm_source-like query parameter, else the referrer), its
// campaign's other utm parameters (medium, campaign, term, content), its
// country (from a MaxMind-format .mmdb database), its device class, browser
// and operating system (from the User-Agent, parsed once per distinct
// User-Agent and cached). It is the one place that turns a request into
// these features, the way package forwarded alone decides who the client
// is: the client address it looks up is forwarded's answer.
//
// Reading the features of a visit whose User-Agent is in the cache, with a
// country lookup, takes a few hundred nanoseconds and does not allocate
// (BenchmarkRead); a User-Agent new to the cache is parsed on the request's
// goroutine once (a few microseconds) and cached.
package visitor

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/internal/header"
)

// Dim names one feature of a visit: a dimension that link analytics break
// visits down by. Its number is stored (the analytics journal keeps it):
// a Dim's number never changes, and new ones are added at the end.
type Dim uint8

// The dimensions, in the order of Features.
const (
	Referrer Dim = iota // the Referer's host, lower case, without "www."; "direct" when none
	Source              // a source query parameter's value (utm_source first), else Referrer
	Country             // ISO 3166-1 alpha-2 code, "unknown" when the database has none; "" when no database
	Device              // desktop, mobile, tablet, bot or other
	Browser             // Chrome, Firefox, Safari, Edge, …; "other" when unknown
	OS                  // Windows, macOS, iOS, Android, Linux, …; "other" when unknown
	// Links is no feature of a visit: the number under which package
	// analytics keeps the links of all links (analytics.DimLink), which
	// its journal wrote before the dimensions below were added.
	Links
	Medium   // the utm_medium query parameter's value; "" when none
	Campaign // utm_campaign's
	Term     // utm_term's
	Content  // utm_content's
	Class    // the visit's class (package visitclass): human, bot, preview, scanner, prefetch, internal
	Reason   // the signal that decided the class: "none" for a human, "tls-stack", "cloud-burst", …
	// Destination is where the link led: the Location the upstream
	// answered the visit with, case kept, cut to MaxValueBytes.
	Destination
	NumDims
)

var dimNames = [NumDims]string{"referrer", "source", "country", "device", "browser", "os", "",
	"medium", "campaign", "term", "content", "class", "reason", "destination"}

// FromRequest reports whether d's values are read from the request's own
// bytes (a header or the query), which a store must copy: the referrer,
// the source, the utm parameters, and the destination (the response's).
func (d Dim) FromRequest() bool {
	return d <= Source || Medium <= d && d <= Content || d == Destination
}

// DestinationOf returns the Destination value of a response's Location:
// cut to MaxValueBytes at a character boundary, without control
// characters, commas or quotes (CSV and logs keep one line per value),
// case kept; "" for none.
func DestinationOf(loc string) string {
	loc = strings.TrimSpace(loc)
	if loc == "" {
		return ""
	}
	if len(loc) > MaxValueBytes {
		loc = strings.ToValidUTF8(loc[:MaxValueBytes], "")
	}
	if strings.IndexFunc(loc, func(r rune) bool { return r < 0x20 || r == 0x7f || r == ',' || r == '"' }) >= 0 {
		loc = strings.Map(func(r rune) rune {
			if r < 0x20 || r == 0x7f || r == ',' || r == '"' {
				return -1
			}
			return r
		}, loc)
	}
	return loc
}

// String returns d's name as the stats API writes it: "referrer", "os".
func (d Dim) String() string {
	if d < NumDims {
		return dimNames[d]
	}
	return "dim?"
}

// ParseDim returns the Dim named s.
func ParseDim(s string) (Dim, bool) {
	for i, n := range dimNames {
		if n == s && n != "" {
			return Dim(i), true
		}
	}
	return 0, false
}

// Names returns the names of every Dim, in order, Links left out.
func Names() []string {
	out := make([]string, 0, NumDims-1)
	for _, n := range dimNames {
		if n != "" {
			out = append(out, n)
		}
	}
	return out
}

// Dims returns every Dim, in order, Links left out.
func Dims() []Dim {
	out := make([]Dim, 0, NumDims-1)
	for d := range NumDims {
		if d != Links {
			out = append(out, d)
		}
	}
	return out
}

// Values every dimension may take besides what a request says.
const (
	Direct  = "direct"  // a visit without a usable Referer
	Unknown = "unknown" // a country the database does not know
	Other   = "other"   // a browser, OS or device class the parser does not know; also the values beyond a cap
)

// Device classes.
const (
	Desktop = "desktop"
	Mobile  = "mobile"
	Tablet  = "tablet"
	Bot     = "bot"
)

// MaxValueBytes caps the length of one value: a longer Referer host or
// source parameter is cut, so that nobody fills storage with made-up
// values of kilobytes.
const MaxValueBytes = 100

// Features is a visit's value of each Dim. An empty value means the
// dimension is off (Country without a database) or the visit has none (a
// utm parameter it does not carry). Read leaves Class and Reason empty:
// the analytics set them.
type Features [NumDims]string

// Options configure a Reader. The zero value reads every feature but the
// country, from the connection's peer address.
type Options struct {
	// Trust decides the client address (forwarded.Trust.Client). Nil:
	// trusts no proxy.
	Trust *forwarded.Trust
	// GeoIP gives countries. Nil: Country is off ("").
	GeoIP *GeoIP
	// SourceParams are the query parameters that name a visit's source, in
	// order of precedence (analytics.dimensions.source_params). Nil: none,
	// so Source is the referrer.
	SourceParams []string
	// UACacheSize bounds the User-Agents kept parsed. Default
	// DefaultUACacheSize.
	UACacheSize int
}

// DefaultUACacheSize is how many distinct User-Agents a Reader keeps
// parsed by default: far more than the browsers and versions a service
// sees in a day, few enough to cost a few MB.
const DefaultUACacheSize = 16384

// Reader reads the Features of requests. It is immutable apart from its
// User-Agent cache and safe for concurrent use. Use New.
type Reader struct {
	trust   *forwarded.Trust
	geo     *GeoIP
	sources []string
	ua      *uaCache
}

// New returns a Reader.
func New(o Options) *Reader {
	if o.UACacheSize <= 0 {
		o.UACacheSize = DefaultUACacheSize
	}
	return &Reader{trust: o.Trust, geo: o.GeoIP, sources: o.SourceParams, ua: newUACache(o.UACacheSize)}
}

// Read sets f to the features of r; bot says the gateway's own list of bots
// named its User-Agent (its device is then "bot" whatever the parser says).
// With a cached User-Agent it does not allocate, except for a Referer host
// or source value with upper-case letters or escapes.
func (rd *Reader) Read(r *http.Request, bot bool, f *Features) {
	ref := ReferrerDomain(header.First(r.Header, "Referer"))
	f[Referrer] = ref
	f[Source] = ref
	if src := rd.source(r.URL.RawQuery); src != "" {
		f[Source] = src
	}
	f[Medium], f[Campaign], f[Term], f[Content] = "", "", "", ""
	if q := r.URL.RawQuery; q != "" && strings.Contains(q, "utm_") {
		f[Medium] = param(q, "utm_medium")
		f[Campaign] = param(q, "utm_campaign")
		f[Term] = param(q, "utm_term")
		f[Content] = param(q, "utm_content")
	}
	f[Country] = ""
	if rd.geo != nil {
		f[Country] = Unknown
		if c, ok := rd.trust.Client(r); ok {
			f[Country] = rd.geo.Country(c.Addr)
		}
	}
	u := rd.ua.get(header.First(r.Header, "User-Agent"))
	f[Device], f[Browser], f[OS] = u.device, u.browser, u.os
	if bot {
		f[Device] = Bot
	}
}

// source returns the value of the first of rd's source parameters that the
// raw query holds with a value, lower case, cut to MaxValueBytes; "" when
// none.
func (rd *Reader) source(raw string) string {
	if raw == "" || len(rd.sources) == 0 {
		return ""
	}
	for _, name := range rd.sources {
		if v := param(raw, name); v != "" {
			return v
		}
	}
	return ""
}

// param returns the value of the first name=value of the raw query with a
// value, unescaped, lower case, cut to MaxValueBytes; "" when none.
func param(raw, name string) string {
	for q := raw; q != ""; {
		var kv string
		if i := strings.IndexAny(q, "&;"); i >= 0 {
			kv, q = q[:i], q[i+1:]
		} else {
			kv, q = q, ""
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k != name || v == "" {
			continue
		}
		if strings.ContainsAny(v, "%+") {
			u, err := url.QueryUnescape(v)
			if err != nil {
				continue
			}
			v = u
		}
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		return clean(v)
	}
	return ""
}

// ReferrerDomain returns the host a Referer header names, lower case, its
// port, user info and a leading "www." removed, cut to MaxValueBytes:
// "https://www.News.example:8443/a?b" is "news.example". An empty or
// unusable Referer is "direct".
func ReferrerDomain(ref string) string {
	if ref == "" {
		return Direct
	}
	i := strings.Index(ref, "://")
	if i < 0 {
		return Direct
	}
	h := ref[i+3:]
	if j := strings.IndexAny(h, "/?#"); j >= 0 {
		h = h[:j]
	}
	if j := strings.LastIndexByte(h, '@'); j >= 0 {
		h = h[j+1:]
	}
	if strings.HasPrefix(h, "[") { // an IPv6 literal
		if j := strings.IndexByte(h, ']'); j >= 0 {
			h = h[:j+1]
		}
	} else if j := strings.LastIndexByte(h, ':'); j >= 0 {
		h = h[:j]
	}
	h = strings.TrimSuffix(h, ".")
	if len(h) > 4 && (h[:4] == "www." || h[:4] == "WWW.") {
		h = h[4:]
	}
	if h == "" {
		return Direct
	}
	return clean(h)
}

// clean returns s lower case (allocating only when it has upper-case
// letters), cut to MaxValueBytes at a character boundary, and without
// control characters (CSV and logs must stay one line per value).
func clean(s string) string {
	if len(s) > MaxValueBytes {
		s = strings.ToValidUTF8(s[:MaxValueBytes], "")
	}
	lower, ctrl := true, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			lower = false
		}
		if c < 0x20 || c == 0x7f || c == ',' || c == '"' {
			ctrl = true
		}
	}
	if !lower {
		s = strings.ToLower(s)
	}
	if ctrl {
		s = strings.Map(func(r rune) rune {
			if r < 0x20 || r == 0x7f || r == ',' || r == '"' {
				return -1
			}
			return r
		}, s)
		if s == "" {
			return Other
		}
	}
	return s
}
