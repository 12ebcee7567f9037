package memcached

import (
	"bufio"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/limit"
)

// readerStore is a Store on addr and its only server, with its metrics.
func readerStore(t *testing.T, addr string, timeout time.Duration, idle int) (*server, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	s := New(limit.Memcached{Servers: []string{addr}, Timeout: timeout, MaxIdleConns: idle}, NewMetrics(reg), nil)
	t.Cleanup(func() { s.Close() })
	testkit.Eventually(t, 5*time.Second, "the pool dialed", func() bool { return dialsOf(t, reg, addr) >= float64(idle) })
	return s.servers[0], reg
}

func dialsOf(t *testing.T, reg *prometheus.Registry, addr string) float64 {
	return testkit.Metric(t, reg, "linkgate_memcached_dials_total", "server", addr)
}

func getErrorsOf(t *testing.T, reg *prometheus.Registry, addr string) float64 {
	return testkit.Metric(t, reg, "linkgate_memcached_errors_total", "server", addr, "op", opGet)
}

// randomBuckets returns n distinct buckets.
func randomBuckets(rng *rand.Rand, n int) []limit.Bucket {
	seen := map[limit.Bucket]bool{}
	var bs []limit.Bucket
	for len(bs) < n {
		b := limit.Bucket{Level: limit.Level(rng.IntN(int(limit.NumLevels))), Start: rng.Int64N(2e9)}
		if !seen[b] {
			seen[b] = true
			bs = append(bs, b)
		}
	}
	return bs
}

// TestGetMultiAgreesWithGomemcache: on random sets of present and missing
// keys holding random counts (some left padded with spaces by a decr, as
// memcached does), the reader and gomemcache's GetMulti read the same
// counts, and both the counts written.
func TestGetMultiAgreesWithGomemcache(t *testing.T) {
	t.Parallel()
	mc := testkit.StartMemcached(t)
	sv, reg := readerStore(t, mc.Addr, testkit.Slack(time.Second), 4)
	gm := memcache.New(mc.Addr)
	gm.Timeout = testkit.Slack(time.Second)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	padded := 0
	for round := range 40 {
		c := limit.Counter{Rule: "agree", Value: fmt.Sprintf("client-%d-%d", round, rng.Uint32())}
		n := 1 + rng.IntN(144)
		if round%4 == 0 {
			n = 144
		}
		bs := randomBuckets(rng, n)
		want := make([]int64, n)
		keys := make([]string, n)
		for i, b := range bs {
			keys[i] = Key(c, b)
			switch p := rng.IntN(10); {
			case p < 5: // missing
			case p < 8:
				want[i] = rng.Int64N(1 << rng.IntN(63))
				if err := gm.Set(&memcache.Item{Key: keys[i], Value: strconv.AppendInt(nil, want[i], 10), Expiration: 600}); err != nil {
					t.Fatal(err)
				}
			default: // 1000 decremented to 999: memcached pads "999 "
				if err := gm.Set(&memcache.Item{Key: keys[i], Value: []byte("1000"), Expiration: 600}); err != nil {
					t.Fatal(err)
				}
				if _, err := gm.Decrement(keys[i], 1); err != nil {
					t.Fatal(err)
				}
				want[i] = 999
			}
		}
		got := make([]int64, n+1)
		got[n] = -1 // beyond the buckets: left alone
		if err := sv.getMulti(c, bs, got); err != nil {
			t.Fatalf("round %d: getMulti of %d keys: %v", round, n, err)
		}
		items, err := gm.GetMulti(keys)
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range keys {
			var viaGomemcache int64
			if it := items[k]; it != nil {
				if strings.HasSuffix(string(it.Value), " ") {
					padded++
				}
				var ok bool
				if viaGomemcache, ok = parseCount(it.Value); !ok {
					t.Fatalf("%q holds %q", k, it.Value)
				}
			}
			if got[i] != viaGomemcache || got[i] != want[i] {
				t.Fatalf("round %d, key %d of %d (%s): getMulti read %d, gomemcache %d, written %d", round, i, n, k, got[i], viaGomemcache, want[i])
			}
		}
		if got[n] != -1 {
			t.Fatalf("getMulti wrote past its buckets")
		}
	}
	if padded == 0 {
		t.Error("no value padded with spaces was read")
	}
	if d := dialsOf(t, reg, mc.Addr); d != 4 {
		t.Errorf("%v dials for 40 reads with 4 connections warmed, want 4", d)
	}
}

