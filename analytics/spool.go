package analytics

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/linkgate/linkgate/analytics/hll"
	"github.com/linkgate/linkgate/journal"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitor"
)

// DefaultJournalMaxBytes is analytics.journal.max_bytes' default: 256 MiB,
// about 8 million (link, minute) counts, hours of a busy outage.
const DefaultJournalMaxBytes = 256 << 20

// minJournalBytes is the smallest analytics.journal.max_bytes: a few
// segments, so that folding and acking can free space.
const minJournalBytes = 1 << 20

// DefaultJournalPath returns where the journal of cfg is kept when
// analytics.journal.path is empty: a directory "analytics-journal" beside
// the embedded store's directory (by default ./data/analytics-journal),
// whichever store is used. It is never inside the store's own directory.
func DefaultJournalPath(cfg Config) string {
	if cfg.Journal.Path != "" {
		return cfg.Journal.Path
	}
	base := cfg.Embedded.Path
	if base == "" {
		base = DefaultConfig().Embedded.Path
	}
	return filepath.Join(filepath.Dir(filepath.Clean(base)), "analytics-journal")
}

// errStopScan ends a Scan of the journal early, without an error.
var errStopScan = errors.New("analytics: journal: stop scanning")

// spool is the Flusher's journal of batches: where it keeps the batches
// the store refused, on local disk (package journal), until the store
// takes them. Each interval's batch is one record, written and fsynced
// before the flusher moves on, and acknowledged once the store applied it. At max_bytes it folds its
// oldest records into coarser buckets before it drops anything. It is
// used by one Flusher, under the Flusher's lock; its methods are safe on a
// nil *spool (none).
type spool struct {
	j        *journal.Journal
	maxBytes int64
	plan     *rollup.Plan
	m        *Metrics
	log      *slog.Logger

	records  int       // records not acked (-1 until surveyed: unknown)
	oldest   time.Time // the oldest bucket start of the head record, zero when unknown or none
	dropped  uint64    // visits dropped at the cap since the start
	rewrites uint64    // folds and drops so far: each changes which records are at the head
}

// openSpool opens (creating it if needed) the spool's journal in dir,
// capped at maxBytes (0: DefaultJournalMaxBytes). It checks the files and cuts a
// record torn by a crash but reads no batch: a Flusher's Run writes them
// to the store in the background.
func openSpool(dir string, maxBytes int64) (*spool, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultJournalMaxBytes
	}
	// Preallocated: the journal is kept beside the store, on the disk
	// whose filling up is one of the outages it is for.
	j, err := journal.Open(dir, journal.Options{MaxBytes: maxBytes, Preallocate: true})
	if err != nil {
		return nil, fmt.Errorf("analytics: journal: %w", err)
	}
	// What Open recovered is logged by setPlan, once the Flusher's logger
	// is known.
	return &spool{j: j, maxBytes: maxBytes, records: -1, log: slog.New(slog.DiscardHandler)}, nil
}

// setPlan gives the journal what folding, its metrics and its logs need,
// and logs what Open found. Called when the Flusher opens it.
func (sp *spool) setPlan(plan *rollup.Plan, m *Metrics, log *slog.Logger) {
	sp.plan, sp.m, sp.log = plan, m, log
	st := sp.j.Recovered()
	if st.TornBytes > 0 || st.Corrupt > 0 || st.AckLost {
		log.Warn("analytics: journal recovered after a crash", "dir", sp.j.Dir(),
			"torn_bytes", st.TornBytes, "corrupt_records", st.Corrupt, "lost_bytes", st.LostBytes, "ack_lost", st.AckLost)
	}
	if spills, _ := filepath.Glob(filepath.Join(filepath.Dir(sp.j.Dir()), "analytics-spill", "spill-*.json")); len(spills) > 0 {
		log.Warn("analytics: spill files of an earlier version are not read; remove them once looked at",
			"dir", filepath.Dir(spills[0]), "files", len(spills))
	}
	sp.report()
}

// report sets the journal's metrics to its bytes and records.
func (sp *spool) report() {
	sp.m.setJournal(sp.Bytes(), max(sp.records, 0))
}

