package pebblestore

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/linkgate/linkgate/rollup"
)

// appendLinkKey appends the start that every key about one link shares:
// its kind's tag, then the short key, its length first.
func appendLinkKey(b []byte, tag byte, key string) []byte {
	b = append(b, tag)
	b = binary.AppendUvarint(b, uint64(len(key)))
	return append(b, key...)
}

// appendPointKey appends the key of a bucket's flushed counts; the rolled
// value's is the same followed by 'r'.
func appendPointKey(b []byte, key string, step time.Duration, start int64) []byte {
	b = appendLinkKey(b, 'p', key)
	b = binary.BigEndian.AppendUint32(b, uint32(step/time.Second))
	return binary.BigEndian.AppendUint64(b, timeBits(start))
}

func appendWriterKey(b []byte, writer string) []byte {
	return append(append(b, 'q'), writer...)
}

func appendIndexKey(b []byte, step time.Duration, start int64, key string) []byte {
	b = append(b, 't')
	b = binary.BigEndian.AppendUint32(b, uint32(step/time.Second))
	b = binary.BigEndian.AppendUint64(b, timeBits(start))
	return append(b, key...)
}

func parseIndexKey(k []byte) (time.Duration, int64, string, error) {
	if len(k) < 13 || k[0] != 't' {
		return 0, 0, "", fmt.Errorf("bad index key %q", k)
	}
	step := time.Duration(binary.BigEndian.Uint32(k[1:5])) * time.Second
	start := int64(binary.BigEndian.Uint64(k[5:13]) ^ 1<<63)
	return step, start, string(k[13:]), nil
}

func appendActiveKey(b []byte, step time.Duration, period int64, key string) []byte {
	b = append(b, 'a')
	b = binary.BigEndian.AppendUint32(b, uint32(step/time.Second))
	b = binary.BigEndian.AppendUint64(b, timeBits(period))
	return append(b, key...)
}

func appendMarkKey(b []byte, key string, step time.Duration, start int64, id uint64) []byte {
	b = appendLinkKey(b, 'd', key)
	b = binary.BigEndian.AppendUint32(b, uint32(step/time.Second))
	b = binary.BigEndian.AppendUint64(b, timeBits(start))
	return binary.BigEndian.AppendUint64(b, id)
}

func parseMark(k, v []byte) (rollup.Mark, error) {
	if len(k) < 1 || k[0] != 'd' || len(v) != 8 {
		return rollup.Mark{}, fmt.Errorf("bad mark %x = %x", k, v)
	}
	n, w := binary.Uvarint(k[1:])
	if w <= 0 || n > uint64(len(k)) || uint64(len(k)) != 1+uint64(w)+n+20 {
		return rollup.Mark{}, fmt.Errorf("bad mark %x = %x", k, v)
	}
	rest := k[1+w:]
	key, rest := string(rest[:n]), rest[n:]
	return rollup.Mark{
		Key:   key,
		Step:  time.Duration(binary.BigEndian.Uint32(rest)) * time.Second,
		Start: time.Unix(int64(binary.BigEndian.Uint64(rest[4:])^1<<63), 0).UTC(),
		ID:    binary.BigEndian.Uint64(rest[12:]),
		At:    time.Unix(0, int64(binary.BigEndian.Uint64(v))).UTC(),
	}, nil
}

// prefixEnd returns the first key after every key that starts with p.
func prefixEnd(p []byte) []byte {
	end := slices.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil // p is all 0xff: no upper bound
}

// timeBits maps unix seconds to a uint64 that sorts as they do.
func timeBits(sec int64) uint64 { return uint64(sec) ^ 1<<63 }

// ceilUnix returns t in unix seconds, rounded up.
func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() != 0 {
		s++
	}
	return s
}
