package proxy

import (
	"bufio"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// TestLastFieldsAgree: the fields readFields gives with a connection's
// last head (lastFields) are the fields it gives without, over random
// runs of heads made to look alike: the same bytes split otherwise
// between names and values, one value changed, a field more or less.
func TestLastFieldsAgree(t *testing.T) {
	heads := []string{
		"Ab: c\r\nDate: 1\r\n",
		"A: bc\r\nDate: 1\r\n", // the same names and values back to back as the first
		"Ab: c\r\nDate: 2\r\n",
		"Ab: c\r\n",
		"Ab: c\r\nDate: 1\r\nDate: 1\r\n",
		"ab: c\r\ndate: 1\r\n",                         // canonicalized to the first
		"Location: /x\r\nContent-Length: 0\r\n",        // common names
		"Location: /y\r\nContent-Length: 0\r\n",        // one value changed
		"Location: /x\r\nContent-Length: 0\r\nX: \r\n", // an empty value more
		"",
	}
	var last lastFields
	cached, fresh := &h1State{}, &h1State{}
	rng := rand.New(rand.NewPCG(3, 4))
	hits := 0
	for i := range 5000 {
		head := heads[rng.IntN(len(heads))] + "\r\n"
		budget := maxResponseHead
		wasLast := slices.Clone(last.fields)
		if err := cached.readFields(bufio.NewReader(strings.NewReader(head)), &budget, &last); err != nil {
			t.Fatal(err)
		}
		budget = maxResponseHead
		if err := fresh.readFields(bufio.NewReader(strings.NewReader(head)), &budget, nil); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(cached.fields, fresh.fields) {
			t.Fatalf("head %d %q: fields %q with the last head's, %q without", i, head, cached.fields, fresh.fields)
		}
		if len(cached.fields) > 0 && sameStrings(cached.fields, wasLast) {
			hits++
		}
	}
	if hits < 500 {
		t.Fatalf("the last head's strings were taken %d times in 5000: the test misses its point", hits)
	}
}

// sameStrings reports whether a's names and values are b's strings in
// memory, not only equal ones.
func sameStrings(a, b []field) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if unsafe.StringData(a[i].name) != unsafe.StringData(b[i].name) || unsafe.StringData(a[i].value) != unsafe.StringData(b[i].value) {
			return false
		}
	}
	return true
}