// waiting says whether records wait for the store.
func (sp *spool) waiting() bool {
	return sp != nil && sp.j.Acked().Less(sp.j.End())
}

// Bytes returns the journal's bytes on disk, 0 for none.
func (sp *spool) Bytes() int64 {
	if sp == nil {
		return 0
	}
	return sp.j.Bytes()
}

// survey counts the records a previous process left, streaming, and
// finds the oldest bucket they hold. It reads the journal only (Scan is
// safe with the Flusher's appends): the caller sets what it found with
// surveyed, under the Flusher's lock.
func (sp *spool) survey() (n int, oldest time.Time) {
	err := sp.j.Scan(sp.j.Acked(), func(_ journal.Pos, rec []byte) error {
		if n == 0 {
			oldest = recordOldest(rec)
		}
		n++
		return nil
	})
	if err != nil {
		sp.log.Error("analytics: journal: scan", "err", err)
	}
	return n, oldest
}

// surveyed sets what survey found, unless appends or writes since made
// the journal's state known already.
func (sp *spool) surveyed(n int, oldest time.Time) {
	if sp.records < 0 {
		sp.records, sp.oldest = n, oldest
	}
	if n > 0 {
		sp.log.Info("analytics: journal: writing the counts an earlier run left", "records", n, "bytes", sp.j.Bytes())
	}
	sp.report()
}

// Append journals b (attempted: a Write of it was tried). At the cap it
// folds the oldest records, then drops the oldest, counting the visits
// dropped, until b fits.
func (sp *spool) Append(b *Batch, attempted bool) error {
	rec := appendBatch(appendRecordHeader(nil, 1), b, attempted)
	for try := 0; ; try++ {
		_, err := sp.j.Append(rec)
		if err == nil {
			if sp.records == 0 {
				sp.oldest = batchOldest(b)
			}
			if sp.records >= 0 { // else survey counts it
				sp.records++
			}
			sp.report()
			return nil
		}
		if !errors.Is(err, journal.ErrFull) || try > 16 {
			return fmt.Errorf("analytics: journal: %w", err)
		}
		if err := sp.makeRoom(int64(len(rec)), try); err != nil {
			return err
		}
	}
}

// makeRoom frees space for a record of n bytes: the first tries fold the
// oldest eighth of the journal into hours, then days; after that, and
// whenever a fold freed too little, the records of the oldest file are
// dropped.
func (sp *spool) makeRoom(n int64, try int) error {
	before := sp.j.Bytes()
	if try < 2 {
		level := sp.foldLevel(try)
		if err := sp.fold(level); err != nil {
			sp.log.Error("analytics: journal: fold failed", "err", err)
		} else if freed := before - sp.j.Bytes(); freed >= n {
			sp.log.Warn("analytics: journal full: oldest counts folded into coarser buckets",
				"step", rollup.FormatDuration(sp.plan.Tiers()[level].Step), "freed_bytes", freed, "journal_bytes", sp.j.Bytes())
			return nil
		}
	}
	return sp.dropOldest()
}

// foldLevel returns the tier the try'th fold puts counts in: the first
// whose step is at least an hour, then a day (the coarsest below the
// all-time tier at most).
func (sp *spool) foldLevel(try int) int {
	want := time.Hour
	if try > 0 {
		want = rollup.Day
	}
	tiers := sp.plan.Tiers()
	last := max(len(tiers)-2, 0) // not the all-time tier, the last one

	for i, t := range tiers[:last+1] {
		if t.Step >= want {
			return i
		}
	}
	return last
}

