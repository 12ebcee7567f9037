package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Serve serves h on addr, with the read-header and idle timeouts of the
// commands' plain servers, until ctx ends; then it lets the requests in
// flight finish for up to five seconds. It writes "NAME listening on
// http://ADDR" to stdout once it accepts connections; its errors start
// with "NAME: ".
func Serve(ctx context.Context, name, addr string, h http.Handler, stdout io.Writer) error {
	return ServeTLS(ctx, name, addr, h, stdout, "", "")
}

// ServeTLS is Serve over TLS with the certificate and key of the PEM
// files certFile and keyFile (the commands' -cert and -key), HTTP/1.1 and
// HTTP/2 (net/http's own) by ALPN, and "https://" in its line; with both
// empty it is Serve.
func ServeTLS(ctx context.Context, name, addr string, h http.Handler, stdout io.Writer, certFile, keyFile string) error {
	if (certFile == "") != (keyFile == "") {
		return fmt.Errorf("%s: -cert and -key go together", name)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 120 * time.Second}
	scheme, serve := "http", func() error { return srv.Serve(ln) }
	if certFile != "" {
		scheme, serve = "https", func() error { return srv.ServeTLS(ln, certFile, keyFile) }
	}
	fmt.Fprintf(stdout, "%s listening on %s://%s\n", name, scheme, ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- serve() }()
	select {
	case err := <-errc:
		return fmt.Errorf("%s: %w", name, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("%s: shutdown: %w", name, err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
