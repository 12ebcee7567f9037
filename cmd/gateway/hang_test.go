package main

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics/cassandra/cqlmodel"
	"github.com/linkgate/linkgate/internal/testkit"
)

// hangInterval is the flush interval of TestKill9WhileCassandraHangs:
// LINKGATE_HANG_INTERVAL (10s for the measurement docs/durability.md
// gives), or 1s.
func hangInterval(t *testing.T) time.Duration {
	v := os.Getenv("LINKGATE_HANG_INTERVAL")
	if v == "" {
		return time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 100*time.Millisecond {
		t.Fatalf("LINKGATE_HANG_INTERVAL=%q: want a duration of at least 100ms", v)
	}
	return d
}

// acknowledged returns the visits of all links in the flushed rows the
// model answered OK, each row once (a retry writes the same row again).
func acknowledged(db *cqlmodel.Server) int {
	db.Mu.Lock()
	defer db.Mu.Unlock()
	seen := map[string]bool{}
	n := 0
	for _, st := range db.Applied {
		// shard, bucket, short_key, start, writer, human, bot
		if !strings.HasPrefix(st.Q, "INSERT INTO linkgate.points_1m_by_shard ") || string(st.Values[2]) != "/" {
			continue
		}
		row := string(st.Values[3]) + string(st.Values[4]) // start, writer
		if seen[row] {
			continue
		}
		seen[row] = true
		n += int(binary.BigEndian.Uint64(st.Values[5]) + binary.BigEndian.Uint64(st.Values[6]))
	}
	return n
}

// TestKill9WhileCassandraHangs: Cassandra (the CQL protocol model) stops
// answering, writes and reads alike, neither taking nor refusing them, as
// a coordinator does while it waits for replicas that are gone (a lost
// quorum). /stats is read every second meanwhile. kill -9 at a random
// moment of the hang; the cluster answers again, and the next process, on
// the same journal, writes what it holds: every visit sent is in the rows
// the model took, each row once, but, at most, those of the last interval
// and the spill bound (half an interval, from 250 ms to 2 s) before the
// kill. /stats answered each second within its read_timeout.
//
// The count is read from the model's rows, not from another store: the
// hang begins as soon as the model took a flush's first row, so the Write
// of that batch never returns and the batch stays in the journal although
// some of its rows were applied. Its replay writes those rows again under
// the batch's writer id, which overwrites them in Cassandra (the model
// counts each row once, as acknowledged does); written to another store,
// the same replay would count them twice.
func TestKill9WhileCassandraHangs(t *testing.T) {
	t.Parallel()
	interval := hangInterval(t)
	spill := min(max(interval/2, 250*time.Millisecond), 2*time.Second)
	up := redirector(t)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 19))
	t.Logf("seed %d, flush_interval %v", seed, interval)
	for r := range rounds(t) {
		db := cqlmodel.New(t)
		dir := t.TempDir()
		settings := fmt.Sprintf("  embedded: {path: %s}\n  journal: {path: %s}\n", filepath.Join(dir, "analytics"), filepath.Join(dir, "journal"))
		config := func(store string) string {
			return strings.Replace(testkit.BaseConfig(up.URL), "analytics:\n  enabled: false\n",
				fmt.Sprintf("analytics:\n  flush_interval: %v\n%s%s", interval, store, settings), 1)
		}
		store := fmt.Sprintf("  store: cassandra\n  cassandra: {hosts: [%s]}\n", db.Addr())
		gw, _ := startGateway(t, config(store), tokenEnv)
		testkit.Eventually(t, 20*time.Second, "connected to the model", func() bool {
			_, b := testkit.Do(t, "GET", gw.url("admin", "/admin/health"), nil, "Authorization", "Bearer "+testkit.AdminToken)
			return strings.Contains(b, `"state":"ok"`)
		})
		v := visit(gw.url("gateway", ""))
		testkit.Eventually(t, 2*interval+5*time.Second, "flushes the model takes", func() bool { return acknowledged(db) > 0 })
		db.Mu.Lock()
		db.Reply = func(string) int { return cqlmodel.ReplyStall }
		db.Mu.Unlock()

		var mu sync.Mutex
		var took []time.Duration
		stopPolls := make(chan struct{})
		var polls sync.WaitGroup
		polls.Go(func() {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				began := time.Now()
				if resp, err := testkit.Client.Get(gw.url("gateway", "/stats?last=1h")); err == nil { // else: the kill
					resp.Body.Close()
					mu.Lock()
					took = append(took, time.Since(began))
					mu.Unlock()
				}
				select {
				case <-stopPolls:
					return
				case <-tick.C:
				}
			}
		})
		// At a random moment, after one /stats read at least.
		time.Sleep(1500*time.Millisecond + time.Duration(rng.Int64N(int64(3*interval))))
		killed := gw.kill9()
		close(stopPolls)
		testkit.Await(t, polls.Wait, 5*time.Minute, "the pollers stopping")
		v.halt()
		applied := acknowledged(db)

		db.Mu.Lock()
		db.Reply = nil
		db.Mu.Unlock()
		gw2, _ := startGateway(t, config(store))
		sent, mayLose := v.sent(killed.Add(-interval - spill - testkit.Slack(300*time.Millisecond))) // 300 ms: a tick's jitter and fsync
		counted := settleOn(t, sent-mayLose, func() (int, bool) { return acknowledged(db), true })
		gw2.stop()
		fromJournal := counted - applied
		mu.Lock()
		slices.Sort(took)
		p99 := time.Duration(0)
		if len(took) > 0 {
			p99 = took[(len(took)*99)/100]
		}
		mu.Unlock()
		t.Logf("round %d: sent %d, counted %d (%d acknowledged before the hang, %d more written from the journal), lost %d, at most %d may be; /stats during the hang: %d reads, slowest %v",
			r, sent, counted, applied, fromJournal, sent-counted, mayLose, len(took), p99)
		if counted > sent {
			t.Errorf("round %d: %d visits counted, %d sent: %d counted twice", r, counted, sent, counted-sent)
		}
		if sent-counted > mayLose {
			t.Errorf("round %d: %d visits lost, more than the %d of the last interval and the spill bound", r, sent-counted, mayLose)
		}
		if p99 > testkit.Slack(3*time.Second) {
			t.Errorf("round %d: /stats took up to %v while the store hung, with read_timeout 1s", r, p99)
		}
	}
}
