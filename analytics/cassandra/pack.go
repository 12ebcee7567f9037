package cassandra

// Statements of several rows
//
// A flush sends few kinds of rows, many of each: a count per link and
// minute, a link's breakdown values and sketch registers (one partition
// of the dims and uniques tables, which share their key), Active entries
// and top-list rows (a few partitions of many rows each). Cassandra parses,
// checks, routes and answers a statement once whatever it holds, so the
// Store sends each partition's rows as one statement: the Active entries,
// which are keys only, an UPDATE of the keys IN a list; the others an
// unlogged batch (one mutation on each replica, atomic and isolated there,
// no batch log: its rows only ever overwrite themselves, so a retry is
// safe), and the rows of several small partitions together, in an
// unlogged batch across partitions (each partition still one mutation;
// the coordinator forwards it to its replicas). Cassandra measures a batch across partitions by its data
// (PartitionUpdate.dataSize: each row's clustering values, and each cell's
// value plus 16 bytes for its timestamp, TTL and expiry), logs a warning
// over batch_size_warn_threshold_in_kb (5 KB by default) and refuses it
// over batch_size_fail_threshold_in_kb (50 KB): such a statement holds
// partitions up to packBytes of data. It never measures a batch of one
// partition: a larger partition goes alone, up to maxPartitionRows rows a
// statement. (It also logs, at most once a minute, that an unlogged batch
// covers more than 10 partitions.)

const (
	// packBytes bounds the data of a statement of several partitions,
	// under the 5 KB warning with room for the estimate's error.
	packBytes = 4 << 10
	// maxPartitionRows bounds the rows of a statement of one partition,
	// so that no statement holds a replica long.
	maxPartitionRows = 500
	// partitionBytes bounds the data of a statement of one partition of
	// a sharded table (shards.go): about 100 links' link_days rows, or
	// 450 counts.
	partitionBytes = 32 << 10
)

// Data sizes of rows as Cassandra measures them (see above): clustering
// values, then each regular cell's value plus 16 bytes.
const (
	pointBytes   = 8 + 16 + 2*(16+8) // start, writer; human, bot
	classBytes   = 4 * (16 + 8)      // preview, scanner, prefetch, internal, when written
	linkDayBytes = 8 + 16            // a link_days row: day, writer
	dimBytes     = 2 + 16 + 8        // a breakdown cell: its key "dim:" (and the value's bytes), 16, its count
	uniqBytes    = 16 + 4            // a register's element
	visitsBytes  = 16 + 8            // a link_days row's visits cell
)

// pointSize is the data of r as Cassandra measures it.
func pointSize(r pointRow) int {
	if r.v.Split() {
		return pointBytes + classBytes
	}
	return pointBytes
}

// pack groups items into statements: consecutive items whose sizes add up
// to limit at most go together; an item larger than that goes alone.
// Each group is one statement.
func pack[T any](items []T, size func(T) int, limit int) [][]T {
	var out [][]T
	from, bytes := 0, 0
	for i, it := range items {
		n := size(it)
		if i > from && bytes+n > limit {
			out = append(out, items[from:i:i])
			from, bytes = i, 0
		}
		bytes += n
	}
	if from < len(items) {
		out = append(out, items[from:len(items):len(items)])
	}
	return out
}

// chunks cuts rows of one partition into statements of maxPartitionRows.
func chunks[T any](rows []T) [][]T {
	var out [][]T
	for len(rows) > 0 {
		n := min(len(rows), maxPartitionRows)
		out = append(out, rows[:n:n])
		rows = rows[n:]
	}
	return out
}