// TestGetMultiNotACount: a value that is not a count is an error, whose
// key and value it names, but not a failure of the server: the breaker
// does not count it and the connection serves the next read.
func TestGetMultiNotACount(t *testing.T) {
	t.Parallel()
	mc := testkit.StartMemcached(t)
	sv, reg := readerStore(t, mc.Addr, time.Second, 1)
	gm := memcache.New(mc.Addr)
	c := limit.Counter{Rule: "notcount", Value: "x"}
	bs := []limit.Bucket{{Level: limit.Minute, Start: 60}, {Level: limit.Minute, Start: 120}, {Level: limit.Minute, Start: 180}}
	gm.Set(&memcache.Item{Key: Key(c, bs[0]), Value: []byte("5")})
	gm.Set(&memcache.Item{Key: Key(c, bs[1]), Value: []byte("abc")})
	gm.Set(&memcache.Item{Key: Key(c, bs[2]), Value: []byte(strings.Repeat("y", 5000))})
	counts := make([]int64, 3)
	err := sv.read(c, bs, counts)
	var nce *notCountError
	if !errors.As(err, &nce) || nce.value != "abc" {
		t.Fatalf("read: %v, want the not-a-count error of %q", err, "abc")
	}
	if counts[0] != 0 {
		t.Errorf("counts after an error %v, want zeros", counts)
	}
	// The 5000-byte value is skipped, not a protocol error.
	err = sv.read(c, bs[2:], counts)
	if !errors.As(err, &nce) || !strings.HasPrefix(nce.value, "yyy") {
		t.Fatalf("read of a long value: %v, want a not-a-count error", err)
	}
	if err := sv.read(c, bs[:1], counts); err != nil || counts[0] != 5 {
		t.Fatalf("read after: %v, %v, want 5", err, counts[:1])
	}
	if e, d := getErrorsOf(t, reg, mc.Addr), dialsOf(t, reg, mc.Addr); e != 0 || d != 1 {
		t.Errorf("%v get errors counted and %v dials, want 0 and 1 (the connection kept)", e, d)
	}
}

// TestGetMultiReusesConnections: reads, one after the other and four at
// once, use the connections warmed at start and dial none.
func TestGetMultiReusesConnections(t *testing.T) {
	t.Parallel()
	mc := testkit.StartMemcached(t)
	sv, reg := readerStore(t, mc.Addr, time.Second, 4)
	bs := randomBuckets(rand.New(rand.NewPCG(1, 2)), 144)
	c := limit.Counter{Rule: "reuse", Value: "x"}
	counts := make([]int64, len(bs))
	for range 100 {
		if err := sv.getMulti(c, bs, counts); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			counts := make([]int64, len(bs))
			for range 50 {
				if err := sv.getMulti(c, bs, counts); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	testkit.Await(t, wg.Wait, 5*time.Minute, "the concurrent reads")
	if d := dialsOf(t, reg, mc.Addr); d != 4 {
		t.Errorf("%v dials for 300 reads with 4 connections warmed, want 4", d)
	}
	if len(sv.spare) != 4 {
		t.Errorf("%d idle connections after the reads, want 4", len(sv.spare))
	}
	// With none idle, a read dials one and keeps it.
	sv.drainSpare()
	if err := sv.getMulti(c, bs, counts); err != nil {
		t.Fatal(err)
	}
	if d := dialsOf(t, reg, mc.Addr); d != 5 || len(sv.spare) != 1 {
		t.Errorf("after a read with no idle connection: %v dials, %d idle, want 5 and 1", d, len(sv.spare))
	}
	// A connection taken before the breaker dropped the pool is not kept.
	nc, gen, err := sv.readConn(time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	sv.connGen.Add(1)
	sv.putReadConn(nc, gen)
	if _, err := nc.Write([]byte("version\r\n")); err == nil || len(sv.spare) != 0 {
		t.Errorf("a connection of the pool before the breaker opened was put back (%d idle, write error %v)", len(sv.spare), err)
	}
}

// fakeServer answers get commands with what answer returns. It records
// which connection each get came on and which connections were closed
// (by the client, or by itself hanging up).
type fakeServer struct {
	addr   string
	answer func(conn int, keys []string) (reply string, delay time.Duration, hangUp bool) // called under mu

	mu     sync.Mutex
	gets   []int        // the connection of each get, in order
	closed map[int]bool // connections the client closed
}

func startFake(t *testing.T) *fakeServer {
	t.Helper()
	f := &fakeServer{closed: map[int]bool{}}
	f.addr = testkit.ServeTCP(t, f.serve)
	return f
}

func (f *fakeServer) serve(id int, nc net.Conn) {
	defer nc.Close()
	r := bufio.NewReader(nc)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			f.mu.Lock()
			f.closed[id] = true
			f.mu.Unlock()
			return
		}
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "get" {
			nc.Write([]byte("ERROR\r\n"))
			continue
		}
		f.mu.Lock()
		f.gets = append(f.gets, id)
		reply, delay, hangUp := f.answer(id, fields[1:])
		f.mu.Unlock()
		time.Sleep(delay)
		nc.Write([]byte(reply))
		if hangUp { // the connection is gone: closed as if by the client
			f.mu.Lock()
			f.closed[id] = true
			f.mu.Unlock()
			return
		}
	}
}

func (f *fakeServer) state() (gets []int, closed map[int]bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.gets), maps.Clone(f.closed)
}

