package memcached

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/linkgate/linkgate/limit"
)

// A flush sends the increments of a counter's buckets pipelined: every
// incr command of the counter in one write, their answers read in order;
// then, in one more exchange, an add of each bucket memcached did not
// have; then an incr of each that another gateway added meanwhile. The
// sequence per bucket is incrAdd's (increment, add, increment), but a
// counter with increments in four buckets costs one round trip instead
// of four, and no goroutine waits on gomemcache's per-call machinery.
// While the send is on its way the counter's checks must wait for it or
// count its increments as in flight (store.go), so a shorter send is
// also a shorter wait.
//
// The connection is one of the reads' (getmulti.go), bounded by one
// deadline for the whole send. An answer that is not what the command
// calls for (cut short, malformed, SERVER_ERROR, ERROR) fails every
// increment of the exchange not yet acknowledged, and the connection is
// closed: they go back to pending, at least once, as with incrAdd. A
// CLIENT_ERROR (a key that holds no count) drops that bucket's increment
// alone, as incrAdd does.

// incrBuf is the scratch of one pipelined send: the commands, the
// outcome of each delta, and the answer's reader.
type incrBuf struct {
	cmd []byte
	out []outcome
	r   *bufio.Reader
}

var incrBufs = sync.Pool{New: func() any { return &incrBuf{r: bufio.NewReaderSize(nil, 512)} }}

// outcome is what the exchanges made of one delta so far.
type outcome uint8

const (
	next    outcome = iota // for the next step: not yet sent; the key was missing (incr) or there (add)
	applied                // memcached counted it
	dropped                // memcached refused it for good (CLIENT_ERROR): not retried
	failed                 // unknown: goes back to pending
)

// incrAll adds each delta of ds to its bucket of c, and returns those
// that failed, to go back to pending.
func (sv *server) incrAll(c limit.Counter, ds []delta) []delta {
	if sv.open.Load() {
		return ds
	}
	var cb [maxKeyLen]byte
	counter := appendCounter(cb[:0], c)
	if !legalKeyBytes(counter) {
		return nil // never sendable: dropped, as incrAdd drops gomemcache's ErrMalformedKey
	}
	b := incrBufs.Get().(*incrBuf)
	defer incrBufs.Put(b)
	deadline := time.Now().Add(sv.timeout)
	nc, gen, err := sv.readConn(deadline)
	if err != nil {
		sv.result(opIncr, err)
		return ds
	}
	if err := nc.SetDeadline(deadline); err != nil {
		nc.Close()
		sv.result(opIncr, err)
		return ds
	}
	b.r.Reset(nc)
	defer b.r.Reset(nil)
	b.out = slices.Grow(b.out[:0], len(ds))[:len(ds)]
	clear(b.out) // every delta: next
	// Increment every bucket; add those missing; increment those another
	// gateway added between the two.
	op := opIncr
	for step := range 3 {
		op = opIncr
		if step == 1 {
			op = opAdd
		}
		if err = b.exchange(nc, sv, op, counter, ds); err != nil {
			break
		}
	}
	sv.result(op, err)
	if err != nil {
		nc.Close()
	} else {
		sv.putReadConn(nc, gen)
	}
	var fails []delta
	for i, o := range b.out {
		// One still next after the three steps found its key missing
		// again after the add said it was there (evicted or deleted
		// since): it is lost, as with incrAdd, not retried.
		if o == failed {
			fails = append(fails, ds[i])
		}
	}
	return fails
}

// exchange sends op (incr or add) for each delta of ds whose outcome is
// next, in one write, and reads their answers into b.out.
func (b *incrBuf) exchange(nc net.Conn, sv *server, op string, counter []byte, ds []delta) error {
	cmd := b.cmd[:0]
	sent := 0
	for i, d := range ds {
		if b.out[i] != next {
			continue
		}
		sent++
		b.out[i] = failed // until its answer says otherwise
		cmd = append(cmd, op...)
		cmd = append(cmd, ' ')
		cmd = append(cmd, counter...)
		cmd = appendBucket(cmd, limit.Bucket{Level: d.level, Start: d.start})
		var vb [20]byte
		v := strconv.AppendInt(vb[:0], d.n, 10)
		if op == opIncr {
			inc(sv.opIncr)
			cmd = append(cmd, ' ')
		} else {
			inc(sv.opAdd)
			cmd = append(cmd, " 0 "...)
			cmd = strconv.AppendInt(cmd, int64(expiration(d.ttl)), 10)
			cmd = append(cmd, ' ')
			cmd = strconv.AppendInt(cmd, int64(len(v)), 10)
			cmd = append(cmd, "\r\n"...)
		}
		cmd = append(cmd, v...)
		cmd = append(cmd, "\r\n"...)
	}
	b.cmd = cmd
	if sent == 0 {
		return nil
	}
	if _, err := nc.Write(cmd); err != nil {
		return fmt.Errorf("memcached: %s: %w", op, err)
	}
	for i := range ds {
		if b.out[i] != failed {
			continue
		}
		line, err := b.r.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("memcached: %s: answer cut short: %w", op, eof(err))
		}
		o, ok := incrAnswer(op, line)
		if !ok {
			line = bytes.TrimRight(line, "\r\n")
			return fmt.Errorf("memcached: %s: server answered %q", op, line[:min(len(line), 128)])
		}
		b.out[i] = o
	}
	return nil
}

var (
	notFound  = []byte("NOT_FOUND\r\n")
	stored    = []byte("STORED\r\n")
	notStored = []byte("NOT_STORED\r\n")
	clientErr = []byte("CLIENT_ERROR")
)

// incrAnswer reads memcached's answer line to an incr (the new value, or
// NOT_FOUND) or an add (STORED, NOT_STORED); a CLIENT_ERROR (a value
// that is not a count) drops the increment. ok is false for anything
// else, a failure of the server or the stream.
func incrAnswer(op string, line []byte) (outcome, bool) {
	switch {
	case bytes.HasPrefix(line, clientErr):
		return dropped, true
	case op == opAdd && bytes.Equal(line, stored):
		return applied, true
	case op == opAdd && bytes.Equal(line, notStored):
		return next, true
	case op == opIncr && bytes.Equal(line, notFound):
		return next, true
	case op == opIncr && len(line) > 2 && digits(bytes.TrimRight(line[:len(line)-2], " "), 20) && bytes.HasSuffix(line, []byte("\r\n")):
		return applied, true
	}
	return 0, false
}
