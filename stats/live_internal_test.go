package stats

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/linkgate/linkgate/rollup"
)

// busyLive is a LiveSource whose count grows at every read: every poll
// makes an event.
type busyLive struct{ n int64 }

func (l *busyLive) Live(string, time.Time) ([]rollup.Point, bool) {
	l.n++
	pts := make([]rollup.Point, 90)
	for i := range pts {
		pts[i].Start = time.Unix(int64(i)*10, 0)
		pts[i].Human = l.n
	}
	return pts, true
}

func (l *busyLive) LiveSince() time.Time { return time.Unix(0, 0) }

// smallSendBuffers gives the connections it accepts a small send buffer.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4 << 10)
	}
	return c, err
}

type noReader struct{}

func (noReader) Points(context.Context, string, time.Duration, time.Time, time.Time) ([]rollup.Point, error) {
	return nil, nil
}
func (noReader) Total(context.Context, string) (rollup.Visits, error) { return rollup.Visits{}, nil }

// TestLiveStreamLetsAStalledClientGo: a client that opens a live stream
// and stops reading while events keep coming is let go once an event
// waits past the write timeout: the handler returns and the stream's
// place is free again, instead of a handler blocked for as long as the
// client keeps its connection open.
func TestLiveStreamLetsAStalledClientGo(t *testing.T) {
	poll, timeout := livePoll, liveWriteTimeout
	livePoll, liveWriteTimeout = 100*time.Microsecond, 300*time.Millisecond
	t.Cleanup(func() { livePoll, liveWriteTimeout = poll, timeout })

	streams := NewStreams(LiveConfig{MaxStreams: 1, PerShareToken: 1, PerClient: 1})
	srv := httptest.NewUnstartedServer(New(noReader{}, rollup.DefaultTiers(), Options{Live: &busyLive{}, Streams: streams}))
	srv.Listener = smallSendBuffers{srv.Listener} // filled by a few events
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(4 << 10)
	if _, err := c.Write([]byte("GET /go?format=events HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	// Never read: the events fill the socket buffers, then a write waits.
	deadline := time.Now().Add(20 * time.Second)
	for streams.Open() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // the stream's start
	}
	if streams.Open() != 1 {
		t.Fatal("the stream never opened")
	}
	for streams.Open() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a client that stopped reading still holds its stream after 20 s")
		}
		time.Sleep(20 * time.Millisecond) // the buffers filling, then the write timeout
	}
}

// TestStreamsPerTenant: the streams of one tenant's tokens (tenant tokens
// and its links' share tokens together) stop at per_tenant, with a 429 of
// their own; another tenant's, the default tenant's and the operator's
// are not counted with them, and a released place is taken again.
func TestStreamsPerTenant(t *testing.T) {
	s := NewStreams(LiveConfig{MaxStreams: 100, PerShareToken: 10, PerClient: 100, PerTenant: 2})
	acme1, acme2 := ticket{tenant: "acme"}, ticket{tenant: "acme", share: "lgs1.a"}
	for _, tk := range []ticket{acme1, acme2, {tenant: "other"}, {}, {token: true}} {
		if why, ok := s.acquire(tk); !ok {
			t.Fatalf("acquire(%+v) refused: %+v", tk, why)
		}
	}
	if why, ok := s.acquire(ticket{tenant: "acme", client: "c"}); ok || why.field != "stats.live.per_tenant" || !why.own {
		t.Errorf("a third stream of acme: %v %+v, want refused by stats.live.per_tenant", ok, why)
	}
	s.release(acme2)
	if _, ok := s.acquire(acme1); !ok {
		t.Errorf("a place acme released was not taken again")
	}
}

// minuteReader is a Reader of fixed minute buckets; err, when set, is
// every read's answer.
type minuteReader struct {
	pts []rollup.Point
	err error
}

func (m minuteReader) Points(_ context.Context, _ string, _ time.Duration, from, to time.Time) ([]rollup.Point, error) {
	var out []rollup.Point
	for _, p := range m.pts {
		if !p.Start.Before(from) && p.Start.Before(to) {
			out = append(out, p)
		}
	}
	return out, m.err
}
func (minuteReader) Total(context.Context, string) (rollup.Visits, error) {
	return rollup.Visits{}, nil
}

// TestReadStored: the store's part of the live window is the finest
// tier's buckets that start in the window before the process began
// counting; the bucket holding since loses the visits the process counted
// after since (its live buckets have them), and a bucket that began before
// the window is left out. A store that cannot be read gives none.
func TestReadStored(t *testing.T) {
	now := time.Date(2026, 11, 29, 6, 40, 25, 0, time.UTC)
	since := now.Add(-5 * time.Second) // 06:40:20, inside the minute of 06:40
	live := make([]rollup.Point, 90)
	first := now.Truncate(10 * time.Second).Add(-89 * 10 * time.Second) // 06:25:30
	for i := range live {
		live[i].Start = first.Add(time.Duration(i) * 10 * time.Second)
	}
	live[89].Visits = rollup.Visits{Human: 2, Bot: 1} // 06:40:20, after since
	m := func(hh, mm int, h, b int64) rollup.Point {
		return rollup.Point{Start: time.Date(2026, 11, 29, hh, mm, 0, 0, time.UTC), Visits: rollup.Visits{Human: h, Bot: b}}
	}
	r := minuteReader{pts: []rollup.Point{m(6, 25, 9, 9), m(6, 26, 1, 0), m(6, 39, 4, 0), m(6, 40, 5, 2)}}
	api := New(r, rollup.DefaultTiers(), Options{})
	got := api.readStored(t.Context(), "go", live, since)
	want := []rollup.Point{m(6, 26, 1, 0), m(6, 39, 4, 0), m(6, 40, 3, 1)}
	if got == nil || got.step != time.Minute || len(got.points) != len(want) {
		t.Fatalf("readStored = %+v, want the minutes %v", got, want)
	}
	for i := range want {
		if !got.points[i].Start.Equal(want[i].Start) || got.points[i].Visits != want[i].Visits {
			t.Errorf("stored minute %d: %v %+v, want %v %+v", i, got.points[i].Start, got.points[i].Visits, want[i].Start, want[i].Visits)
		}
	}
	b := string(appendStored(nil, got, live[0].Start))
	if w := fmt.Sprintf(`,"stored":{"step":60,"range_total":8,"bot_range_total":1,"points":[[%d,1,0],[%d,4,0],[%d,3,1]]}`,
		want[0].Start.Unix(), want[1].Start.Unix(), want[2].Start.Unix()); b != w {
		t.Errorf("appendStored = %s\nwant %s", b, w)
	}
	if got := New(minuteReader{err: errors.New("store down")}, rollup.DefaultTiers(), Options{}).readStored(t.Context(), "go", live, since); got != nil {
		t.Errorf("readStored with the store down = %+v, want nil", got)
	}
}
