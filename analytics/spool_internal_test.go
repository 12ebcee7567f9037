package analytics

import (
	"encoding/binary"
	"reflect"
	"testing"
	"time"
)

// TestRecordClasses writes a batch whose counts split their non-human
// visits by class, and one all human: both read back as written, and the
// all-human count costs one byte more than it did in a version 3 record.
// A version 3 record (no classes) still reads, its bots as declared bots.
func TestRecordClasses(t *testing.T) {
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	b := Batch{Writer: "w", Seq: 7, At: at, Counts: []Count{
		{Key: "a", Step: time.Minute, Start: at, Visits: Visits{Human: 3, Bot: 9, Other: [4]int64{2, 0, 4, 0}}},
		{Key: "b", Step: time.Minute, Start: at, Visits: Visits{Human: 5}},
	}}
	rec := appendBatch(appendRecordHeader(nil, 1), &b, false)
	got, err := decodeRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !reflect.DeepEqual(got[0].b.Counts, b.Counts) {
		t.Fatalf("read back %+v, want %+v", got, b.Counts)
	}
	if n := len(appendRecordVisits(nil, Visits{Human: 5})); n != 3 {
		t.Errorf("an all-human count takes %d bytes, want 3 (human, bot, no classes)", n)
	}
	var seen []Visits
	if err := scanRecord(rec, "a", recordScan{counts: func(_ time.Duration, _ time.Time, v Visits) { seen = append(seen, v) }}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0] != b.Counts[0].Visits {
		t.Errorf("scanned %+v, want %+v", seen, b.Counts[0].Visits)
	}

	// A version 3 record, as the previous release wrote it.
	v3 := append([]byte{'L', 'J', 3}, 1, 0, 1, 'w', 0, 7)
	v3 = binary.AppendVarint(v3, at.UnixNano())
	v3 = append(v3, 1, 1, 'a', 60)
	v3 = binary.AppendVarint(v3, at.Unix())
	v3 = binary.AppendVarint(binary.AppendVarint(v3, 3), 9)
	v3 = append(v3, 0, 0) // no dims, no sketches
	got, err = decodeRecord(v3)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].b.Counts) != 1 || got[0].b.Counts[0].Visits != (Visits{Human: 3, Bot: 9}) {
		t.Fatalf("version 3 read as %+v", got)
	}
	if d := got[0].b.Counts[0].Declared(); d != 9 {
		t.Errorf("a version 3 count's declared bots: %d, want 9", d)
	}

	// A count claiming more classes than there are is refused.
	bad := append(appendRecordHeader(nil, 1), 0, 1, 'w', 0, 7)
	bad = binary.AppendVarint(bad, at.UnixNano())
	bad = append(bad, 1, 1, 'a', 60)
	bad = binary.AppendVarint(bad, at.Unix())
	bad = append(binary.AppendVarint(binary.AppendVarint(bad, 3), 9), 5, 1, 1, 1, 1, 1, 0, 0)
	if _, err := decodeRecord(bad); err == nil {
		t.Error("a count of 5 classes was read")
	}
}
