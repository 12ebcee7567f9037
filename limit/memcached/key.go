package memcached

import (
	"crypto/sha256"
	"encoding/base64"
	"strconv"

	"github.com/linkgate/linkgate/limit"
)

// Key layout (see the package documentation):
//
//	lg:<rule>:<value>|<level><start>
//
// The part before '|' names the counter and is all the server selector
// hashes; the part after it names the bucket.
const (
	keyPrefix    = "lg:"
	maxRawRule   = 64  // longer rule names are hashed
	maxRawValue  = 128 // longer feature values are hashed
	hashedMarker = '~' // starts a hashed rule or value; never part of a raw one
	hashedLen    = 22  // base64url characters of SHA-256 kept: 132 bits
	bucketSep    = '|'
	ruleSep      = ':'
	// maxKeyLen is the longest key appendKey can produce:
	// prefix + rule + ':' + value + '|' + level + a signed 64-bit decimal.
	maxKeyLen = len(keyPrefix) + maxRawRule + 1 + maxRawValue + 1 + 1 + 20
)

// memcachedMaxKey is memcached's limit on the length of a key.
const memcachedMaxKey = 250

var _ [memcachedMaxKey - maxKeyLen]struct{} // compile-time: maxKeyLen <= 250

// levelChar is the one-character name of a bucket level in a key; 'b'
// names a counter's penalty box (limit.BoxBucket: "lg:login_ip:203.0.113.7|b0").
var levelChar = [limit.BoxLevel + 1]byte{'s', 'm', 'h', 'b'}

// safeByte reports whether b may appear unescaped in a rule name or feature
// value: printable ASCII other than the characters the key layout uses.
// Memcached forbids spaces and control characters.
func safeByte(b byte, rule bool) bool {
	switch {
	case b <= ' ' || b >= 0x7f:
		return false
	case b == bucketSep || b == hashedMarker:
		return false
	case b == ruleSep:
		return !rule // a value may hold ':' (IPv6); the first ':' after the prefix ends the rule
	}
	return true
}

// appendPart appends s as it is if it is short and safe, else '~' and a
// prefix of the base64url SHA-256 of s. Hashing never needs to be undone: a
// key is only ever built, never parsed.
func appendPart(dst []byte, s string, rule bool) []byte {
	max := maxRawValue
	if rule {
		max = maxRawRule
	}
	raw := len(s) > 0 && len(s) <= max
	for i := 0; raw && i < len(s); i++ {
		raw = safeByte(s[i], rule)
	}
	if raw {
		return append(dst, s...)
	}
	sum := sha256.Sum256([]byte(s))
	var enc [44]byte
	base64.RawURLEncoding.Encode(enc[:], sum[:])
	dst = append(dst, hashedMarker)
	return append(dst, enc[:hashedLen]...)
}

// appendCounter appends the counter part of c's keys: everything before '|'.
func appendCounter(dst []byte, c limit.Counter) []byte {
	dst = append(dst, keyPrefix...)
	dst = appendPart(dst, c.Rule, true)
	dst = append(dst, ruleSep)
	return appendPart(dst, c.Value, false)
}

// appendBucket appends the bucket part of a key, '|' included.
func appendBucket(dst []byte, b limit.Bucket) []byte {
	dst = append(dst, bucketSep)
	lc := byte('x')
	if b.Level <= limit.BoxLevel {
		lc = levelChar[b.Level]
	}
	dst = append(dst, lc)
	return strconv.AppendInt(dst, b.Start, 10)
}

// Key returns the memcached key of bucket b of counter c. It is at most 250
// bytes long and holds no space or control character, whatever c holds; it
// never holds the limit's number, so that editing a limit keeps its counts.
func Key(c limit.Counter, b limit.Bucket) string {
	var buf [maxKeyLen]byte
	return string(appendBucket(appendCounter(buf[:0], c), b))
}

// counterHash is the hash of a counter that places it on a server: FNV-1a
// over the rule, a separator and the value. It is the same in every process
// (unlike hash/maphash), so every gateway picks the same server.
func counterHash(c limit.Counter) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(c.Rule); i++ {
		h = (h ^ uint64(c.Rule[i])) * prime
	}
	h = (h ^ 0xff) * prime // 0xff never occurs in UTF-8, so ("a:", "b") and ("a", ":b") differ
	for i := 0; i < len(c.Value); i++ {
		h = (h ^ uint64(c.Value[i])) * prime
	}
	return h
}

// mix is the splitmix64 finalizer: it spreads the bits of x so that FNV's
// weak low bits do not bias the rendezvous scores.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// pick returns the index in seeds of the server that holds the counter with
// hash h, by rendezvous (highest random weight) hashing: each server scores
// the counter and the highest score wins. Adding a server moves only the
// counters it now wins, about 1/n of them; removing one moves only its own.
// seeds are the servers' hashes (serverSeed); len(seeds) > 0.
func pick(seeds []uint64, h uint64) int {
	best, bestScore := 0, uint64(0)
	for i, s := range seeds {
		if score := mix(h ^ s); i == 0 || score > bestScore {
			best, bestScore = i, score
		}
	}
	return best
}

// serverSeed is the rendezvous hash of a server, from its address exactly as
// configured: gateways that list the same servers place counters alike,
// whatever the order of the list.
func serverSeed(addr string) uint64 {
	return mix(counterHash(limit.Counter{Rule: "server", Value: addr}))
}
