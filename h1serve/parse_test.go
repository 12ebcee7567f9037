package h1serve

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"testing"

	"golang.org/x/net/http/httpguts"

	"github.com/linkgate/linkgate/h1wire"
)

// FuzzParse: a head the loop takes is one net/http's server takes too,
// and both read the same request from it. (go test runs the seeds; go
// test -fuzz FuzzParse looks for more.)
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"HEAD /x?y=1&z=%20 HTTP/1.1\r\nHost: example.com:8080\r\nUser-Agent: t\r\nAccept: */*\r\n\r\n",
		"GET /p HTTP/1.1\r\nhost: a\r\nx-a: 1\r\nX-A: 2\r\nConnection: keep-alive, close\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nPragma: no-cache\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: \t v \t\r\n\r\n",
		"GET //evil/x HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /#frag HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: \x80\xff\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\n x: folded\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost:\r\n\r\n",
		"GET /a%zz HTTP/1.1\r\nHost: a\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, head []byte) {
		end, bare := h1wire.HeadEnd(head)
		if end == 0 || bare {
			return
		}
		head = head[:end]
		c := &conn{remote: "192.0.2.1:1"}
		mine := new(http.Request)
		ok := c.parse(head, mine)
		if !ok {
			return
		}
		theirs, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
		if err != nil {
			t.Fatalf("the loop took %q, net/http refuses it: %v", head, err)
		}
		// What net/http's server checks after reading (conn.readRequest),
		// on the fields as read, Host among them (ReadRequest drops it).
		_, fields, _ := bytes.Cut(head, []byte("\r\n"))
		raw, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(fields))).ReadMIMEHeader()
		if err != nil {
			t.Fatalf("the loop took %q, net/http refuses its fields: %v", head, err)
		}
		hosts := raw["Host"]
		if len(hosts) != 1 || !httpguts.ValidHostHeader(hosts[0]) {
			t.Fatalf("the loop took %q, net/http refuses its Host: %q", head, hosts)
		}
		for k, vv := range raw {
			if !httpguts.ValidHeaderFieldName(k) {
				t.Fatalf("the loop took %q, net/http refuses the name %q", head, k)
			}
			for _, v := range vv {
				if !httpguts.ValidHeaderFieldValue(v) {
					t.Fatalf("the loop took %q, net/http refuses the value %q", head, v)
				}
			}
		}
		if got, want := describe(mine), describe(theirs); got != want {
			t.Fatalf("%q read differently:\nloop:     %s\nnet/http: %s", head, got, want)
		}
	})
}

func describe(r *http.Request) string {
	keys := make([]string, 0, len(r.Header))
	for k := range r.Header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %q %q %s host=%q close=%v cl=%d te=%q body=%v", r.Method, r.RequestURI, r.URL.String(), r.Proto, r.Host, r.Close, r.ContentLength, r.TransferEncoding, r.Body == http.NoBody)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%q", k, r.Header[k])
	}
	return b.String()
}
