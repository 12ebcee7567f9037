package cassandra

// batchArgs hands out the bound values of a batch's rows. gocql takes each
// row's values as a []any, so every value is boxed on the heap; the rows of
// one batch mostly share theirs (a partition's shard and bucket, the
// batch's writer, TTL and timestamp, a minute's start), so a value equal to
// the one the previous row bound at the same position is boxed once, and
// the rows' lists are cut from one array. At 100,000 links a flush binds
// about two million values; each box was an allocation, and the
// collector's work follows the allocations.
type batchArgs struct {
	free []any   // the rest of the array lists are cut from
	last [16]any // the value last boxed at each position
}

// newBatchArgs returns a batchArgs with room for rows lists of n values.
func newBatchArgs(rows, n int) *batchArgs {
	return &batchArgs{free: make([]any, 0, rows*n)}
}

// list returns an empty list with room for n values.
func (a *batchArgs) list(n int) []any {
	if cap(a.free)-len(a.free) < n {
		a.free = make([]any, 0, 64*n)
	}
	l := a.free[len(a.free) : len(a.free) : len(a.free)+n]
	a.free = a.free[:len(a.free)+n]
	return l
}

// shared returns v boxed, the box of the previous value at position pos
// when that was equal.
func shared[T comparable](a *batchArgs, pos int, v T) any {
	if b, ok := a.last[pos].(T); ok && b == v {
		return a.last[pos]
	}
	a.last[pos] = v
	return a.last[pos]
}
