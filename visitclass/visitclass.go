// Package visitclass decides, as a visit is counted, which kind of client
// made it: a person (human), a crawler that says so (bot), a chat or
// social app's link unfurler (preview), a security scanner or other
// automated fetcher posing as a browser (scanner), a browser's speculative
// load (prefetch), or the operator's own networks (internal). Only human
// visits count as clicks.
//
// The signals, first match wins (each is a Reason; docs/analytics.md
// gives their sources):
//
//  1. internal: the client's address is in one of the operator's networks
//     (analytics.classes.internal_networks).
//  2. prefetch: the request says it is speculative: Sec-Purpose: prefetch
//     (Fetch standard, Chrome's speculation rules and its private prefetch
//     proxy), Purpose: prefetch (Chrome before Sec-Purpose, Safari),
//     X-Moz: prefetch (Firefox's link prefetching), X-Purpose: preview
//     (Safari's Top Sites).
//  3. preview, bot: the User-Agent names a link unfurler or a crawler
//     (useragents.txt).
//  4. scanner, by HEAD: the User-Agent claims a browser, but browsers
//     never navigate with HEAD; link checkers and scanners do.
//  5. scanner, by network: the client's network (its ASN, from an .mmdb)
//     is an e-mail security vendor's (Proofpoint, Mimecast, Barracuda, …),
//     which open every link of every mail.
//  6. scanner, by TLS: the User-Agent claims a browser but the TLS
//     ClientHello's JA4 fingerprint is an HTTP library's (OpenSSL as curl
//     and Python use it, Go, Node, GnuTLS: stacks.txt), or offers no ALPN
//     (every browser offers h2 and http/1.1).
//  7. scanner, by headers: the User-Agent claims a browser but the request
//     lacks what every browser's navigation carries: Accept-Language, and
//     either an Accept naming text/html or Sec-Fetch-Mode; or its
//     Sec-Fetch-Mode/-Dest say it is not a navigation (a script's fetch,
//     an image).
//  8. scanner, by burst: the client's network is a cloud's (Amazon,
//     Microsoft, Google, …) and the link was first visited from a cloud
//     network less than the burst window ago: a mail scanner's or a
//     security product's first look at a new link (Microsoft's Safe Links
//     runs in Microsoft's cloud). After the window, visits from clouds
//     count as people (VPNs, cloud desktops).
//
// Everything else is human. The classes err toward human: a person taken
// for a machine loses a click the analyst wants, a machine taken for a
// person only leaves a count as it was before.
//
// No address is kept: the network is looked up and forgotten, as the
// country is. The burst signal keeps, per link visited from a cloud
// network, the time of that first visit, in a bounded table.
package visitclass

import (
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/linkgate/linkgate/internal/header"
)

// Class is the kind of client that made a visit.
type Class uint8

// The classes, in the order the stats API lists them.
const (
	Human Class = iota
	Bot
	Preview
	Scanner
	Prefetch
	Internal
	NumClasses
)

var classNames = [NumClasses]string{"human", "bot", "preview", "scanner", "prefetch", "internal"}

// String returns c's name as the stats API writes it: "human", "scanner".
func (c Class) String() string {
	if c < NumClasses {
		return classNames[c]
	}
	return "class?"
}

// ParseClass returns the Class named s.
func ParseClass(s string) (Class, bool) {
	for i, n := range classNames {
		if n == s {
			return Class(i), true
		}
	}
	return 0, false
}

// Reason is the signal that decided a visit's class.
type Reason uint8

// The reasons. A human visit has None: no signal said otherwise.
const (
	None           Reason = iota
	InternalNet           // the operator's network
	PrefetchHeader        // Sec-Purpose, Purpose, X-Moz or X-Purpose
	PreviewUA             // the User-Agent names a link unfurler
	BotUA                 // the User-Agent names a crawler
	Head                  // a HEAD request with a browser's User-Agent
	ScannerNet            // an e-mail security vendor's network
	TLSStack              // a browser's User-Agent over an HTTP library's TLS
	Headers               // a browser's User-Agent without a browser's navigation headers
	Burst                 // a cloud network within the burst window of the link's first visit from one
	NumReasons
)

var reasonNames = [NumReasons]string{"none", "internal-network", "prefetch-header", "preview-ua", "bot-ua",
	"head", "scanner-network", "tls-stack", "headers", "cloud-burst"}

// String returns r's name as the stats API writes it: "tls-stack".
func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return "reason?"
}