// fold replaces the oldest eighth of the journal (at least two records;
// its map of buckets is what folding costs in memory)
// by one record: the head record's batches as they are (a Write of them
// may have been tried: a store may hold part of one, and only the same
// batch again overwrites that part), then, per run of batches of one
// writer, one batch covering their Seqs with their counts in the buckets
// of tier level. Such counts reach the readers once the rollup has got
// past their bucket (NewReader reads a coarse tier only there): late, but
// not lost.
func (sp *spool) fold(level int) error {
	var upTo journal.Pos
	var seen int64
	n := 0
	chunk := max(sp.maxBytes/8, 1) // two segments (MaxBytes/16 each, at most 4 MiB): frees one whole at least
	err := sp.j.Scan(sp.j.Acked(), func(end journal.Pos, rec []byte) error {
		n++
		seen += int64(len(rec))
		upTo = end
		if n >= 2 && seen >= chunk {
			return errStopScan
		}
		return nil
	})
	if err != nil && err != errStopScan {
		return err
	}
	if n < 2 {
		return errors.New("nothing to fold")
	}
	folded := 0
	step := sp.plan.Tiers()[level].Step
	err = sp.j.Fold(upTo, func(recs func(yield func(rec []byte) bool)) ([]byte, error) {
		var head []Batch
		var runs []*foldRun
		var derr error
		i := 0
		recs(func(rec []byte) bool {
			bs, err := decodeRecord(rec)
			if err != nil {
				derr = err
				return false
			}
			for _, b := range bs {
				if i == 0 || b.attempted {
					head = append(head, b.b)
					continue
				}
				r := (*foldRun)(nil)
				if k := len(runs); k > 0 && runs[k-1].b.Writer == b.b.Writer {
					r = runs[k-1]
				} else {
					r = &foldRun{b: Batch{Writer: b.b.Writer, First: b.b.FirstSeq()}, counts: map[foldKey]Visits{}}
					runs = append(runs, r)
				}
				r.add(b.b, step)
			}
			i++
			folded++
			return true
		})
		if derr != nil {
			return nil, derr
		}
		out := appendRecordHeader(nil, len(head)+len(runs))
		for i := range head {
			out = appendBatch(out, &head[i], true)
		}
		for _, r := range runs {
			b := r.batch()
			out = appendBatch(out, &b, false)
		}
		return out, nil
	})
	if err != nil {
		return err
	}
	if sp.records >= 0 {
		sp.records = max(sp.records-folded+1, 1)
	}
	sp.rewrites++
	sp.report()
	return nil
}

type foldKey struct {
	key   string
	step  time.Duration
	start int64
}

// foldRun is consecutive batches of one writer folded into one.
type foldRun struct {
	b      Batch
	counts map[foldKey]Visits
	order  []foldKey
	dims   map[foldDimKey]*DimCount // counts of a value added up; the latest Cum
	uniqs  map[uniqKey]*hll.Sketch  // sketches of a link's day merged
}

// foldDimKey is a DimCount's identity in a fold: its generation too, since
// a store keeps a row per generation.
type foldDimKey struct {
	key   string
	dim   visitor.Dim
	day   int64
	value string
	gen   uint64
}

func (r *foldRun) add(b Batch, step time.Duration) {
	r.b.Seq = b.Seq
	r.b.At = b.At
	for _, c := range b.Counts {
		s := max(step, c.Step) // a count in a coarser tier stays there
		k := foldKey{c.Key, s, rollup.Align(c.Start, s).Unix()}
		v, ok := r.counts[k]
		if !ok {
			r.order = append(r.order, k)
		}
		r.counts[k] = v.Add(c.Visits)
	}
	for _, d := range b.Dims {
		k := foldDimKey{d.Key, d.Dim, d.Day.Unix(), d.Value, d.Gen}
		if r.dims == nil {
			r.dims = make(map[foldDimKey]*DimCount)
		}
		if c := r.dims[k]; c != nil {
			c.N += d.N
			c.Cum = max(c.Cum, d.Cum)
			continue
		}
		r.dims[k] = &d
	}
	for _, u := range b.Uniques {
		if r.uniqs == nil {
			r.uniqs = make(map[uniqKey]*hll.Sketch)
		}
		k := uniqKey{u.Key, unixDay(u.Day)}
		if r.uniqs[k] == nil {
			r.uniqs[k] = new(hll.Sketch)
		}
		r.uniqs[k].MergeBinary(u.Sketch) // decoded from the journal: checked by its CRC
	}
}

