package cassandra

import (
	"context"
	"time"
)

// The erasures table on the fake cluster: a row per name, the larger
// epoch winning (USING TIMESTAMP epoch); a partition deleted as a whole.

func (db *fakeDB) readErasures(ctx context.Context) ([]erasureRow, error) {
	var out []erasureRow
	err := db.do(ctx, "erasures", func() {
		for _, r := range db.erasures {
			out = append(out, r)
		}
	})
	return out, err
}

func (db *fakeDB) writeErasure(ctx context.Context, r erasureRow) error {
	return db.do(ctx, "erasure", func() {
		if db.erasures == nil {
			db.erasures = map[string]erasureRow{}
		}
		if old, ok := db.erasures[r.name]; !ok || old.epoch <= r.epoch {
			db.erasures[r.name] = r
		}
	})
}

func (db *fakeDB) deletePartition(ctx context.Context, table, key string, bucket time.Time) error {
	return db.do(ctx, "delete", func() {
		switch table {
		case "rollup_marks":
			delete(db.marks, key)
		case "link_days":
			delete(db.dims, fakeDimPart{key, bucket.UnixMicro()})
			delete(db.uniqs, fakeDimPart{key, bucket.UnixMicro()})
		default:
			delete(db.points, fakePartition{table, key, bucket.UnixMicro()})
		}
	})
}

func (nopBackend) readErasures(context.Context) ([]erasureRow, error)               { return nil, nil }
func (nopBackend) writeErasure(context.Context, erasureRow) error                   { return nil }
func (nopBackend) deletePartition(context.Context, string, string, time.Time) error { return nil }