// Class returns the class r decides.
func (r Reason) Class() Class {
	switch r {
	case None:
		return Human
	case InternalNet:
		return Internal
	case PrefetchHeader:
		return Prefetch
	case PreviewUA:
		return Preview
	case BotUA:
		return Bot
	}
	return Scanner
}

// Options configure a Classifier. The zero value uses the headers, the
// User-Agent and the TLS fingerprint, and no network signal.
type Options struct {
	// Networks answers the client's network. Nil: signals 5 and 8 are off.
	Networks *Networks
	// Internal are the operator's networks (signal 1).
	Internal []netip.Prefix
	// BurstWindow is how long after a link's first visit from a cloud
	// network further ones are scanners (signal 8). 0: DefaultBurstWindow.
	BurstWindow time.Duration
	// BurstLinks caps the links whose first cloud visit is remembered.
	// 0: DefaultBurstLinks.
	BurstLinks int
}

// Defaults of Options.
const (
	DefaultBurstWindow = 2 * time.Minute
	DefaultBurstLinks  = 100_000
)

// Classifier decides the class of visits. It is immutable apart from its
// burst table and safe for concurrent use. Use New; the zero Classifier is
// not usable.
type Classifier struct {
	nets     *Networks
	internal []netip.Prefix
	burst    *burstTable
}

// New returns a Classifier.
func New(o Options) *Classifier {
	if o.BurstWindow <= 0 {
		o.BurstWindow = DefaultBurstWindow
	}
	if o.BurstLinks <= 0 {
		o.BurstLinks = DefaultBurstLinks
	}
	return &Classifier{nets: o.Networks, internal: o.Internal, burst: newBurstTable(o.BurstWindow, o.BurstLinks)}
}

// Visit is what Classify reads of a visit besides its request.
type Visit struct {
	// Client is the client's address (forwarded's answer); invalid when
	// unknown.
	Client netip.Addr
	// JA4 is the fingerprint of the TLS ClientHello of the connection, ""
	// when the gateway did not see it (plain HTTP, or a proxy between).
	JA4 string
	// Key is the link visited, for the burst signal.
	Key string
	// Time is when the visit happened.
	Time time.Time
}

// Classify returns the class of the visit r and the signal that decided
// it. It does not allocate, except the first time a link is visited from a
// cloud network (a burst table entry).
func (c *Classifier) Classify(r *http.Request, v Visit) (Class, Reason) {
	reason := c.reason(r, v)
	return reason.Class(), reason
}

func (c *Classifier) reason(r *http.Request, v Visit) Reason {
	if v.Client.IsValid() {
		for _, p := range c.internal {
			if p.Contains(v.Client) {
				return InternalNet
			}
		}
	}
	h := r.Header
	if prefetch(h) {
		return PrefetchHeader
	}
	ua := header.First(h, "User-Agent")
	if r := ByUserAgent(ua); r != None {
		return r
	}
	browser := claimsBrowser(ua)
	if browser && r.Method == http.MethodHead {
		return Head
	}
	net := netNone
	if c.nets != nil && v.Client.IsValid() {
		net = c.nets.kind(v.Client)
	}
	if net == netScanner {
		return ScannerNet
	}
	if browser {
		if v.JA4 != "" && !browserTLS(v.JA4) {
			return TLSStack
		}
		if !navigation(h) {
			return Headers
		}
	}
	if net == netCloud && c.burst.within(v.Key, v.Time) {
		return Burst
	}
	return None
}

// prefetch reports whether the headers mark a speculative load.
func prefetch(h http.Header) bool {
	if v := header.First(h, "Sec-Purpose"); v != "" && strings.HasPrefix(v, "prefetch") {
		return true
	}
	if v := header.First(h, "Purpose"); v == "prefetch" || v == "preview" {
		return true
	}
	if header.First(h, "X-Moz") == "prefetch" {
		return true
	}
	return header.First(h, "X-Purpose") == "preview"
}

// navigation reports whether the headers are those of a browser's
// navigation: Accept-Language, and an Accept naming text/html or a
// Sec-Fetch-Mode; a Sec-Fetch-Mode, if any, of "navigate", and a
// Sec-Fetch-Dest, if any, of a document or frame.
func navigation(h http.Header) bool {
	if header.First(h, "Accept-Language") == "" {
		return false
	}
	mode := header.First(h, "Sec-Fetch-Mode")
	if mode != "" && mode != "navigate" {
		return false
	}
	switch header.First(h, "Sec-Fetch-Dest") {
	case "", "document", "iframe", "frame", "embed", "object":
	default:
		return false
	}
	return mode != "" || strings.Contains(header.First(h, "Accept"), "text/html")
}
