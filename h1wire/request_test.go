package h1wire

import (
	"bufio"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestParseRequestLine(t *testing.T) {
	for _, tc := range []struct {
		line                    string
		method, target, version string
		ok                      bool
	}{
		{"GET / HTTP/1.1", "GET", "/", "HTTP/1.1", true},
		{"HEAD /x?y=1&z=%20 HTTP/1.0", "HEAD", "/x?y=1&z=%20", "HTTP/1.0", true},
		{"OPTIONS * HTTP/1.1", "OPTIONS", "*", "HTTP/1.1", true},
		{"M-SEARCH * HTTP/1.1", "M-SEARCH", "*", "HTTP/1.1", true},
		{"GET http://a/b HTTP/1.1", "GET", "http://a/b", "HTTP/1.1", true},
		{"GET / HTTP/2.0", "GET", "/", "HTTP/2.0", true}, // a version: what it means is the server's
		{"GET /a b HTTP/1.1", "", "", "", false},
		{"GET  / HTTP/1.1", "", "", "", false},
		{"GET / HTTP/1.1 ", "", "", "", false},
		{"GET / HTTP/11", "", "", "", false},
		{"GET / http/1.1", "", "", "", false},
		{"GET /\x80 HTTP/1.1", "", "", "", false},
		{"GET /\x7f HTTP/1.1", "", "", "", false},
		{"G(T / HTTP/1.1", "", "", "", false},
		{" / HTTP/1.1", "", "", "", false},
		{"GET HTTP/1.1", "", "", "", false},
		{"GET", "", "", "", false},
	} {
		m, tg, v, ok := ParseRequestLine([]byte(tc.line))
		if ok != tc.ok || string(m) != tc.method || string(tg) != tc.target || string(v) != tc.version {
			t.Errorf("ParseRequestLine(%q) = %q %q %q %v, want %q %q %q %v", tc.line, m, tg, v, ok, tc.method, tc.target, tc.version, tc.ok)
		}
	}
}

func TestHeadEnd(t *testing.T) {
	for _, tc := range []struct {
		b    string
		n    int
		bare bool
	}{
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\nrest", 27, false},
		{"GET / HTTP/1.1\r\nHost: a\r\n", 0, false},
		{"GET / HTTP/1.1\r\nHost: a\n\r\n", 0, true},
		{"GET / HTTP/1.1\n", 0, true},
		{"\r\n", 0, false}, // an empty line first is no head
		{"", 0, false},
	} {
		n, bare := HeadEnd([]byte(tc.b))
		if n != tc.n || bare != tc.bare {
			t.Errorf("HeadEnd(%q) = %d, %v; want %d, %v", tc.b, n, bare, tc.n, tc.bare)
		}
	}
}

// FuzzRequestHead: a request head whose lines ParseRequestLine and
// ParseFieldLine take is one net/http reads the same: the same method,
// target and version (http.ReadRequest, unless the target is not a URL
// it takes, which is the server's to decide), and the same fields in
// canonical form (textproto's ReadMIMEHeader). (go test runs the seeds;
// go test -fuzz FuzzRequestHead looks for more.)
func FuzzRequestHead(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"HEAD /x?y=1&z=%20 HTTP/1.1\r\nHost: example.com:8080\r\nUser-Agent: t\r\nAccept: */*\r\n\r\n",
		"GET /p HTTP/1.1\r\nhost: a\r\nx-a: 1\r\nX-A: 2\r\nConnection: keep-alive, close\r\n\r\n",
		"POST /f HTTP/1.0\r\nHost: a\r\nX: \t v \t\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
		"CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET http://a/b HTTP/1.1\r\nHost: a\r\nX: \x80\xff\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\n x: folded\r\n\r\n",
		"GET /a%zz HTTP/1.1\r\nHost: a\r\n\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, head string) {
		end, bare := HeadEnd([]byte(head))
		if end == 0 || bare {
			return
		}
		lines := strings.Split(head[:end-4], "\r\n")
		method, target, version, ok := ParseRequestLine([]byte(lines[0]))
		if !ok {
			return
		}
		var mine []string
		for _, l := range lines[1:] {
			name, value, ok := ParseFieldLine([]byte(l))
			if !ok {
				return
			}
			mine = append(mine, CanonicalKey(name)+"="+string(value))
		}

		// The request line, alone.
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(lines[0] + "\r\n\r\n")))
		switch {
		case err != nil && !targetRefused(string(method), string(target)):
			t.Fatalf("ParseRequestLine took %q, net/http refuses it: %v", lines[0], err)
		case err == nil && (r.Method != string(method) || r.RequestURI != string(target) || r.Proto != string(version)):
			t.Fatalf("%q read differently: ParseRequestLine %q %q %q, net/http %q %q %q", lines[0], method, target, version, r.Method, r.RequestURI, r.Proto)
		}

		// The fields.
		_, fields, _ := strings.Cut(head[:end], "\r\n")
		h, err := textproto.NewReader(bufio.NewReader(strings.NewReader(fields))).ReadMIMEHeader()
		if err != nil {
			t.Fatalf("ParseFieldLine took the fields of %q, net/http refuses them: %v", head, err)
		}
		var theirs []string
		for k, vv := range h {
			for _, v := range vv {
				theirs = append(theirs, k+"="+v)
			}
		}
		slices.Sort(mine)
		slices.Sort(theirs)
		if !slices.Equal(mine, theirs) {
			t.Fatalf("the fields of %q read differently:\nParseFieldLine %q\nnet/http       %q", head, mine, theirs)
		}
	})
}

// targetRefused reports whether net/http refuses target as a request's
// (readRequest: url.ParseRequestURI, an authority for CONNECT).
func targetRefused(method, target string) bool {
	if method == http.MethodConnect && !strings.HasPrefix(target, "/") {
		target = "http://" + target
	}
	_, err := url.ParseRequestURI(target)
	return err != nil
}
