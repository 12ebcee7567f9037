package cassandra

import (
	"fmt"
	"testing"
	"time"

	"github.com/linkgate/linkgate/rollup"
)

// TestByPartition groups rows into statements: a partition of more than
// packBytes alone, in statements of up to partitionBytes; small
// partitions together up to packBytes; every row once, a partition's in
// the order they came.
func TestByPartition(t *testing.T) {
	type row struct {
		part, size, at int
	}
	var rows []row
	for i := range 100 { // partition 0: 100 rows of 1 KB, interleaved with the small ones
		rows = append(rows, row{0, 1 << 10, len(rows)})
		if i < 10 {
			rows = append(rows, row{1 + i, 1 << 10, len(rows)}) // ten partitions of 1 KB
		}
	}
	groups := byPartition(rows, func(r row) int { return r.part }, func(r row) int { return r.size })
	seen := 0
	var big, small []int  // statements' sizes
	last := map[int]int{} // each partition's last row seen
	for _, g := range groups {
		n, parts := 0, map[int]bool{}
		for _, r := range g {
			n += r.size
			parts[r.part] = true
			if at, ok := last[r.part]; ok && at > r.at {
				t.Errorf("partition %d: row %d after row %d", r.part, r.at, at)
			}
			last[r.part] = r.at
		}
		seen += len(g)
		switch {
		case parts[0] && len(parts) > 1:
			t.Errorf("a statement of the large partition holds others: %v", parts)
		case parts[0]:
			big = append(big, n)
		default:
			small = append(small, n)
		}
	}
	if seen != len(rows) {
		t.Errorf("%d rows in statements, want %d", seen, len(rows))
	}
	if want := []int{32 << 10, 32 << 10, 32 << 10, 4 << 10}; fmt.Sprint(big) != fmt.Sprint(want) {
		t.Errorf("the large partition in statements of %v bytes, want %v", big, want)
	}
	if want := []int{4 << 10, 4 << 10, 2 << 10}; fmt.Sprint(small) != fmt.Sprint(want) {
		t.Errorf("the small partitions in statements of %v bytes, want %v", small, want)
	}
}

// TestShardSpans: every unsharded partition of a tier is a whole number
// of its sharded ones, and of link_days, of 60 buckets at most.
func TestShardSpans(t *testing.T) {
	for _, step := range []time.Duration{time.Minute, 5 * time.Minute, time.Hour, rollup.Day, rollup.Week} {
		span := shardSpan(step)
		if whole := partitionSpan(step); whole%span != 0 || span%step != 0 || span/step > 60 {
			t.Errorf("step %v: sharded span %v in a partition of %v", step, span, whole)
		}
	}
	if shardSpan(time.Minute) != time.Hour {
		t.Errorf("a sharded partition of minutes holds %v, want an hour", shardSpan(time.Minute))
	}
	if dimSpan%linkDaysShardSpan != 0 || linkDaysShardSpan != 61*rollup.Day {
		t.Errorf("link_days_by_shard holds %v of link_days' %v", linkDaysShardSpan, dimSpan)
	}
}
