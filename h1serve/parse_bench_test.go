package h1serve

import (
	"net/http"
	"testing"
)

// BenchmarkParse parses the head of a browser's GET, as the loop reads
// every request it serves, on a connection that parsed one like it before
// (interned strings).
func BenchmarkParse(b *testing.B) {
	head := []byte("GET /abc123?utm_source=x HTTP/1.1\r\nHost: example.com\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64)\r\n" +
		"Accept: text/html,application/xhtml+xml\r\nAccept-Encoding: gzip, deflate, br\r\nAccept-Language: en-US,en;q=0.9\r\n" +
		"Referer: https://news.example/\r\nConnection: keep-alive\r\n\r\n")
	c := &conn{remote: "192.0.2.1:1"}
	var r http.Request
	b.ReportAllocs()
	for b.Loop() {
		if !c.parse(head, &r) {
			b.Fatal("not parsed")
		}
	}
}
