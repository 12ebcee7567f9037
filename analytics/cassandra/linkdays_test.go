package cassandra

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/gocql/gocql"
)

// The link_days cells bound without gocql's own marshalling read back
// with gocql's unmarshalling as the map and set they stand for.
func TestCellsMarshalAsCQL(t *testing.T) {
	const proto = 4
	dims := dimCells{{dim: 3, value: "mobile", count: 7}, {dim: 0, value: "", count: 1}, {dim: 13, value: "https://ex.am/plé", count: 1 << 40}}
	b, err := dims.MarshalCQL(nil)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]int64
	mapType := gocql.CollectionType{NativeType: gocql.NewNativeType(proto, gocql.TypeMap, ""),
		Key: gocql.NewNativeType(proto, gocql.TypeVarchar, ""), Elem: gocql.NewNativeType(proto, gocql.TypeBigInt, "")}
	if err := gocql.Unmarshal(mapType, b, &m); err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"3:mobile": 7, "0:": 1, "13:https://ex.am/plé": 1 << 40}; !maps.Equal(m, want) {
		t.Errorf("dims read back as %v, want %v", m, want)
	}

	regs := regCells{{reg: 0, rho: 1}, {reg: 16383, rho: 51}, {reg: 200, rho: 64}}
	if b, err = regs.MarshalCQL(nil); err != nil {
		t.Fatal(err)
	}
	var set []int
	setType := gocql.CollectionType{NativeType: gocql.NewNativeType(proto, gocql.TypeSet, ""), Elem: gocql.NewNativeType(proto, gocql.TypeInt, "")}
	if err := gocql.Unmarshal(setType, b, &set); err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 16383<<8 | 51, 200<<8 | 64}; !slices.Equal(set, want) {
		t.Errorf("regs read back as %v, want %v", set, want)
	}
	for _, empty := range []gocql.Marshaler{dimCells(nil), regCells(nil)} {
		if b, _ := empty.MarshalCQL(nil); !slices.Equal(b, []byte{0, 0, 0, 0}) {
			t.Errorf("%T(nil) marshals as %v, want an empty collection", empty, b)
		}
	}
}

// A part of one day and generation is one row holding the part's own
// breakdowns and registers; one of two generations is two rows, the
// day's registers in the first of the day with their TTL, or in a row of
// their own.
func TestLinkPartRows(t *testing.T) {
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	a, b := gocql.UUID{1}, gocql.UUID{2}
	one := linkPart{key: "k",
		dims:   []dimRow{{day: day, writer: a, ttl: 9, ts: 5, dim: 1, value: "x"}, {day: day, writer: a, ttl: 9, ts: 5, dim: 2, value: "y"}},
		regs:   []uniqRow{{day: day, ttl: 9, reg: 1, rho: 2}, {day: day, ttl: 9, reg: 3, rho: 4}},
		visits: []topRow{{day: day, writer: a, ttl: 9, ts: 5, count: 8}}}
	rows := one.rows()
	if len(rows) != 1 || rows[0].visits != 8 || len(rows[0].dims) != 2 || len(rows[0].regs) != 2 {
		t.Fatalf("one generation: %+v", rows)
	}
	if &rows[0].dims[0] != &one.dims[0] || &rows[0].regs[0] != &one.regs[0] {
		t.Error("one row copies the part's breakdowns or registers")
	}

	two := linkPart{key: "k",
		dims: []dimRow{{day: day, writer: a, ttl: 9, ts: 5, dim: 1, value: "x"}, {day: day, writer: b, ttl: 9, ts: 6, dim: 1, value: "x"}, {day: day, writer: a, ttl: 9, ts: 5, dim: 2, value: "z"}},
		regs: []uniqRow{{day: day, ttl: 9, reg: 1, rho: 2}, {day: day, ttl: 7, ts: 6, reg: 3, rho: 4}}}
	rows = two.rows()
	if len(rows) != 3 {
		t.Fatalf("two generations and a TTL of their own: %d rows, want 3: %+v", len(rows), rows)
	}
	if r := rows[0]; r.writer != a || len(r.dims) != 2 || r.dims[1].value != "z" || len(r.regs) != 1 || r.regs[0].reg != 1 {
		t.Errorf("first generation's row: %+v", r)
	}
	if r := rows[1]; r.writer != b || len(r.dims) != 1 || r.ts != 6 || len(r.regs) != 0 {
		t.Errorf("second generation's row: %+v", r)
	}
	if r := rows[2]; r.writer != regsWriter || r.ttl != 7 || len(r.dims) != 0 || len(r.regs) != 1 || r.regs[0].reg != 3 {
		t.Errorf("the registers' own row: %+v", r)
	}
}
