package cassandra

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/hll"
	"github.com/linkgate/linkgate/visitor"
)

// TestFlushStatementsWithDims counts what a flush of 100,000 links costs
// Cassandra with every feature on: each link visited once in the interval
// (a referrer, a source, a country, a device, a browser and an OS: five
// dimensions beside the referrer's source), with its visitor's sketch,
// through the real Recorder and Flusher into the Store over a backend that
// acknowledges at once. It takes seconds (a minute under -race), so it
// runs only with LINKGATE_MEASURE_DIMS=1:
//
//	LINKGATE_MEASURE_DIMS=1 go test ./analytics/cassandra -run TestFlushStatementsWithDims -v
func TestFlushStatementsWithDims(t *testing.T) {
	if os.Getenv("LINKGATE_MEASURE_DIMS") == "" {
		t.Skip("a flush of 100,000 links: set LINKGATE_MEASURE_DIMS=1")
	}
	const links = 100_000
	s := newStore(analyticstest.DefaultPlan, nil)
	s.be = nopBackend{}
	rec := analytics.NewRecorder(2*links, nil)
	rec.SetMaxValues(100)
	rec.SetMaxBytes(1 << 30)
	at := time.Date(2026, 5, 4, 12, 0, 5, 0, time.UTC)
	f := analytics.NewFlusher(rec, s, analyticstest.DefaultPlan, analytics.FlusherOptions{Now: func() time.Time { return at }}, nil, nil)
	u := visitor.NewUniques([]byte("a-secret-of-32-bytes-for-testing"))
	rnd := rand.New(rand.NewPCG(1, 2))
	refs := []string{"news.example", "direct", "t.co"}
	for round := range 2 {
		before := s.Statements()
		for i := range links {
			key := fmt.Sprint("link", i)
			fe := visitor.Features{refs[i%3], refs[i%3], "DE", "mobile", "Safari", "iOS"}
			addr := netip.AddrFrom4([4]byte{203, 0, 113, byte(rnd.IntN(256))})
			rec.RecordVisit(key, at, false, &fe, u.Hash(at, addr, "ua", key))
		}
		if err := f.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		st := s.Statements()
		d := func(a, b int64) int64 { return a - b }
		t.Logf("flush %d of %d links, 6 dimensions each: %d write statements: %d counts, %d Active entries in %d batches, "+
			"%d breakdown counts and %d sketch registers in %d link_days rows in %d batches, %d links' visits, %d top-list slots in %d batches",
			round+1, links, d(st.Writes(), before.Writes()), d(st.Points, before.Points), d(st.Active, before.Active), d(st.ActiveSent, before.ActiveSent),
			d(st.Dims, before.Dims), d(st.Uniques, before.Uniques), d(st.LinkRows, before.LinkRows), d(st.LinkSent, before.LinkSent), d(st.Top, before.Top),
			d(st.Leaders, before.Leaders), d(st.LeadersSent, before.LeadersSent))
		if d(st.Dims, before.Dims) != 6*links+10 {
			t.Errorf("%d breakdown counts, want %d: one per link and dimension, and all links' ten values", d(st.Dims, before.Dims), 6*links+10)
		}
		// A link's day is one row of link_days: its 6 counts, its
		// register and its visits take about 260 bytes, 15 links a
		// statement (packBytes);
		// all links' dense sketch is a row of its own, in statements of
		// maxPartitionRows registers.
		if n := d(st.LinkRows, before.LinkRows); n < links || n > links+hll.M/maxPartitionRows+10 {
			t.Errorf("%d link_days rows for %d links, want one a link", n, links)
		}
		if n := d(st.Top, before.Top); n != links {
			t.Errorf("%d links' visits written for %d links, want one a link (in its link_days row)", n, links)
		}
		if n := d(st.LinkSent, before.LinkSent); n > links/14+hll.M/maxPartitionRows+10 {
			t.Errorf("%d breakdown and sketch statements for %d links, want about one for 15 links", n, links)
		}
		// Every link's count changed, but only the writer's 2,000 most
		// visited of the day have a slot: the top list adds about 2% to
		// the rows, not a row per link.
		if d(st.Leaders, before.Leaders) != topLeaders || d(st.LeadersSent, before.LeadersSent) > topLeaders/maxPartitionRows+1 {
			t.Errorf("%d top-list slots in %d batches, want %d in batches of up to %d", d(st.Leaders, before.Leaders), d(st.LeadersSent, before.LeadersSent), topLeaders, maxPartitionRows)
		}
		at = at.Add(10 * time.Second)
	}
}