func (r *foldRun) batch() Batch {
	b := r.b
	b.Counts = make([]Count, 0, len(r.order))
	for _, k := range r.order {
		b.Counts = append(b.Counts, Count{Key: k.key, Step: k.step, Start: time.Unix(k.start, 0).UTC(), Visits: r.counts[k]})
	}
	slices.SortFunc(b.Counts, func(x, y Count) int {
		return cmp.Or(strings.Compare(x.Key, y.Key), cmp.Compare(x.Step, y.Step), x.Start.Compare(y.Start))
	})
	b.Dims = make([]DimCount, 0, len(r.dims))
	for _, d := range r.dims {
		b.Dims = append(b.Dims, *d)
	}
	slices.SortFunc(b.Dims, func(x, y DimCount) int { return cmp.Or(compareDims(x, y), cmp.Compare(x.Gen, y.Gen)) })
	p := pending{uniqs: r.uniqs}
	b.Uniques = p.uniqueSketches()
	return b
}

// dropOldest drops the records of the journal's oldest file (space comes
// back a whole file at a time: dropping less would free nothing),
// counting and logging their visits.
func (sp *spool) dropOldest() error {
	upTo, freed := sp.j.Reclaimable()
	if freed == 0 {
		return errors.New("analytics: journal: full and nothing to drop: max_bytes is smaller than one interval's batch")
	}
	var visits int64
	records := 0
	err := sp.j.Scan(sp.j.Acked(), func(end journal.Pos, rec []byte) error {
		if upTo.Less(end) {
			return errStopScan
		}
		records++
		var n int64
		if scanRecord(rec, AllLinks, recordScan{counts: func(_ time.Duration, _ time.Time, v Visits) { n += v.Human + v.Bot }}) == nil {
			visits += n
		}
		return nil
	})
	if err != nil && err != errStopScan {
		return fmt.Errorf("analytics: journal: %w", err)
	}
	if err := sp.j.Ack(upTo); err != nil {
		return fmt.Errorf("analytics: journal: %w", err)
	}
	if sp.records >= 0 {
		sp.records = max(sp.records-records, 0)
	}
	sp.oldest = time.Time{}
	sp.rewrites++
	sp.dropped += uint64(visits)
	sp.m.droppedVisits(visits)
	sp.report()
	sp.log.Error("analytics: journal full: oldest counts dropped", "visits", visits, "records", records,
		"freed_bytes", freed, "max_bytes", sp.maxBytes, "dropped_total", sp.dropped)
	return nil
}

// spoolHead is the journal's oldest record, read by head.
type spoolHead struct {
	found    bool
	end      journal.Pos
	batches  []interval
	rewrites uint64 // the spool's rewrites when the record was picked
}

// head reads the oldest record not acked. It reads the journal only (a
// Scan is safe with appends, acks and folds), so the Flusher calls it
// without its lock; rewrites is the spool's count of them then, which ack
// compares. A record that cannot be decoded is returned found, with the
// error.
func (sp *spool) head(rewrites uint64) (spoolHead, error) {
	h := spoolHead{rewrites: rewrites}
	var derr error
	err := sp.j.Scan(sp.j.Acked(), func(e journal.Pos, rec []byte) error {
		h.end, h.found = e, true
		h.batches, derr = decodeRecord(rec) // copies: rec is valid during the callback only
		return errStopScan
	})
	if err != nil && err != errStopScan {
		return h, fmt.Errorf("analytics: journal: %w", err)
	}
	return h, derr
}

// headUnusable handles a head that cannot be written: none (the journal is
// empty after all), or one that cannot be decoded, which is set aside, or
// it would stop every later write. It says whether more may wait. Called
// under the Flusher's lock.
func (sp *spool) headUnusable(h spoolHead, err error) (more bool, _ error) {
	if !h.found {
		if err != nil {
			return false, err
		}
		sp.records, sp.oldest = 0, time.Time{}
		sp.report()
		return false, nil
	}
	sp.log.Error("analytics: journal: record unreadable, skipped", "err", err)
	if aerr := sp.j.Ack(h.end); aerr != nil {
		return false, fmt.Errorf("analytics: journal: %w", aerr)
	}
	sp.records = max(sp.records-1, 0)
	sp.report()
	return true, nil
}

