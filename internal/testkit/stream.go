package testkit

import (
	"bufio"
	"io"
	"net/http"
	"testing"
	"time"
)

// EventStream is an upstream handler that sends the event "first",
// flushes it, and sends "second" only once release is closed (or ends
// with its request).
func EventStream(release <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		select { // the rest only once the client has seen the first event
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: second\n\n")
	}
}

// CheckStreamed GETs url, answered by an EventStream given release, and
// fails t unless the first event arrives while the answer is still open,
// and the second once release is closed. held says what holding the
// first event back would mean.
func CheckStreamed(t testing.TB, url string, release chan struct{}, held string) {
	t.Helper()
	resp, err := Client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line := make(chan string, 1)
	go func() {
		s, _ := br.ReadString('\n')
		line <- s
	}()
	if s := Recv(t, line, 5*time.Second, "the first event before the answer ended: "+held); s != "data: first\n" {
		t.Fatalf("first line %q", s)
	}
	close(release)
	if rest, _ := io.ReadAll(br); string(rest) != "\ndata: second\n\n" {
		t.Errorf("rest of the stream %q", rest)
	}
}

// EchoUpgrade takes w's connection over with a 101 to the protocol echo,
// its head with the header lines extra ("Name: value\r\n" each), then
// answers the first line it reads with "echo: " and the line. Where w
// cannot be taken over, nothing is sent: the client sees no 101.
func EchoUpgrade(w http.ResponseWriter, extra string) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n" + extra + "\r\n")
	brw.Flush()
	line, _ := brw.ReadString('\n')
	brw.WriteString("echo: " + line)
	brw.Flush()
}
