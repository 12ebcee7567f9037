package memcached

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/linkgate/linkgate/limit"
)

// validKey is memcached's rule for keys in the text protocol.
func validKey(k string) bool {
	if len(k) == 0 || len(k) > memcachedMaxKey {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] <= ' ' || k[i] == 0x7f {
			return false
		}
	}
	return true
}

func checkKey(t *testing.T, c limit.Counter, b limit.Bucket) string {
	t.Helper()
	k := Key(c, b)
	if !validKey(k) {
		t.Fatalf("Key(%q, %+v) = %q (%d bytes): not a valid memcached key", c, b, k, len(k))
	}
	if !strings.HasPrefix(k, keyPrefix) {
		t.Fatalf("Key(%q, %+v) = %q: no %q prefix", c, b, k, keyPrefix)
	}
	// The selector's view: everything before the last '|' is the counter.
	i := strings.LastIndexByte(k, bucketSep)
	if i < 0 || strings.IndexByte(k, bucketSep) != i {
		t.Fatalf("Key(%q, %+v) = %q: want exactly one %q", c, b, k, bucketSep)
	}
	if got, want := k[:i], string(appendCounter(nil, c)); got != want {
		t.Fatalf("Key(%q, %+v) counter part = %q, want %q", c, b, got, want)
	}
	return k
}

func TestKey(t *testing.T) {
	for _, tc := range []struct {
		c    limit.Counter
		b    limit.Bucket
		want string
	}{
		{limit.Counter{Rule: "login_ip", Value: "203.0.113.7"}, limit.Bucket{Level: limit.Second, Start: 1700000000}, "lg:login_ip:203.0.113.7|s1700000000"},
		{limit.Counter{Rule: "login_ip", Value: "2001:db8::/64"}, limit.Bucket{Level: limit.Minute, Start: 60}, "lg:login_ip:2001:db8::/64|m60"},
		{limit.Counter{Rule: "login_email", Value: "bob@example.com"}, limit.Bucket{Level: limit.Hour, Start: 3600}, "lg:login_email:bob@example.com|h3600"},
		// Spaces, '|', '~' and long values are hashed.
		{limit.Counter{Rule: "r", Value: "a b"}, limit.Bucket{Start: 1}, "lg:r:~" + hashOf("a b") + "|s1"},
		{limit.Counter{Rule: "r", Value: "a|s1"}, limit.Bucket{Start: 1}, "lg:r:~" + hashOf("a|s1") + "|s1"},
		{limit.Counter{Rule: "r", Value: "~x"}, limit.Bucket{Start: 1}, "lg:r:~" + hashOf("~x") + "|s1"},
		{limit.Counter{Rule: "a:b", Value: "c"}, limit.Bucket{Start: 1}, "lg:~" + hashOf("a:b") + ":c|s1"},
		{limit.Counter{Rule: "r", Value: strings.Repeat("x", 129)}, limit.Bucket{Start: -5}, "lg:r:~" + hashOf(strings.Repeat("x", 129)) + "|s-5"},
	} {
		if got := checkKey(t, tc.c, tc.b); got != tc.want {
			t.Errorf("Key(%q, %+v) = %q, want %q", tc.c, tc.b, got, tc.want)
		}
	}
	// The longest possible key fits.
	long := limit.Counter{Rule: strings.Repeat("r", maxRawRule), Value: strings.Repeat("v", maxRawValue)}
	if k := checkKey(t, long, limit.Bucket{Level: limit.Hour, Start: -1 << 63}); len(k) != maxKeyLen {
		t.Errorf("longest key is %d bytes, want %d", len(k), maxKeyLen)
	}
}

// hashOf is the hashed form of s, computed independently of appendPart.
func hashOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base64.RawURLEncoding.EncodeToString(sum[:])[:22]
}

// FuzzKey checks that any counter and bucket give a valid key, and that
// distinct counters give distinct keys.
func FuzzKey(f *testing.F) {
	f.Add("login_ip", "203.0.113.7", "login_ip", "203.0.113.8", uint8(0), int64(1700000000))
	f.Add("a:b", "c", "a", "b:c", uint8(1), int64(-1))
	f.Add("r", "x y\x00\x7f|~é", "r", "x y", uint8(2), int64(0))
	f.Add(strings.Repeat("r", 300), strings.Repeat("\xff", 300), "", "", uint8(9), int64(1<<62))
	f.Fuzz(func(t *testing.T, r1, v1, r2, v2 string, level uint8, start int64) {
		b := limit.Bucket{Level: limit.Level(level), Start: start}
		c1, c2 := limit.Counter{Rule: r1, Value: v1}, limit.Counter{Rule: r2, Value: v2}
		k1, k2 := checkKey(t, c1, b), checkKey(t, c2, b)
		if (k1 == k2) != (c1 == c2) {
			t.Errorf("Key(%q) = %q and Key(%q) = %q", c1, k1, c2, k2)
		}
	})
}

// Adding a third server moves about a third of the counters, all to it;
// the order servers are listed in does not matter.
func TestPlacement(t *testing.T) {
	two := []uint64{serverSeed("10.0.0.1:11211"), serverSeed("10.0.0.2:11211")}
	three := append(append([]uint64{}, two...), serverSeed("10.0.0.3:11211"))
	reversed := []uint64{three[2], three[1], three[0]}
	const n = 1000
	moved, perServer := 0, make([]int, 3)
	for i := range n {
		h := counterHash(limit.Counter{Rule: "login_ip", Value: fmt.Sprintf("198.51.%d.%d", i/256, i%256)})
		before, after := pick(two, h), pick(three, h)
		perServer[after]++
		if before != after {
			moved++
			if after != 2 {
				t.Fatalf("counter %d moved from server %d to %d, not to the new server", i, before, after)
			}
		}
		if r := pick(reversed, h); 2-r != after {
			t.Fatalf("counter %d: server %d in one order, %d in the other", i, after, 2-r)
		}
	}
	t.Logf("adding a third server moved %d of %d counters; spread %v", moved, n, perServer)
	if moved < n/4 || moved > n*42/100 {
		t.Errorf("adding a third server moved %d of %d counters, want about a third", moved, n)
	}
	for i, k := range perServer {
		if k < n/4 || k > n*42/100 {
			t.Errorf("server %d holds %d of %d counters, want about a third", i, k, n)
		}
	}
}

func TestParseCount(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "42": 42, "7  ": 7, "9223372036854775807": 1<<63 - 1} {
		if got, ok := parseCount([]byte(in)); !ok || got != want {
			t.Errorf("parseCount(%q) = %d, %v, want %d", in, got, ok, want)
		}
	}
	for _, in := range []string{"", " ", "-1", "1x", "12345678901234567890", "9999999999999999999"} {
		if _, ok := parseCount([]byte(in)); ok {
			t.Errorf("parseCount(%q): ok, want an error", in)
		}
	}
}