// ack acks the record head read, now written, unless a fold or a drop
// rewrote the journal's head since: it is then written again later (the
// store applies it once). Called under the Flusher's lock.
func (sp *spool) ack(h spoolHead) {
	if sp.rewrites != h.rewrites {
		return
	}
	if err := sp.j.Ack(h.end); err != nil {
		sp.log.Error("analytics: journal: ack failed; the record will be written again", "err", err)
		return
	}
	if sp.records > 0 {
		sp.records--
	}
	sp.oldest = time.Time{}
	sp.m.replayed(len(h.batches))
	sp.report()
}

// ackBatch acks the journal's head record when it is b alone: a batch
// journaled while its Write went on, which then succeeded. Called under
// the Flusher's lock.
func (sp *spool) ackBatch(b *Batch) {
	if !sp.waiting() {
		return
	}
	h, err := sp.head(sp.rewrites)
	if err != nil || !h.found || len(h.batches) != 1 {
		return
	}
	if hb := h.batches[0].b; hb.Writer != b.Writer || hb.Seq != b.Seq || hb.FirstSeq() != b.FirstSeq() {
		return
	}
	sp.ack(h)
}

// eachIn calls fn with every count of key in the records of the journal
// after from and up to to, streaming: what a Reader copied the bounds of
// under the Flusher's lock, scanned without it.
func (sp *spool) eachIn(from, to journal.Pos, key string, fn func(step time.Duration, start time.Time, v Visits)) error {
	err := sp.j.Scan(from, func(end journal.Pos, rec []byte) error {
		if to.Less(end) {
			return errStopScan
		}
		return scanRecord(rec, key, recordScan{counts: fn})
	})
	if err == errStopScan {
		return nil
	}
	return err
}

// Close closes the journal's files.
func (sp *spool) Close() error {
	if sp == nil {
		return nil
	}
	return sp.j.Close()
}

// batchOldest returns the earliest bucket start of b's counts.
func batchOldest(b *Batch) time.Time {
	var t time.Time
	for _, c := range b.Counts {
		if t.IsZero() || c.Start.Before(t) {
			t = c.Start
		}
	}
	return t
}

// recordOldest returns the earliest bucket start of a record's counts.
func recordOldest(rec []byte) time.Time {
	bs, err := decodeRecord(rec)
	if err != nil || len(bs) == 0 {
		return time.Time{}
	}
	return batchOldest(&bs[0].b)
}

