package h1wire

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// readBoth reads head with ReadResponse and with http.ReadResponse, as
// the answer to a request of method, and describes what each read: the
// status, the framing and the fields, or the error.
func readBoth(head, method string) (mine, theirs string, mineErr, theirErr error) {
	var hr HeadReader
	h, err := hr.ReadResponse(bufio.NewReader(strings.NewReader(head)), method, 1<<20, nil)
	if err == nil {
		mine = describeMine(h, hr.Fields)
	}
	mineErr = err
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(head)), &http.Request{Method: method})
	if err == nil {
		theirs = describeTheirs(resp)
	}
	return mine, theirs, mineErr, err
}

// framingFields are the fields net/http takes out of the header it
// returns (or changes) as it reads the framing: each side's framing is
// compared instead.
var framingFields = []string{"Connection", "Content-Length", "Transfer-Encoding", "Trailer"}

func describeMine(h Response, fields []Field) string {
	var b strings.Builder
	cl := h.ContentLength
	if h.NoBody && h.Status != 0 {
		cl = 0 // no body: net/http says 0 (HEAD aside, below)
	}
	fmt.Fprintf(&b, "%d cl=%d chunked=%v close=%v", h.Status, cl, h.Chunked, h.Close)
	trailers := slices.Clone(h.Trailers)
	slices.Sort(trailers)
	fmt.Fprintf(&b, " trailers=%q", trailers)
	var kv []string
	for _, f := range fields {
		if !slices.Contains(framingFields, f.Name) {
			kv = append(kv, f.Name+"="+f.Value)
		}
	}
	slices.Sort(kv) // a map has no order of names
	fmt.Fprintf(&b, " fields=%q", kv)
	return b.String()
}

func describeTheirs(resp *http.Response) string {
	var b strings.Builder
	cl := resp.ContentLength
	if resp.Request.Method == http.MethodHead {
		cl = 0
	}
	chunked := len(resp.TransferEncoding) == 1 && resp.TransferEncoding[0] == "chunked"
	fmt.Fprintf(&b, "%d cl=%d chunked=%v close=%v", resp.StatusCode, cl, chunked, resp.Close)
	var trailers []string
	for k := range resp.Trailer {
		trailers = append(trailers, k)
	}
	slices.Sort(trailers)
	fmt.Fprintf(&b, " trailers=%q", trailers)
	var kv []string
	for k, vv := range resp.Header {
		if slices.Contains(framingFields, k) {
			continue
		}
		for _, v := range vv {
			kv = append(kv, k+"="+v)
		}
	}
	slices.Sort(kv)
	fmt.Fprintf(&b, " fields=%q", kv)
	return b.String()
}

