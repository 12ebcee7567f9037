// Command floor is the benchmarks' performance floor: a bare
// httputil.ReverseProxy to one target, with the upstream transport tuned as
// the gateway tunes its own (a large idle pool per host, no compression) and
// nothing else. bench/run.sh measures the gateway against it.
//
//	floor -listen 127.0.0.1:8090 -target http://127.0.0.1:8081
//
// With -cert and -key it serves HTTPS instead, HTTP/1.1 and HTTP/2 by
// ALPN with net/http's own servers: Go's floor on those protocols
// (bench/protocols.sh's floor target).
//
// It prints "floor listening on http://ADDR" (https://) once it accepts connections, and
// the number of upstream connections it opened when it stops.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"github.com/linkgate/linkgate/internal/cli"
)

func main() {
	cli.Main(func(ctx context.Context) error { return run(ctx, os.Args, os.Stdout) })
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("floor", flag.ContinueOnError)
	fs.SetOutput(stdout)
	listen := fs.String("listen", "127.0.0.1:8090", "address to listen on")
	target := fs.String("target", "http://127.0.0.1:8081", "the upstream's base URL")
	cert := fs.String("cert", "", "PEM certificate file: serve HTTPS (with -key)")
	key := fs.String("key", "", "PEM key file of -cert")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	u, err := url.Parse(*target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("floor: -target %q is not an http(s)://host:port URL", *target)
	}

	var opened atomic.Int64
	dialer := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}
	transport := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err == nil {
				opened.Add(1)
			}
			return c, err
		},
		MaxIdleConns:          0,    // no global cap
		MaxIdleConnsPerHost:   1024, // Go's default of 2 makes a loaded proxy redial constantly
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 10 * time.Second,
		DisableCompression:    true, // pass bodies through as they are
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.SetXForwarded()
		},
		Transport: transport,
		ErrorLog:  log.New(io.Discard, "", 0),
	}

	err = cli.ServeTLS(ctx, "floor", *listen, rp, stdout, *cert, *key)
	fmt.Fprintf(stdout, "floor: upstream connections opened: %d\n", opened.Load())
	return err
}