// JournalNewest returns the time (Batch.At) of the newest batch that the
// journal in dir holds for the store, zero when it holds none. A Flusher
// stamps a batch before it takes the recorder's counts, and journals its
// batches in order: every visit recorded before that time is in the
// journal, in the store or counted dropped, and what a crash lost was
// recorded after it. It opens the journal, recovering it as the next
// Flusher would, so it fails while a process has it open.
func JournalNewest(dir string) (time.Time, error) {
	j, err := journal.Open(dir, journal.Options{})
	if err != nil {
		return time.Time{}, fmt.Errorf("analytics: journal: %w", err)
	}
	defer j.Close()
	var newest time.Time
	err = j.Scan(j.Acked(), func(_ journal.Pos, rec []byte) error {
		bs, err := decodeRecord(rec)
		for _, iv := range bs {
			if iv.b.At.After(newest) {
				newest = iv.b.At
			}
		}
		return err
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("analytics: journal: %w", err)
	}
	return newest, nil
}

// A record is a list of batches:
//
//	'L' 'J' 1                       magic and version
//	uvarint n                       batches
//	per batch: byte flags (1: attempted), uvarint len(writer) writer,
//	  uvarint first, uvarint seq, varint At (unix ns), uvarint counts,
//	  per count: uvarint len(key) key, uvarint step (s), varint start (unix s),
//	  varint human, varint bot, (version 4) uvarint n, n varints: the
//	  first n of Visits.Other (n is 0 for a count without any)
//	  (version 2) uvarint dims, per dim: uvarint len(key) key (0 and no
//	  bytes: the key of the dim before), byte dim,
//	  varint day (unix days), uvarint len(value) value, varint n,
//	  varint cum, uvarint gen
//	  (version 3) uvarint uniques, per sketch: uvarint len(key) key,
//	  varint day (unix days), uvarint len(sketch) sketch
//
// Active entries and marks are not kept: they are worked out when the
// batch is written. Records of versions 1 (without dims), 2 (without
// uniques) and 3 (without Other) are read too.
const recordVersion = 4

func appendRecordHeader(b []byte, n int) []byte {
	b = append(b, 'L', 'J', recordVersion)
	return binary.AppendUvarint(b, uint64(n))
}

func appendBatch(out []byte, b *Batch, attempted bool) []byte {
	flags := byte(0)
	if attempted {
		flags = 1
	}
	out = append(out, flags)
	out = binary.AppendUvarint(out, uint64(len(b.Writer)))
	out = append(out, b.Writer...)
	out = binary.AppendUvarint(out, b.First)
	out = binary.AppendUvarint(out, b.Seq)
	out = binary.AppendVarint(out, b.At.UnixNano())
	out = binary.AppendUvarint(out, uint64(len(b.Counts)))
	for _, c := range b.Counts {
		out = binary.AppendUvarint(out, uint64(len(c.Key)))
		out = append(out, c.Key...)
		out = binary.AppendUvarint(out, uint64(c.Step/time.Second))
		out = binary.AppendVarint(out, c.Start.Unix())
		out = appendRecordVisits(out, c.Visits)
	}
	out = binary.AppendUvarint(out, uint64(len(b.Dims)))
	prev := ""
	for i, d := range b.Dims {
		if i > 0 && d.Key == prev {
			out = append(out, 0) // the key of the count before (no key is empty)
		} else {
			out = binary.AppendUvarint(out, uint64(len(d.Key)))
			out = append(out, d.Key...)
		}
		prev = d.Key
		out = append(out, byte(d.Dim))
		out = binary.AppendVarint(out, int64(unixDay(d.Day)))
		out = binary.AppendUvarint(out, uint64(len(d.Value)))
		out = append(out, d.Value...)
		out = binary.AppendVarint(out, d.N)
		out = binary.AppendVarint(out, d.Cum)
		out = binary.AppendUvarint(out, d.Gen)
	}
	out = binary.AppendUvarint(out, uint64(len(b.Uniques)))
	for _, u := range b.Uniques {
		out = binary.AppendUvarint(out, uint64(len(u.Key)))
		out = append(out, u.Key...)
		out = binary.AppendVarint(out, int64(unixDay(u.Day)))
		out = binary.AppendUvarint(out, uint64(len(u.Sketch)))
		out = append(out, u.Sketch...)
	}
	return out
}

// appendRecordVisits appends v as a record holds it: human, bot, and the
// classes of Other up to the last that has visits (one byte more than a
// version 3 count when there are none).
func appendRecordVisits(out []byte, v Visits) []byte {
	out = binary.AppendVarint(out, v.Human)
	out = binary.AppendVarint(out, v.Bot)
	n := len(v.Other)
	for n > 0 && v.Other[n-1] == 0 {
		n--
	}
	out = binary.AppendUvarint(out, uint64(n))
	for _, o := range v.Other[:n] {
		out = binary.AppendVarint(out, o)
	}
	return out
}

// visits reads what appendRecordVisits wrote (human and bot only before
// version 4).
func (r *recordReader) visits() Visits {
	v := Visits{Human: r.varint(), Bot: r.varint()}
	if r.version < 4 || r.err != nil {
		return v
	}
	n := r.uvarint()
	if n > uint64(len(v.Other)) {
		r.err = errRecord
		return v
	}
	for i := range n {
		v.Other[i] = r.varint()
	}
	return v
}

var errRecord = errors.New("analytics: journal: bad record")

// recordReader reads a record's fields.
type recordReader struct {
	b       []byte
	err     error
	version byte
}

func (r *recordReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errRecord
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recordReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errRecord
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recordReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)) {
		r.err = errRecord
		return nil
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

func (r *recordReader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.err = errRecord
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *recordReader) header() int {
	if len(r.b) < 3 || r.b[0] != 'L' || r.b[1] != 'J' || r.b[2] < 1 || r.b[2] > recordVersion {
		r.err = errRecord
		return 0
	}
	r.version = r.b[2]
	r.b = r.b[3:]
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.err = errRecord
	}
	return int(n)
}

