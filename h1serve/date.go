package h1serve

import (
	"net/http"
	"sync/atomic"
	"time"
)

// dates holds the Date field's value of the current second, shared by
// every connection: it is formatted at most once a second, by the first
// answer of a second, and an answer costs one clock read and a compare.
// (No timer: a timer's goroutine would come and go every second.)
var dates dateCache

type dateCache struct {
	cur atomic.Pointer[dateValue]
}

type dateValue struct {
	sec int64
	b   []byte
}

// value returns the Date field's value for now.
func (d *dateCache) value() []byte {
	now := time.Now()
	if v := d.cur.Load(); v != nil && v.sec == now.Unix() {
		return v.b
	}
	v := &dateValue{sec: now.Unix(), b: now.UTC().AppendFormat(make([]byte, 0, len(http.TimeFormat)), http.TimeFormat)}
	d.cur.Store(v)
	return v.b
}