// TestResponseAgainstNetHTTP: ReadResponse reads a head as
// http.ReadResponse does, framing included, refuses what it refuses, and
// differs only where ReadResponse's doc says it does.
func TestResponseAgainstNetHTTP(t *testing.T) {
	const (
		same    = iota // both read it, the same way
		refused        // both refuse it
		stricter
		closes // both read it the same way, but ReadResponse also closes the connection
	)
	for _, tc := range []struct {
		name, head, method string
		want               int
		err                error // ReadResponse's, for refused and stricter
	}{
		{"ok", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", "GET", same, nil},
		{"no reason", "HTTP/1.1 204\r\n\r\n", "GET", same, nil},
		{"odd reason", "HTTP/1.1 299 what\x00ever\r\n\r\n", "GET", same, nil},
		{"unknown code", "HTTP/1.1 599 Mine\r\nContent-Length: 0\r\n\r\n", "GET", same, nil},
		{"bare LF", "HTTP/1.1 200 OK\nContent-Length: 0\n\n", "GET", same, nil},
		{"http/1.0 reads to the end", "HTTP/1.0 200 OK\r\n\r\nbody", "GET", same, nil},
		{"http/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", "GET", same, nil},
		{"http/1.0 ignores chunking", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "GET", same, nil},
		{"no length reads to the end", "HTTP/1.1 200 OK\r\n\r\n", "GET", same, nil},
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\n\r\n", "GET", same, nil},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "GET", same, nil},
		{"chunked in capitals", "HTTP/1.1 200 OK\r\nTransfer-Encoding: CHUNKED\r\n\r\n", "GET", same, nil},
		{"trailers", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: x-a, X-B,,\r\nTrailer: c\r\n\r\n", "GET", same, nil},
		{"trailer without chunking", "HTTP/1.1 200 OK\r\nTrailer: x\r\nContent-Length: 0\r\n\r\n", "GET", same, nil},
		{"repeated length", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length:  3\r\n\r\n", "GET", same, nil},
		{"head with length", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", "HEAD", same, nil},
		{"304 with length", "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", "GET", same, nil},
		{"1xx", "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n", "GET", same, nil},
		{"101", "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", "GET", same, nil},
		{"fields", "HTTP/1.1 200 OK\r\nx-a: 1\r\nX-A: 2\r\nset-cookie: a=b\r\nX-Sp: \t v \t\r\nX-O: \x80\xff\r\nContent-Length: 0\r\n\r\n", "GET", same, nil},
		{"empty value", "HTTP/1.1 200 OK\r\nX:\r\nContent-Length: 0\r\n\r\n", "GET", same, nil},
		{"length and chunking", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", "GET", closes, nil},

		{"not http", "SSH-2.0-OpenSSH\r\n\r\n", "GET", refused, ErrMalformed},
		{"short code", "HTTP/1.1 20 OK\r\n\r\n", "GET", refused, ErrMalformed},
		{"code glued to the reason", "HTTP/1.1 200OK\r\n\r\n", "GET", refused, ErrMalformed},
		{"two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", "GET", refused, ErrFraming},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: 3x\r\n\r\n", "GET", refused, ErrFraming},
		{"signed length", "HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\n", "GET", refused, ErrFraming},
		{"empty length", "HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n", "GET", refused, ErrFraming},
		{"bad length on a 204", "HTTP/1.1 204 No Content\r\nContent-Length: x\r\n\r\n", "GET", refused, ErrFraming},
		{"bad length beside chunking", "HTTP/1.1 200 OK\r\nContent-Length: x\r\nTransfer-Encoding: chunked\r\n\r\n", "GET", refused, ErrFraming},
		{"gzip", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "GET", refused, ErrFraming},
		{"two encodings", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", "GET", refused, ErrFraming},
		{"chunked with a Kelvin sign", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chun\u212aed\r\n\r\n", "GET", refused, ErrFraming},
		{"length with a no-break space", "HTTP/1.1 200 OK\r\nContent-Length: \u00a05\r\n\r\n", "GET", refused, ErrFraming},
		{"bad trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: content-length\r\n\r\n", "GET", refused, ErrFraming},
		{"no colon", "HTTP/1.1 200 OK\r\nX\r\n\r\n", "GET", refused, ErrMalformed},
		{"control in a value", "HTTP/1.1 200 OK\r\nX: a\x01b\r\n\r\n", "GET", refused, ErrMalformed},
		{"folded first line", "HTTP/1.1 200 OK\r\n X: 1\r\n\r\n", "GET", refused, ErrObsFold},
		{"cut short", "HTTP/1.1 200 OK\r\nX: 1\r\n", "GET", refused, nil},

		{"obs-fold", "HTTP/1.1 200 OK\r\nX: 1\r\n 2\r\nContent-Length: 0\r\n\r\n", "GET", stricter, ErrObsFold},
		// RFC 9112 section 5.1: a proxy must remove such whitespace or refuse.
		{"space before the colon", "HTTP/1.1 200 OK\r\nX : 1\r\nContent-Length: 0\r\n\r\n", "GET", stricter, ErrMalformed},
		{"http/1.2", "HTTP/1.2 200 OK\r\nContent-Length: 0\r\n\r\n", "GET", stricter, ErrMalformed},
		{"two spaces before the code", "HTTP/1.1  200 OK\r\nContent-Length: 0\r\n\r\n", "GET", stricter, ErrMalformed},
		{"code 099", "HTTP/1.1 099 Low\r\nContent-Length: 0\r\n\r\n", "GET", stricter, ErrMalformed},
		{"code +20", "HTTP/1.1 +20 Odd\r\nContent-Length: 0\r\n\r\n", "GET", stricter, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mine, theirs, mineErr, theirErr := readBoth(tc.head, tc.method)
			switch tc.want {
			case same, closes:
				if mineErr != nil || theirErr != nil {
					t.Fatalf("ReadResponse: %v; net/http: %v; want both to read it", mineErr, theirErr)
				}
				if tc.want == closes {
					theirs = strings.Replace(theirs, "close=false", "close=true", 1)
				}
				if mine != theirs {
					t.Fatalf("read differently:\nReadResponse %s\nnet/http     %s", mine, theirs)
				}
			case refused, stricter:
				if mineErr == nil {
					t.Fatalf("ReadResponse read it: %s", mine)
				}
				if tc.err != nil && !errors.Is(mineErr, tc.err) {
					t.Errorf("ReadResponse's error %v, want %v", mineErr, tc.err)
				}
				if tc.want == refused && theirErr == nil {
					t.Errorf("net/http reads it: %s", theirs)
				}
				if tc.want == stricter && theirErr != nil {
					t.Errorf("net/http refuses it too (%v): not a difference", theirErr)
				}
			}
		})
	}
}

// FuzzResponseHead: a head ReadResponse takes is one http.ReadResponse
// takes too, and both read the same status, framing and fields (the
// connection of a response with both Content-Length and chunking closed
// too). (go test runs the seeds; go test -fuzz FuzzResponseHead looks for
// more.)
func FuzzResponseHead(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi",
		"HTTP/1.1 302 Found\r\nLocation: https://example.com/x\r\nContent-Length: 0\r\nDate: Mon, 02 Jan 2006 15:04:05 GMT\r\n\r\n",
		"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-A, x-b\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
		"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\nX: \t v \t\n\n",
		"HTTP/1.1 200 OK\r\nX: 1\r\n 2\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 200 OK\r\nConnection: close, x-a\r\nX-A: 1\r\n\r\n",
	} {
		f.Add(s, false)
	}
	f.Add("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", true)
	f.Fuzz(func(t *testing.T, head string, isHead bool) {
		method := http.MethodGet
		if isHead {
			method = http.MethodHead
		}
		mine, theirs, mineErr, theirErr := readBoth(head, method)
		if mineErr != nil {
			return
		}
		if theirErr != nil {
			t.Fatalf("ReadResponse took %q, net/http refuses it: %v", head, theirErr)
		}
		if mine != theirs && strings.Replace(theirs, "close=false", "close=true", 1) != mine {
			t.Fatalf("%q read differently:\nReadResponse %s\nnet/http     %s", head, mine, theirs)
		}
	})
}

// TestLastFieldsAgree: the fields ReadResponse gives with a connection's
// LastFields are the fields it gives without, over random runs of heads
// made to look alike: the same bytes split otherwise between names and
// values, one value changed, a field more or less.
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
	var last LastFields
	var cached, fresh HeadReader
	rng := rand.New(rand.NewPCG(3, 4))
	hits := 0
	for i := range 5000 {
		head := "HTTP/1.1 200 OK\r\n" + heads[rng.IntN(len(heads))] + "\r\n"
		wasLast := slices.Clone(last.fields)
		if _, err := cached.ReadResponse(bufio.NewReader(strings.NewReader(head)), "GET", 1<<20, &last); err != nil {
			t.Fatal(err)
		}
		if _, err := fresh.ReadResponse(bufio.NewReader(strings.NewReader(head)), "GET", 1<<20, nil); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(cached.Fields, fresh.Fields) {
			t.Fatalf("head %d %q: fields %q with the last head's, %q without", i, head, cached.Fields, fresh.Fields)
		}
		if len(cached.Fields) > 0 && sameStrings(cached.Fields, wasLast) {
			hits++
		}
	}
	if hits < 500 {
		t.Fatalf("the last head's strings were taken %d times in 5000: the test misses its point", hits)
	}
}

// sameStrings reports whether a's names and values are b's strings in
// memory, not only equal ones.
func sameStrings(a, b []Field) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if unsafe.StringData(a[i].Name) != unsafe.StringData(b[i].Name) || unsafe.StringData(a[i].Value) != unsafe.StringData(b[i].Value) {
			return false
		}
	}
	return true
}

// TestHeadTooLarge: a head past the reader's limit is refused, lines
// longer than the connection's buffer included, and one within it is
// read whole.
func TestHeadTooLarge(t *testing.T) {
	long := strings.Repeat("v", 10000)
	for _, tc := range []struct {
		head string
		max  int
		err  error
	}{
		{"HTTP/1.1 200 OK\r\nX: " + long + "\r\nContent-Length: 0\r\n\r\n", 20000, nil},
		{"HTTP/1.1 200 OK\r\nX: " + long + "\r\nContent-Length: 0\r\n\r\n", 5000, ErrTooLarge},
		{"HTTP/1.1 200 OK\r\nX: 1\r\nY: 2\r\n\r\n", 20, ErrTooLarge},
	} {
		var hr HeadReader
		_, err := hr.ReadResponse(bufio.NewReaderSize(strings.NewReader(tc.head), 16), "GET", tc.max, nil)
		if !errors.Is(err, tc.err) {
			t.Errorf("head of %d bytes, limit %d: error %v, want %v", len(tc.head), tc.max, err, tc.err)
		}
		if err == nil && (len(hr.Fields) != 2 || hr.Fields[0].Value != long) {
			t.Errorf("head of %d bytes: fields read %d, the long one whole: %v", len(tc.head), len(hr.Fields), hr.Fields[0].Value == long)
		}
	}
}
