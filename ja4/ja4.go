// Package ja4 computes the JA4 fingerprint of a TLS ClientHello: FoxIO's
// "JA4: TLS Client Fingerprinting" (github.com/FoxIO-LLC/ja4,
// technical_details/JA4.md), from what crypto/tls hands a server in
// tls.ClientHelloInfo. A fingerprint names the TLS stack that made the
// connection (Chrome's, Firefox's, Go's, OpenSSL's as curl and Python use
// it), whatever the User-Agent header of the requests on it claims.
//
// The edge computes it once per connection, in the handshake, and puts it
// in the context of the connection's requests (NewContext); the analytics
// read it back there (FromContext).
package ja4

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"slices"
)

// Hello is what a JA4 fingerprint reads from a ClientHello, in the order
// the client sent each list, GREASE values included (Fingerprint skips
// them).
type Hello struct {
	// Versions are the versions of the supported_versions extension, or
	// the ClientHello's legacy version alone when it has none.
	Versions []uint16
	// Ciphers are the cipher suites.
	Ciphers []uint16
	// Extensions are the extension types.
	Extensions []uint16
	// ALPN is the first protocol of the ALPN extension; "" for none.
	ALPN string
	// SignatureAlgorithms are those of the signature_algorithms extension.
	SignatureAlgorithms []uint16
	// QUIC says the ClientHello came in a QUIC handshake (HTTP/3): the
	// fingerprint starts with "q" rather than TCP's "t".
	QUIC bool
}

// FromClientHello returns the Hello of what crypto/tls read. Go lists the
// supported_versions extension's values in SupportedVersions, and for a
// ClientHello without it the versions up to its legacy version: the
// highest is the one JA4 names either way.
func FromClientHello(h *tls.ClientHelloInfo) Hello {
	out := Hello{
		Versions:   h.SupportedVersions,
		Ciphers:    h.CipherSuites,
		Extensions: h.Extensions,
	}
	if len(h.SupportedProtos) > 0 {
		out.ALPN = h.SupportedProtos[0]
	}
	if len(h.SignatureSchemes) > 0 {
		out.SignatureAlgorithms = make([]uint16, len(h.SignatureSchemes))
		for i, s := range h.SignatureSchemes {
			out.SignatureAlgorithms[i] = uint16(s)
		}
	}
	return out
}

// The extensions JA4 names in its first part and leaves out of the hash.
const (
	extSNI  = 0x0000
	extALPN = 0x0010
)

// IsGREASE reports whether v is one of RFC 8701's GREASE values (0x0a0a,
// 0x1a1a, … 0xfafa), which clients send at random and JA4 ignores.
func IsGREASE(v uint16) bool { return v&0x0f0f == 0x0a0a && v>>8 == v&0xff }

// Fingerprint returns h's JA4 fingerprint for TLS over TCP, such as
// "t13d1516h2_8daaf6152771_e5627efa2ab1".
func Fingerprint(h Hello) string {
	b := make([]byte, 0, 36)
	if h.QUIC {
		b = append(b, 'q')
	} else {
		b = append(b, 't')
	}
	b = append(b, version(h.Versions)...)
	sni := byte('i')
	if slices.Contains(h.Extensions, extSNI) {
		sni = 'd'
	}
	b = append(b, sni)
	ciphers := sorted(h.Ciphers, false)
	exts := 0
	for _, e := range h.Extensions {
		if !IsGREASE(e) {
			exts++
		}
	}
	b = append2(b, len(ciphers))
	b = append2(b, exts)
	b = append(b, alpn(h.ALPN)...)
	b = append(b, '_')
	b = appendHash(b, hexList(make([]byte, 0, 5*len(ciphers)), ciphers))
	b = append(b, '_')
	sortedExts := sorted(h.Extensions, true)
	if len(sortedExts) == 0 {
		b = append(b, "000000000000"...)
		return string(b)
	}
	s := hexList(make([]byte, 0, 5*(len(sortedExts)+len(h.SignatureAlgorithms))), sortedExts)
	var sigs []uint16
	for _, a := range h.SignatureAlgorithms {
		if !IsGREASE(a) {
			sigs = append(sigs, a)
		}
	}
	if len(sigs) > 0 {
		s = append(s, '_')
		s = hexList(s, sigs)
	}
	b = appendHash(b, s)
	return string(b)
}

// version is the two characters of the highest version in vs, GREASE left
// out.
func version(vs []uint16) string {
	var v uint16
	for _, x := range vs {
		if !IsGREASE(x) && x > v && x < 0xfe00 { // DTLS versions count down from 0xfeff
			v = x
		}
	}
	switch v {
	case 0x0304:
		return "13"
	case 0x0303:
		return "12"
	case 0x0302:
		return "11"
	case 0x0301:
		return "10"
	case 0x0300:
		return "s3"
	case 0x0002:
		return "s2"
	}
	return "00"
}

// append2 appends n as two digits, 99 at most.
func append2(b []byte, n int) []byte {
	n = min(n, 99)
	return append(b, byte('0'+n/10), byte('0'+n%10))
}

// alpn is JA4's two characters for the first ALPN value: its first and
// last characters when both are ASCII letters or digits, else the first
// and last characters of its hex form; "00" for none.
func alpn(p string) string {
	if p == "" {
		return "00"
	}
	first, last := p[0], p[len(p)-1]
	if alnum(first) && alnum(last) {
		return string([]byte{first, last})
	}
	x := hex.EncodeToString([]byte(p))
	return string([]byte{x[0], x[len(x)-1]})
}

func alnum(c byte) bool {
	return '0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z'
}

// sorted returns vs without GREASE values (and, with noSNIALPN, without
// the SNI and ALPN extensions), sorted.
func sorted(vs []uint16, noSNIALPN bool) []uint16 {
	out := make([]uint16, 0, len(vs))
	for _, v := range vs {
		if IsGREASE(v) || noSNIALPN && (v == extSNI || v == extALPN) {
			continue
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// hexList appends vs as four lower-case hex digits each, comma separated.
func hexList(b []byte, vs []uint16) []byte {
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, hexDigits[v>>12], hexDigits[v>>8&0xf], hexDigits[v>>4&0xf], hexDigits[v&0xf])
	}
	return b
}

const hexDigits = "0123456789abcdef"

// appendHash appends the first 12 hex digits of s's SHA-256, or twelve
// zeros when s is empty (JA4 marks an empty list so).
func appendHash(b, s []byte) []byte {
	if len(s) == 0 {
		return append(b, "000000000000"...)
	}
	sum := sha256.Sum256(s)
	return hex.AppendEncode(b, sum[:6])
}

type ctxKey struct{}

// NewContext returns ctx carrying the fingerprint fp of the connection its
// requests arrive on.
func NewContext(ctx context.Context, fp string) context.Context {
	return context.WithValue(ctx, ctxKey{}, fp)
}

// FromContext returns the fingerprint NewContext put in ctx; "" when none
// (a plain HTTP connection, or one behind a TLS-terminating proxy).
func FromContext(ctx context.Context) string {
	fp, _ := ctx.Value(ctxKey{}).(string)
	return fp
}