// TestGetMultiBadAnswers: each malformed, cut or slow answer is an error
// counted against the server (the breaker's path), its connection is
// closed and never used again, and the next read, from a healthy server,
// succeeds on another connection.
func TestGetMultiBadAnswers(t *testing.T) {
	t.Parallel()
	// Stretched by the machine's pace: the read after a bad answer must
	// not time out on a loaded machine either.
	timeout := testkit.Slack(300 * time.Millisecond)
	value := func(key, data string) string { return fmt.Sprintf("VALUE %s 0 %d\r\n%s\r\n", key, len(data), data) }
	for _, tc := range []struct {
		name   string
		answer func(keys []string) string
		delay  time.Duration
		hangUp bool
	}{
		{"garbage line", func([]string) string { return "HELLO there\r\n" }, 0, false},
		{"server error", func([]string) string { return "SERVER_ERROR out of memory storing object\r\n" }, 0, false},
		{"client error", func([]string) string { return "CLIENT_ERROR line too long\r\n" }, 0, false},
		{"error", func([]string) string { return "ERROR\r\n" }, 0, false},
		{"malformed VALUE line", func(k []string) string { return "VALUE " + k[0] + " x 1\r\n1\r\nEND\r\n" }, 0, false},
		{"VALUE line without size", func(k []string) string { return "VALUE " + k[0] + " 0\r\n1\r\nEND\r\n" }, 0, false},
		{"data not ended by CRLF", func(k []string) string { return "VALUE " + k[0] + " 0 1\r\n1XYEND\r\n" }, 0, false},
		{"truncated data", func(k []string) string { return "VALUE " + k[0] + " 0 5\r\n12" }, 0, true},
		{"key not requested", func([]string) string { return value("lg:other:x|m60", "1") + "END\r\n" }, 0, false},
		{"key answered twice", func(k []string) string { return value(k[1], "1") + value(k[1], "2") + "END\r\n" }, 0, false},
		{"value over 1 MB", func(k []string) string { return "VALUE " + k[0] + " 0 2000000\r\n" }, 0, false},
		{"closed mid-answer", func(k []string) string { return value(k[0], "1") + value(k[1], "2") }, 0, true},
		{"closed before answering", func([]string) string { return "" }, 0, true},
		{"slower than the timeout", func(k []string) string { return value(k[0], "1") + "END\r\n" }, 3 * timeout, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := startFake(t)
			bad := true
			f.answer = func(_ int, keys []string) (string, time.Duration, bool) {
				if bad {
					bad = false
					return tc.answer(keys), tc.delay, tc.hangUp
				}
				return value(keys[1], "42") + "END\r\n", 0, false
			}
			sv, reg := readerStore(t, f.addr, timeout, 1)
			c := limit.Counter{Rule: "fake", Value: "x"}
			bs := []limit.Bucket{{Level: limit.Minute, Start: 60}, {Level: limit.Minute, Start: 120}, {Level: limit.Minute, Start: 180}}
			counts := []int64{-1, -1, -1}
			start := time.Now()
			err := sv.read(c, bs, counts)
			took := time.Since(start)
			if err == nil {
				t.Fatal("read succeeded")
			}
			t.Logf("after %v: %v", took, err)
			if counts[0] != 0 || counts[1] != 0 || counts[2] != 0 {
				t.Errorf("counts after an error %v, want zeros", counts)
			}
			if benign(err) {
				t.Errorf("error %v is benign: the breaker would not count it", err)
			}
			if e := getErrorsOf(t, reg, f.addr); e != 1 {
				t.Errorf("%v get errors counted, want 1", e)
			}
			if took > 3*timeout {
				t.Errorf("the read took %v, want at most about the timeout %v", took, timeout)
			}
			testkit.Eventually(t, 2*time.Second, "the bad connection closed", func() bool {
				gets, closed := f.state()
				return len(gets) == 1 && closed[gets[0]]
			})
			counts = []int64{-1, -1, -1}
			if err := sv.read(c, bs, counts); err != nil || counts[0] != 0 || counts[1] != 42 || counts[2] != 0 {
				t.Fatalf("the read after: %v, counts %v, want [0 42 0]", err, counts)
			}
			gets, _ := f.state()
			if len(gets) != 2 || gets[0] == gets[1] {
				t.Errorf("gets came on connections %v, want two, the second on a new one", gets)
			}
			if sv.open.Load() {
				t.Error("one failure opened the breaker")
			}
		})
	}
}

