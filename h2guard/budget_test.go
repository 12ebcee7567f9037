package h2guard

import (
	"encoding/binary"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestBucket: a burst at once, then one per interval; a bucket left alone
// fills up to its burst and no further; tokens given back count, up to
// full.
func TestBucket(t *testing.T) {
	l := perSecond(10, 20) // one every 100 ms, 20 at once
	ms := int64(time.Millisecond)
	var b bucket
	took := func(now int64, n int) int {
		got := 0
		for range n {
			if b.take(now, l) {
				got++
			}
		}
		return got
	}
	if got := took(0, 30); got != 20 {
		t.Errorf("at once: %d taken, want the burst, 20", got)
	}
	if got := took(250*ms, 5); got != 2 {
		t.Errorf("250 ms later: %d taken, want 2", got)
	}
	if got := took(100_000*ms, 50); got != 20 {
		t.Errorf("after 100 s: %d taken, want 20 (full, not more)", got)
	}
	b.give(l)
	b.give(l)
	if got := took(100_000*ms, 5); got != 2 {
		t.Errorf("after two given back: %d taken, want 2", got)
	}
	for range 100 {
		b.give(l)
	}
	if got := took(100_001*ms, 50); got != 20 {
		t.Errorf("after 100 given back: %d taken, want 20 (full, not more)", got)
	}
}

// FuzzBucket: the bucket takes what a token bucket counted out by brute
// force takes (tokens kept in nanoseconds of refill, topped up at every
// event), for any rate, burst and event times.
func FuzzBucket(f *testing.F) {
	f.Add(uint16(10), uint8(20), []byte{0, 0, 0, 50, 200, 1, 0, 255})
	f.Add(uint16(1000), uint8(1), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, rate uint16, burst uint8, gaps []byte) {
		l := perSecond(int(rate), int(burst))
		var b bucket
		capacity := l.burst * l.interval
		tokens, last, now := capacity, int64(0), int64(0) // the reference: full at 0
		for i, g := range gaps {
			now += int64(g) * int64(time.Millisecond) / 4
			tokens = min(capacity, tokens+now-last)
			last = now
			want := tokens >= l.interval
			if want {
				tokens -= l.interval
			}
			if got := b.take(now, l); got != want {
				t.Fatalf("event %d at %v: took %v, the reference %v", i, time.Duration(now), got, want)
			}
		}
	})
}

// TestClientsError: the resets the server sends that count against the
// client are those for its protocol errors on a stream.
func TestClientsError(t *testing.T) {
	for code, want := range map[uint32]bool{0: false, 1: true, 2: false, 3: true, 5: true, 6: true, 7: false, 8: false, 0xb: false} {
		if got := clientsError(http2.ErrCode(code)); got != want {
			t.Errorf("clientsError(%v) = %v, want %v", http2.ErrCode(code), got, want)
		}
	}
}

// TestAnswered: the ring knows the streams answered last, up to its size.
func TestAnswered(t *testing.T) {
	var a answered
	for id := uint32(1); id < 4*answeredRing; id += 2 { // 2 rings' worth
		a.add(id)
	}
	for id, want := range map[uint32]bool{1: false, 2*answeredRing - 1: false, 2*answeredRing + 1: true, 4*answeredRing - 1: true, 2: false} {
		if got := a.has(id); got != want {
			t.Errorf("after %d streams, has(%d) = %v, want %v", 2*answeredRing, id, got, want)
		}
	}
}

// frameBytes is a frame's header and payload.
func frameBytes(typ, flags byte, stream uint32, payload []byte) []byte {
	n := len(payload)
	b := []byte{byte(n >> 16), byte(n >> 8), byte(n), typ, flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[5:], stream)
	return append(b, payload...)
}
