package journal_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/linkgate/linkgate/journal"
)

// TestScanMemory builds a journal much larger than the memory it may use
// and checks that Open and Scan hold no more than about the largest record
// plus their buffers, whatever the journal's size: the heap in use is
// sampled during the scan, and everything Open and Scan allocate is
// counted. 16 MiB always; 200 MiB unless -short.
func TestScanMemory(t *testing.T) {
	sizes := []int64{16 << 20}
	if !testing.Short() {
		sizes = append(sizes, 200<<20)
	} else {
		t.Log("-short: the 200 MiB journal is skipped")
	}
	for _, size := range sizes {
		t.Run(fmt.Sprintf("%dMiB", size>>20), func(t *testing.T) { scanMemory(t, size) })
	}
}

func scanMemory(t *testing.T, size int64) {
	const maxRec = 64 << 10
	// Whatever the journal's size: the largest record (Scan's buffer),
	// the 64 KiB read buffers of Open and Scan, a few files and slices.
	const bound = maxRec + 1<<20
	dir := t.TempDir()
	j, err := journal.Open(dir, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	journal.SetNoSync(j) // building 200 MiB record by record with fdatasync would take minutes
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, maxRec)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	var written, records int64
	for written < size {
		n := rng.IntN(maxRec) + 1
		if _, err := j.Append(buf[:n]); err != nil {
			t.Fatal(err)
		}
		written += int64(n)
		records++
	}
	j.Close()

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	j, err = journal.Open(dir, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	runtime.ReadMemStats(&after)
	if got := j.Recovered().Records; got != records {
		t.Fatalf("Open found %d records, want %d", got, records)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > bound {
		t.Errorf("Open of a %d MiB journal allocated %d bytes, want at most %d", size>>20, alloc, bound)
	} else {
		t.Logf("Open of %d MiB (%d records): %d bytes allocated", written>>20, records, alloc)
	}

	runtime.GC()
	runtime.ReadMemStats(&before)
	var (
		peak    uint64
		scanned int64
		n       int64
		ms      runtime.MemStats
	)
	err = j.Scan(journal.Pos{}, func(_ journal.Pos, rec []byte) error {
		scanned += int64(len(rec))
		if n++; n%64 == 0 {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if scanned != written || n != records {
		t.Fatalf("scanned %d bytes in %d records, wrote %d in %d", scanned, n, written, records)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > bound {
		t.Errorf("Scan of a %d MiB journal allocated %d bytes, want at most %d", size>>20, alloc, bound)
	}
	if grew := int64(peak) - int64(before.HeapAlloc); grew > bound {
		t.Errorf("heap grew by %d bytes during Scan of a %d MiB journal, want at most %d", grew, size>>20, bound)
	}
	t.Logf("Scan of %d MiB: %d bytes allocated, heap at most %d bytes above its start", written>>20, after.TotalAlloc-before.TotalAlloc, int64(peak)-int64(before.HeapAlloc))
}
