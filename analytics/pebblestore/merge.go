package pebblestore

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/cockroachdb/pebble"

	"github.com/linkgate/linkgate/analytics"
)

func appendVisits(b []byte, v analytics.Visits) []byte {
	return binary.AppendVarint(binary.AppendVarint(b, v.Human), v.Bot)
}

func decodeVisits(b []byte) (analytics.Visits, error) {
	h, n := binary.Varint(b)
	if n <= 0 {
		return analytics.Visits{}, fmt.Errorf("bad visits value %x", b)
	}
	bot, m := binary.Varint(b[n:])
	if m <= 0 || n+m != len(b) {
		return analytics.Visits{}, fmt.Errorf("bad visits value %x", b)
	}
	return analytics.Visits{Human: h, Bot: bot}, nil
}

// merger adds visits. Its name is stored in the database: a different
// name, or a different encoding under the same name, cannot open it.
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
	buf [2 * binary.MaxVarintLen64]byte
}

func (a *adder) MergeNewer(value []byte) error { return a.add(value) }

func (a *adder) MergeOlder(value []byte) error { return a.add(value) }

func (a *adder) add(value []byte) error {
	v, err := decodeVisits(value)
	if err != nil {
		return err
	}
	a.v.Human += v.Human
	a.v.Bot += v.Bot
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
