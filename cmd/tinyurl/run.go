package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"

	"github.com/linkgate/linkgate/internal/cli"
)

// run is the whole program; main only supplies the process's context,
// arguments and output, so that tests can run it in-process. It serves until
// ctx is done, then drains in-flight requests for up to five seconds.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("tinyurl", flag.ContinueOnError)
	fs.SetOutput(stdout)
	listen := fs.String("listen", "127.0.0.1:8081", "address to listen on")
	password := fs.String("password", "demo", "the password POST /login accepts")
	baseURL := fs.String("base-url", "", "prefix of the short_url answers, like https://tiny.example; empty: from the request")
	logRequests := fs.Bool("log", false, "log every request (off by default: the demo is the upstream in benchmarks)")
	linksFile := fs.String("links", "data/tinyurl/links.json", "file keeping the /shorten links across restarts (JSON, replaced atomically); empty: memory only")
	cert := fs.String("cert", "", "PEM certificate file: serve HTTPS, HTTP/1.1 and HTTP/2 (with -key; bench/protocols.sh's direct target)")
	key := fs.String("key", "", "PEM key file of -cert")
	domains := fs.String("domains", "", "comma-separated branded short domains (or *.suffix) that GET /tls/ask?domain= allows: the gateway's server.tls.on_demand.ask")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("tinyurl: unexpected argument %q", fs.Arg(0))
	}
	if *baseURL != "" {
		if u, err := url.Parse(*baseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("tinyurl: -base-url: %q is not an http(s)://host URL", *baseURL)
		}
	}
	o := options{Password: *password, BaseURL: *baseURL, LinksFile: *linksFile}
	for _, d := range strings.Split(*domains, ",") {
		if d = strings.TrimSpace(d); d != "" {
			o.Domains = append(o.Domains, d)
		}
	}
	if *logRequests {
		o.Log = slog.New(slog.NewTextHandler(stdout, nil))
	}
	handler, err := newServer(o)
	if err != nil {
		return fmt.Errorf("tinyurl: -links: %w", err)
	}
	return cli.ServeTLS(ctx, "tinyurl", *listen, handler, stdout, *cert, *key)
}
