package memcached

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/linkgate/linkgate/limit"
)

// The read of a check is a get command of our own; gomemcache does
// everything else (incr, add, delete, the probe). A check reads 144 keys,
// and gomemcache's GetMulti spent a third of the gateway's CPU per decision
// on it: the command built with fmt.Fprintf and strings.Join of 144
// strings, a goroutine and a map per call, an Item and a value allocated
// per key found, and a deadline set per line. getMulti writes the keys
// straight into a pooled buffer, sends it in one write, and parses the
// answer from a pooled bufio.Reader into the counts: no allocation per key.
//
// Its connections are the server's spare pool (the one warm fills, bounded
// by max_idle_conns): taken from it, dialed with the timeout when it is
// empty (counted in linkgate_memcached_dials_total), put back after a
// clean answer, and closed after any error, so that a connection whose
// answer was cut or malformed is never read again.

const (
	// getReadBuf is the size of the bufio.Reader of a get answer: a
	// VALUE line (at most about 300 bytes) must fit; 144 counts found take
	// about 7 KB.
	getReadBuf = 8 << 10
	// maxValueLen bounds a value a get accepts; memcached's default item
	// size limit. Counts are at most 20 bytes; a larger value is skipped
	// and reported as not a count.
	maxValueLen = 1 << 20
	// maxCountLen is the longest value read as a count: 19 digits and
	// the spaces incr may leave.
	maxCountLen = 64
)

// getBuf is the scratch of one get: the command, where each key lies in
// it, which keys were answered, and the answer's reader.
type getBuf struct {
	cmd  []byte
	keys []keySpan
	seen []bool
	r    *bufio.Reader
}

// keySpan is where a key lies in getBuf.cmd.
type keySpan struct{ start, end int32 }

var getBufs = sync.Pool{New: func() any { return &getBuf{r: bufio.NewReaderSize(nil, getReadBuf)} }}

// notCountError is a value that is not a count: memcached answered
// properly, so it says nothing of the server's health.
type notCountError struct {
	key, value string
}

func (e *notCountError) Error() string {
	return fmt.Sprintf("key %q holds %q, not a count", e.key, e.value)
}

// isNotCount reports whether err is a *notCountError.
func isNotCount(err error) bool {
	if err == nil {
		return false
	}
	var nce *notCountError // escapes: declared only when there is an error
	return errors.As(err, &nce)
}

// getMulti reads the counts of c's buckets into counts[:len(buckets)] (0
// for a missing key) with one get command, bounded in all by the
// timeout. Its error wraps memcache.ErrMalformedKey for a key memcached
// would refuse, is a *notCountError for a value that is not a count (the
// connection is then kept), and otherwise is a failure of the connection
// or the server.
func (sv *server) getMulti(c limit.Counter, buckets []limit.Bucket, counts []int64) error {
	counts = counts[:len(buckets)]
	clear(counts)
	if len(buckets) == 0 {
		return nil
	}
	b := getBufs.Get().(*getBuf)
	defer getBufs.Put(b)
	if err := b.command(c, buckets); err != nil {
		return err
	}
	deadline := time.Now().Add(sv.timeout)
	nc, gen, err := sv.readConn(deadline)
	if err != nil {
		return err
	}
	if err := nc.SetDeadline(deadline); err != nil {
		nc.Close()
		return fmt.Errorf("memcached: get: %w", err)
	}
	b.r.Reset(nc)
	err = b.exchange(nc, counts)
	b.r.Reset(nil) // drop the connection from the pooled reader
	if err != nil && !isNotCount(err) {
		nc.Close()
		clear(counts)
		return err
	}
	sv.putReadConn(nc, gen)
	if err != nil {
		clear(counts)
	}
	return err
}

