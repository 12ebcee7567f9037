package journal_test

import (
	"fmt"
	"testing"

	"github.com/linkgate/linkgate/journal"
)

// BenchmarkAppend appends records of 4 KiB and 256 KiB, each fdatasynced
// before Append returns: what the flusher pays per interval while the store
// fails. It measures the disk under the temporary directory.
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{4 << 10, 256 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			j, err := journal.Open(b.TempDir(), journal.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			rec := make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := j.Append(rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkScan scans a 64 MiB journal of 4 KiB or 256 KiB records (read from the page
// cache after the first pass): the replay's reading cost, in MB/s.
func BenchmarkScan(b *testing.B) {
	for _, size := range []int{4 << 10, 256 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			dir := b.TempDir()
			j, err := journal.Open(dir, journal.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			journal.SetNoSync(j)
			rec := make([]byte, size)
			const total = 64 << 20
			for range total / size {
				if _, err := j.Append(rec); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(total)
			b.ReportAllocs()
			for b.Loop() {
				var n int
				if err := j.Scan(journal.Pos{}, func(_ journal.Pos, rec []byte) error {
					n += len(rec)
					return nil
				}); err != nil || n != total {
					b.Fatalf("Scan = %v after %d bytes, want %d", err, n, total)
				}
			}
		})
	}
}

// BenchmarkOpen opens a 64 MiB journal of 4 KiB records: the recovery
// check of every record's CRC that runs before anything can be scanned.
func BenchmarkOpen(b *testing.B) {
	dir := b.TempDir()
	j, err := journal.Open(dir, journal.Options{})
	if err != nil {
		b.Fatal(err)
	}
	journal.SetNoSync(j)
	rec := make([]byte, 4<<10)
	const total = 64 << 20
	for range total / len(rec) {
		if _, err := j.Append(rec); err != nil {
			b.Fatal(err)
		}
	}
	j.Close()
	b.SetBytes(total)
	b.ReportAllocs()
	for b.Loop() {
		j, err := journal.Open(dir, journal.Options{})
		if err != nil {
			b.Fatal(err)
		}
		j.Close()
	}
}
