package pebblestore

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/cockroachdb/pebble"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

// appendVisits appends v's value: varints human and bot, then those of
// Other up to the last that has visits, so that an all-human or
// declared-bot value is what it was before classes were counted (and a
// value of then reads as its bots all declared).
func appendVisits(b []byte, v analytics.Visits) []byte {
	b = binary.AppendVarint(binary.AppendVarint(b, v.Human), v.Bot)
	n := len(v.Other)
	for n > 0 && v.Other[n-1] == 0 {
		n--
	}
	for _, o := range v.Other[:n] {
		b = binary.AppendVarint(b, o)
	}
	return b
}

func decodeVisits(b []byte) (analytics.Visits, error) {
	var v analytics.Visits
	fields := 0
	for len(b) > 0 {
		x, n := binary.Varint(b)
		if n <= 0 || fields == 2+len(v.Other) {
			return analytics.Visits{}, fmt.Errorf("bad visits value %x", b)
		}
		switch fields {
		case 0:
			v.Human = x
		case 1:
			v.Bot = x
		default:
			v.Other[fields-2] = x
		}
		fields++
		b = b[n:]
	}
	if fields < 2 {
		return analytics.Visits{}, fmt.Errorf("bad visits value %x", b)
	}
	return v, nil
}

// merger adds visits. Its name is stored in the database: a different
// name, or an encoding under the same name that does not read the values
// written before, cannot open it. (Values with classes, written since
// they are counted, are longer: a release from before reads them as bad
// values.)
//
// Every read of a bucket goes through it (a bucket's value is a merge
// operand even when there is only one), so adders are pooled and Finish
// returns the adder's own buffer, given back by Pebble through Close.
var merger = &pebble.Merger{
	Name: "linkgate.visits.v1",
	Merge: func(_, value []byte) (pebble.ValueMerger, error) {
		v, err := decodeVisits(value)
		if err != nil {
			return nil, err
		}
		a := adders.Get().(*adder)
		a.v = v
		return a, nil
	},
}

var adders = sync.Pool{New: func() any { return new(adder) }}

// adder is a pebble.ValueMerger that sums visits; addition does not care
// about the order of operands.
type adder struct {
	v   analytics.Visits
	buf [(2 + rollup.NumOther) * binary.MaxVarintLen64]byte
}

func (a *adder) MergeNewer(value []byte) error { return a.add(value) }

func (a *adder) MergeOlder(value []byte) error { return a.add(value) }

func (a *adder) add(value []byte) error {
	v, err := decodeVisits(value)
	if err != nil {
		return err
	}
	a.v = a.v.Add(v)
	return nil
}

// Finish returns the sum in a's buffer and a as the io.Closer that frees
// it.
func (a *adder) Finish(bool) ([]byte, io.Closer, error) {
	return appendVisits(a.buf[:0], a.v), a, nil
}

// Close puts a back in the pool once Pebble is done with its result.
func (a *adder) Close() error {
	adders.Put(a)
	return nil
}