// TestGetMultiBreaker: three bad answers in a row open the breaker, as
// three failed gomemcache reads did.
func TestGetMultiBreaker(t *testing.T) {
	t.Parallel()
	f := startFake(t)
	f.answer = func(int, []string) (string, time.Duration, bool) { return "SERVER_ERROR busy\r\n", 0, false }
	sv, _ := readerStore(t, f.addr, time.Second, 1)
	c := limit.Counter{Rule: "fake", Value: "x"}
	bs := []limit.Bucket{{Level: limit.Minute, Start: 60}}
	for i := range failThreshold {
		if sv.open.Load() {
			t.Fatalf("breaker open after %d failures", i)
		}
		if err := sv.read(c, bs, make([]int64, 1)); err == nil {
			t.Fatal("read succeeded")
		}
	}
	if !sv.open.Load() {
		t.Errorf("breaker closed after %d server errors", failThreshold)
	}
}

// TestGetCommand: the command is gomemcache's: "get", the keys Key
// builds separated by spaces, CRLF.
func TestGetCommand(t *testing.T) {
	c := limit.Counter{Rule: "login_ip", Value: "2001:db8::1"}
	bs := randomBuckets(rand.New(rand.NewPCG(3, 4)), 144)
	keys := make([]string, len(bs))
	for i, b := range bs {
		keys[i] = Key(c, b)
	}
	var b getBuf
	if err := b.command(c, bs); err != nil {
		t.Fatal(err)
	}
	if want := "get " + strings.Join(keys, " ") + "\r\n"; string(b.cmd) != want {
		t.Errorf("command %q, want %q", b.cmd, want)
	}
	for i, k := range b.keys {
		if string(b.cmd[k.start:k.end]) != keys[i] {
			t.Errorf("key %d at %v is %q, want %q", i, k, b.cmd[k.start:k.end], keys[i])
		}
	}
	for _, k := range []string{strings.Repeat("a", 251), "a b", "a\x00", "a\x7f", "a\n"} {
		if legalKeyBytes([]byte(k)) {
			t.Errorf("%q legal", k)
		}
	}
	if !legalKeyBytes([]byte(strings.Repeat("a", 250))) {
		t.Error("a key of 250 bytes refused")
	}
	if n := testing.AllocsPerRun(100, func() { b.command(c, bs) }); n != 0 {
		t.Errorf("building the command allocates %v times", n)
	}
}