// batchHeader reads a batch up to its counts and returns how many.
func (r *recordReader) batchHeader(iv *interval) int {
	iv.attempted = r.byte()&1 != 0
	iv.b.Writer = string(r.bytes())
	iv.b.First = r.uvarint()
	iv.b.Seq = r.uvarint()
	iv.b.At = time.Unix(0, r.varint()).UTC()
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.err = errRecord
	}
	return int(n)
}

// decodeRecord returns the batches of rec, copied.
func decodeRecord(rec []byte) ([]interval, error) {
	r := &recordReader{b: rec}
	nb := r.header()
	var out []interval
	for range nb {
		var b interval
		nc := r.batchHeader(&b)
		if r.err != nil {
			break
		}
		b.b.Counts = make([]Count, 0, nc)
		for range nc {
			key := r.bytes()
			step := time.Duration(r.uvarint()) * time.Second
			start := time.Unix(r.varint(), 0).UTC()
			v := r.visits()
			if r.err != nil {
				break
			}
			b.b.Counts = append(b.b.Counts, Count{Key: string(key), Step: step, Start: start, Visits: v})
		}
		r.dims(func(d DimCount) { b.b.Dims = append(b.b.Dims, d) }, "")
		r.uniques(func(u UniqueSketch) { b.b.Uniques = append(b.b.Uniques, u) }, "")
		out = append(out, b)
	}
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}

// recordScan says what scanRecord passes on of one key's data in a record;
// a nil func skips that part.
type recordScan struct {
	counts  func(step time.Duration, start time.Time, v Visits)
	dims    func(DimCount)
	uniques func(UniqueSketch)
}

// scanRecord calls the funcs of sc with key's counts, breakdown values and
// sketches in rec, without copying the others.
func scanRecord(rec []byte, key string, sc recordScan) error {
	r := &recordReader{b: rec}
	nb := r.header()
	var b interval
	for range nb {
		nc := r.batchHeader(&b)
		for range nc {
			k := r.bytes()
			step := r.uvarint()
			start := r.varint()
			v := r.visits()
			if r.err != nil {
				return r.err
			}
			if sc.counts != nil && string(k) == key {
				sc.counts(time.Duration(step)*time.Second, time.Unix(start, 0).UTC(), v)
			}
		}
		r.dims(sc.dims, key)
		r.uniques(sc.uniques, key)
		if r.err != nil {
			return r.err
		}
	}
	return r.err
}

// uniques reads a batch's sketches (none before version 3), calling fn
// (when not nil) for those of key, or of every key when key is "", with
// copies.
func (r *recordReader) uniques(fn func(UniqueSketch), key string) {
	if r.version < 3 || r.err != nil {
		return
	}
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.err = errRecord
		return
	}
	for range n {
		k := r.bytes()
		day := r.varint()
		sk := r.bytes()
		if r.err != nil {
			return
		}
		if fn != nil && (key == "" || string(k) == key) {
			fn(UniqueSketch{Key: string(k), Day: time.Unix(day*86400, 0).UTC(), Sketch: slices.Clone(sk)})
		}
	}
}

// dims reads a batch's dimension counts (none in a version 1 record),
// calling fn (when not nil) for those of key, or of every key when key is
// "". The values passed are copied only when fn keeps them: a DimCount
// passed for a given key holds its own strings.
func (r *recordReader) dims(fn func(DimCount), key string) {
	if r.version < 2 || r.err != nil {
		return
	}
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.err = errRecord
		return
	}
	var prev []byte
	for range n {
		k := r.bytes()
		if len(k) == 0 {
			k = prev // the key of the count before
		}
		if len(k) == 0 {
			r.err = errRecord
			return
		}
		prev = k
		dim := visitor.Dim(r.byte())
		day := r.varint()
		v := r.bytes()
		cnt, cum, gen := r.varint(), r.varint(), r.uvarint()
		if r.err != nil {
			return
		}
		if !ValidDim(dim) {
			r.err = errRecord
			return
		}
		if fn != nil && (key == "" || string(k) == key) {
			fn(DimCount{Key: string(k), Day: time.Unix(day*86400, 0).UTC(), Dim: dim, Value: string(v), N: cnt, Cum: cum, Gen: gen})
		}
	}
}
