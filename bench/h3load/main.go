// Command h3load sends GET requests to one URL over HTTP/3 (quic-go) or
// HTTP/2 (net/http) from one connection with a number of requests in
// flight for a while, then prints the requests answered a second and the
// first request's time (the handshake and one request): the same Go client
// code for both protocols, as Debian's h2load speaks no QUIC. With -visits
// it times whole visits on new connections instead (see visits), for
// h3loss.sh, which adds delay and loss to the path. Loopback or a test
// namespace only; it trusts any certificate.
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go/http3"
)

func main() {
	url := flag.String("url", "https://127.0.0.1:18443/x", "URL to GET")
	proto := flag.String("proto", "h3", "h3 or h2")
	streams := flag.Int("streams", 16, "requests in flight on the connection")
	duration := flag.Duration("duration", 5*time.Second, "how long to send (at most 30s)")
	visitCount := flag.Int("visits", 0, "instead: this many visits over h2 and as many over h3, interleaved, each on a new connection (at most 1000)")
	resume := flag.Bool("resume", false, "with -visits: as many again of each with a resumed TLS session")
	flag.Parse()
	if *visitCount != 0 {
		if *visitCount < 1 || *visitCount > 1000 {
			fmt.Fprintln(os.Stderr, "h3load: -visits 1 to 1000")
			os.Exit(2)
		}
		visits(*url, *visitCount, *resume)
		return
	}
	if *duration > 30*time.Second || *streams < 1 || *streams > 256 {
		fmt.Fprintln(os.Stderr, "h3load: -duration at most 30s, -streams 1 to 256")
		os.Exit(2)
	}
	cfg := &tls.Config{InsecureSkipVerify: true}
	var rt http.RoundTripper
	switch *proto {
	case "h3":
		rt = &http3.Transport{TLSClientConfig: cfg}
	case "h2":
		rt = &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true, MaxConnsPerHost: 1}
	default:
		fmt.Fprintln(os.Stderr, "h3load: -proto h3 or h2")
		os.Exit(2)
	}
	c := &http.Client{Transport: rt, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func() error {
		resp, err := c.Get(*url)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	t0 := time.Now()
	if err := get(); err != nil {
		fmt.Fprintln(os.Stderr, "h3load:", err)
		os.Exit(1)
	}
	first := time.Since(t0)
	var ok, failed atomic.Int64
	stop := time.Now().Add(*duration)
	var wg sync.WaitGroup
	start := time.Now()
	for range *streams {
		wg.Go(func() {
			for time.Now().Before(stop) {
				if get() != nil {
					failed.Add(1)
				} else {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	fmt.Printf("%s %.0f req/s, first request %v, %d answered, %d failed\n", *proto, float64(ok.Load())/took.Seconds(), first.Round(time.Microsecond), ok.Load(), failed.Load())
}
