package pebblestore

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

// FuzzVisits checks that stored values round-trip and that any bytes decode
// to an error or to visits that round-trip (overlong varints decode too).
func FuzzVisits(f *testing.F) {
	f.Add(int64(0), int64(0), []byte{})
	f.Add(int64(1), int64(-1), []byte{0x02, 0x00})
	f.Add(int64(1<<62), int64(7), []byte{0xff, 0xff, 0xff})
	f.Add(int64(3), int64(4), []byte{0xff, 0x00, 0x30})
	f.Add(int64(3), int64(4), []byte{0x02, 0x04, 0x00, 0x00, 0x06})
	f.Fuzz(func(t *testing.T, h, b int64, raw []byte) {
		v := analytics.Visits{Human: h, Bot: b, Other: [rollup.NumOther]int64{0, b / 2, 0, h}}
		got, err := decodeVisits(appendVisits(nil, v))
		if err != nil || got != v {
			t.Fatalf("round trip of %+v = %+v, %v", v, got, err)
		}
		if d, err := decodeVisits(raw); err == nil {
			if again, err := decodeVisits(appendVisits(nil, d)); err != nil || again != d {
				t.Fatalf("decodeVisits(%x) = %+v, which round-trips to %+v, %v", raw, d, again, err)
			}
		}
	})
}

// TestVisitsClasses checks the value of a bucket whose visits are split by
// class: it round-trips; a value without classes is byte for byte what it
// was before they were counted (so an all-human link stores no more), and
// such a value of then reads with its bots all declared; a value with more
// fields than there are classes is refused.
func TestVisitsClasses(t *testing.T) {
	v := analytics.Visits{Human: 4, Bot: 10, Other: [rollup.NumOther]int64{0, 3, 0, 2}}
	if got, err := decodeVisits(appendVisits(nil, v)); err != nil || got != v {
		t.Fatalf("round trip of %+v = %+v, %v", v, got, err)
	}
	old := binary.AppendVarint(binary.AppendVarint(nil, 4), 10)
	if b := appendVisits(nil, analytics.Visits{Human: 4, Bot: 10}); !bytes.Equal(b, old) {
		t.Errorf("a value without classes is %x, was %x", b, old)
	}
	if got, err := decodeVisits(old); err != nil || got.Declared() != 10 || got.Split() {
		t.Errorf("a value of before reads as %+v, %v", got, err)
	}
	tooLong := old
	for range rollup.NumOther + 1 {
		tooLong = binary.AppendVarint(tooLong, 1)
	}
	if got, err := decodeVisits(tooLong); err == nil {
		t.Errorf("%d fields read as %+v", 3+rollup.NumOther, got)
	}
}

// FuzzKeys checks the key layout: index keys round-trip, and the point keys
// of one link and tier sort by time and hold no other link's or tier's keys
// between them.
func FuzzKeys(f *testing.F) {
	f.Add("abc", "abcd", int64(1_700_000_000), int64(-5), uint8(0), uint8(1))
	f.Add("", "\x00", int64(0), int64(1), uint8(4), uint8(4))
	f.Fuzz(func(t *testing.T, k1, k2 string, s1, s2 int64, t1, t2 uint8) {
		steps := []time.Duration{time.Minute, 5 * time.Minute, time.Hour, 24 * time.Hour, 7 * 24 * time.Hour}
		st1, st2 := steps[int(t1)%len(steps)], steps[int(t2)%len(steps)]
		step, start, key, err := parseIndexKey(appendIndexKey(nil, st1, s1, k1))
		if err != nil || step != st1 || start != s1 || key != k1 {
			t.Fatalf("parseIndexKey(appendIndexKey(%v, %d, %q)) = %v, %d, %q, %v", st1, s1, k1, step, start, key, err)
		}
		a, b := appendPointKey(nil, k1, st1, s1), appendPointKey(nil, k1, st1, s2)
		// The rolled value's key follows the flushed one's and comes
		// before the next bucket's.
		if r := append(slices.Clone(a), 'r'); bytes.Compare(r, a) <= 0 || s1 < s2 && bytes.Compare(r, b) >= 0 {
			t.Fatalf("the rolled key of %d is not between the point keys of %d and %d", s1, s1, s2)
		}
		if c := bytes.Compare(a, b); (s1 < s2) != (c < 0) || (s1 == s2) != (c == 0) {
			t.Fatalf("point keys at %d and %d compare %d", s1, s2, c)
		}
		// A key of another link or tier is outside the range of k1's tier.
		if k1 != k2 || st1 != st2 {
			lo, hi := appendPointKey(nil, k1, st1, -1<<63), appendPointKey(nil, k1, st1, 1<<63-1)
			o := appendPointKey(nil, k2, st2, s2)
			if bytes.Compare(o, lo) >= 0 && bytes.Compare(o, hi) <= 0 {
				t.Fatalf("key of (%q, %v, %d) lies in the range of (%q, %v)", k2, st2, s2, k1, st1)
			}
		}
	})
}

// FuzzMarkKeys checks that marks round-trip through their key and value,
// and that one link's marks hold no other link's between them.
func FuzzMarkKeys(f *testing.F) {
	f.Add("abc", "abcd", int64(1_700_000_000), uint64(7), int64(1_700_000_000_123_456_789))
	f.Add("", "\x00", int64(-5), uint64(1<<63), int64(0))
	f.Fuzz(func(t *testing.T, k1, k2 string, start int64, id uint64, at int64) {
		m := rollup.Mark{Key: k1, Step: time.Hour, Start: time.Unix(start, 0).UTC(), ID: id, At: time.Unix(0, at).UTC()}
		got, err := parseMark(appendMarkKey(nil, m.Key, m.Step, start, id), binary.BigEndian.AppendUint64(nil, uint64(at)))
		if err != nil || got != m {
			t.Fatalf("parseMark of %+v = %+v, %v", m, got, err)
		}
		if k1 != k2 {
			prefix := appendMarkKey(nil, k1, 0, 0, 0)
			prefix = prefix[:len(prefix)-20]
			if o := appendMarkKey(nil, k2, time.Hour, start, id); bytes.HasPrefix(o, prefix) {
				t.Fatalf("a mark of %q lies among those of %q", k2, k1)
			}
		}
	})
}