// readConn returns an idle connection, or one dialed by deadline, and the
// generation of the server's connections it belongs to.
func (sv *server) readConn(deadline time.Time) (net.Conn, uint64, error) {
	gen := sv.connGen.Load()
	select {
	case nc := <-sv.spare:
		return nc, gen, nil
	default:
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	nc, err := sv.dialNew(ctx, sv.na.network, sv.na.addr)
	if err != nil {
		return nil, 0, fmt.Errorf("memcached: get: %w", err)
	}
	return nc, gen, nil
}

// putReadConn keeps nc, after a clean answer, for the next read, unless
// the pool is full or the breaker dropped the connections of nc's
// generation meanwhile (the server failed: nc may be to a dead process).
func (sv *server) putReadConn(nc net.Conn, gen uint64) {
	if sv.connGen.Load() != gen {
		nc.Close()
		return
	}
	select {
	case sv.spare <- nc:
	default:
		nc.Close()
	}
}

// command builds "get k1 k2 ... kn\r\n" of c's buckets into b.cmd,
// recording where each key lies.
func (b *getBuf) command(c limit.Counter, buckets []limit.Bucket) error {
	var cb [maxKeyLen]byte
	counter := appendCounter(cb[:0], c)
	if !legalKeyBytes(counter) {
		return memcache.ErrMalformedKey
	}
	cmd := append(b.cmd[:0], "get"...)
	keys := b.keys[:0]
	for _, bk := range buckets {
		cmd = append(cmd, ' ')
		start := len(cmd)
		cmd = append(cmd, counter...)
		cmd = appendBucket(cmd, bk)
		// The bucket part is '|', a letter and a decimal: always legal,
		// and maxKeyLen <= 250 (key.go) bounds the whole key.
		keys = append(keys, keySpan{int32(start), int32(len(cmd))})
	}
	b.cmd = append(cmd, "\r\n"...)
	b.keys = keys
	if cap(b.seen) < len(keys) {
		b.seen = make([]bool, len(keys))
	}
	b.seen = b.seen[:len(keys)]
	clear(b.seen)
	return nil
}

// legalKeyBytes is gomemcache's rule for a key: at most 250 bytes, no
// space or control character.
func legalKeyBytes(k []byte) bool {
	if len(k) > memcachedMaxKey {
		return false
	}
	for _, c := range k {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

var (
	valuePrefix = []byte("VALUE ")
	endLine     = []byte("END\r\n")
)

// exchange sends b.cmd on w and parses the answer from b.r into counts.
// Any error but a *notCountError leaves the connection unusable.
func (b *getBuf) exchange(w io.Writer, counts []int64) error {
	if _, err := w.Write(b.cmd); err != nil {
		return fmt.Errorf("memcached: get: %w", err)
	}
	var valueErr error
	next := 0 // memcached answers in request order: where the next answer is likely
	for {
		line, err := b.r.ReadSlice('\n')
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("memcached: get: answer cut short: %w", err)
		}
		if bytes.Equal(line, endLine) {
			return valueErr
		}
		if !bytes.HasPrefix(line, valuePrefix) {
			return unexpectedLine(line)
		}
		key, size, ok := parseValueLine(line[len(valuePrefix):])
		if !ok {
			return unexpectedLine(line)
		}
		i := b.find(key, next)
		if i < 0 {
			return fmt.Errorf("memcached: get: answer for key %q, not requested or answered twice", key)
		}
		b.seen[i] = true
		next = i + 1
		if size > maxValueLen {
			return fmt.Errorf("memcached: get: value of %d bytes for %q", size, key)
		}
		if size <= maxCountLen {
			data, err := b.r.Peek(size + 2)
			if err != nil {
				return fmt.Errorf("memcached: get: value cut short: %w", eof(err))
			}
			if data[size] != '\r' || data[size+1] != '\n' {
				return fmt.Errorf("memcached: get: value of %q not ended by CRLF", key)
			}
			n, ok := parseCount(data[:size])
			if ok {
				counts[i] = n
			} else if valueErr == nil {
				valueErr = &notCountError{key: string(key), value: string(data[:size])}
			}
			b.r.Discard(size + 2)
			continue
		}
		// Too long to be a count: skip it, keeping the stream in step.
		if valueErr == nil {
			head, _ := b.r.Peek(min(size, 32))
			valueErr = &notCountError{key: string(key), value: string(head) + "..."}
		}
		if _, err := b.r.Discard(size); err != nil {
			return fmt.Errorf("memcached: get: value cut short: %w", eof(err))
		}
		end, err := b.r.Peek(2)
		if err != nil {
			return fmt.Errorf("memcached: get: value cut short: %w", eof(err))
		}
		if end[0] != '\r' || end[1] != '\n' {
			return fmt.Errorf("memcached: get: value of %q not ended by CRLF", key)
		}
		b.r.Discard(2)
	}
}

func eof(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// find returns the index of the requested key equal to key and not yet
// answered, looking from next on first, or -1.
func (b *getBuf) find(key []byte, next int) int {
	n := len(b.keys)
	for j := range n {
		i := next + j
		if i >= n {
			i -= n
		}
		k := b.keys[i]
		// The keys share their counter part and end in the bucket's
		// start: the length and the last digit tell most apart.
		if !b.seen[i] && int(k.end-k.start) == len(key) && b.cmd[k.end-1] == key[len(key)-1] &&
			bytes.Equal(b.cmd[k.start:k.end], key) {
			return i
		}
	}
	return -1
}

// parseValueLine parses "<key> <flags> <bytes>[ <cas>]\r\n", the rest of
// a VALUE line, returning the key and the size of the data.
func parseValueLine(s []byte) (key []byte, size int, ok bool) {
	if !bytes.HasSuffix(s, []byte("\r\n")) {
		return nil, 0, false
	}
	s = s[:len(s)-2]
	sp := bytes.IndexByte(s, ' ')
	if sp <= 0 {
		return nil, 0, false
	}
	key, s = s[:sp], s[sp+1:]
	sp = bytes.IndexByte(s, ' ')
	if sp <= 0 || !digits(s[:sp], 10) { // flags: a 32-bit unsigned
		return nil, 0, false
	}
	s = s[sp+1:]
	if sp = bytes.IndexByte(s, ' '); sp >= 0 {
		if !digits(s[sp+1:], 20) { // cas
			return nil, 0, false
		}
		s = s[:sp]
	}
	if !digits(s, 10) {
		return nil, 0, false
	}
	for _, c := range s {
		size = size*10 + int(c-'0')
		if size > maxValueLen+1 {
			size = maxValueLen + 1 // too large: the caller refuses it
		}
	}
	return key, size, true
}

// digits reports whether s is 1 to max decimal digits.
func digits(s []byte, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// unexpectedLine is the error of a line that is not part of a get answer:
// an error memcached sent (SERVER_ERROR, CLIENT_ERROR, ERROR) or garbage.
func unexpectedLine(line []byte) error {
	line = bytes.TrimRight(line, "\r\n")
	if len(line) > 128 {
		line = line[:128]
	}
	for _, p := range []string{"SERVER_ERROR", "CLIENT_ERROR", "ERROR"} {
		if bytes.HasPrefix(line, []byte(p)) {
			return fmt.Errorf("memcached: get: server answered %q", line)
		}
	}
	return fmt.Errorf("memcached: get: unexpected line in answer: %q", line)
}
