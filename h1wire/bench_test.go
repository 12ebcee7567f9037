package h1wire

import (
	"bufio"
	"strings"
	"testing"
)

// BenchmarkReadResponse reads the head of a redirect, the tiny-URL
// service's common answer, as the proxy reads it: from a connection's
// reader, with the connection's last head, which is the same ("same") or
// differs in its Date ("new date": every second).
func BenchmarkReadResponse(b *testing.B) {
	heads := []string{
		"HTTP/1.1 302 Found\r\nLocation: https://example.com/some/long/url\r\n" +
			"Date: Mon, 02 Jan 2006 15:04:05 GMT\r\nContent-Length: 0\r\nX-Request-Id: 0123456789abcdef\r\n\r\n",
		"HTTP/1.1 302 Found\r\nLocation: https://example.com/some/long/url\r\n" +
			"Date: Mon, 02 Jan 2006 15:04:06 GMT\r\nContent-Length: 0\r\nX-Request-Id: 0123456789abcdef\r\n\r\n",
	}
	for _, bc := range []struct {
		name  string
		heads []string
	}{{"same", heads[:1]}, {"new date", heads}} {
		b.Run(bc.name, func(b *testing.B) {
			var hr HeadReader
			var last LastFields
			sr := strings.NewReader("")
			br := bufio.NewReaderSize(sr, 4<<10)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sr.Reset(bc.heads[i%len(bc.heads)])
				i++
				br.Reset(sr)
				if _, err := hr.ReadResponse(br, "GET", 1<<20, &last); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
