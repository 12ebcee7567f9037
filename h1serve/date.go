package h1serve

import (
	"net/http"
	"sync/atomic"
	"time"
)

// dates holds the Date field's value of the current second, shared by
// every connection: an answer takes it without reading the clock (a read
// costs as much as a few hundred bytes of parsing), and it is formatted
// at most once a second. A timer drops it as the next second begins; the
// first answer after formats the next one. Under load the timer may fire
// late, and the value lag the clock by as much (nginx's cached time lags
// the same way).
var dates dateCache

type dateCache struct {
	cur atomic.Pointer[[]byte] // nil: to format
}

// value returns the Date field's value for now.
func (d *dateCache) value() []byte {
	if v := d.cur.Load(); v != nil {
		return *v
	}
	now := time.Now()
	v := now.UTC().AppendFormat(make([]byte, 0, len(http.TimeFormat)), http.TimeFormat)
	if d.cur.CompareAndSwap(nil, &v) {
		time.AfterFunc(time.Second-time.Duration(now.Nanosecond()), func() { d.cur.Store(nil) })
	}
	return v
}
