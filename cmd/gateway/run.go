package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/linkgate/linkgate/config"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// run is the whole program; main only supplies the process's context, args,
// output and environment, so that tests can run it in-process.
func run(ctx context.Context, args []string, stdout io.Writer, getenv func(string) string) error {
	if len(args) > 1 {
		switch args[1] {
		case "version":
			fmt.Fprintln(stdout, "linkgate", versionString())
			return nil
		case "check-config":
			if len(args) != 3 {
				return errors.New("usage: gateway check-config FILE")
			}
			if _, err := config.Load(args[2]); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s: ok\n", args[2])
			return nil
		case "probe":
			if len(args) != 3 {
				return errors.New("usage: gateway probe URL")
			}
			return probe(ctx, args[2])
		}
	}
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stdout)
	path := fs.String("config", "configs/gateway.quickstart.yaml", "config file")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	watchFile := fs.Bool("watch", true, "reload when the config file changes (SIGHUP and POST /admin/reload always reload)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("gateway: unexpected argument %q (subcommands: check-config, version, probe)", fs.Arg(0))
	}
	log, err := newLogger(stdout, *logFormat, *logLevel)
	if err != nil {
		return err
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	g, err := newGateway(ctx, *path, cfg, getenv, log)
	if err != nil {
		return err
	}
	g.watchFile = *watchFile
	return g.serve(ctx)
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("gateway: -log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("gateway: -log-format: %q is not text or json", format)
}

func versionString() string {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " (" + s.Value[:12] + ")"
			}
		}
	}
	return v
}

func probe(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("probe: %s answered %s", url, resp.Status)
	}
	return nil
}

// serve runs the listeners until ctx is done, then shuts down in order:
// stop accepting and drain in-flight requests (up to server.shutdown_timeout),
// close the connections of those still running, then run the shutdown hooks
// (the final analytics flush among them).
func (g *gateway) serve(ctx context.Context) error {
	cfg := g.current().cfg
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		g.close(context.Background())
		return fmt.Errorf("gateway: server.listen: %w", err)
	}
	srv := &http.Server{
		Handler:           g,
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
		ReadTimeout:       cfg.Server.ReadTimeout,
		WriteTimeout:      cfg.Server.WriteTimeout,
		IdleTimeout:       cfg.Server.IdleTimeout,
		MaxHeaderBytes:    cfg.Server.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
	servers := []*http.Server{srv}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	g.log.Info("listening", "server", "gateway", "addr", ln.Addr().String(), "version", version)
	if cfg.Admin.Listen != "" {
		aln, err := net.Listen("tcp", cfg.Admin.Listen)
		if err != nil {
			srv.Close()
			g.close(context.Background())
			return fmt.Errorf("gateway: admin.listen: %w", err)
		}
		asrv := &http.Server{Handler: g.adminHandler(), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
		servers = append(servers, asrv)
		go func() { errc <- asrv.Serve(aln) }()
		g.log.Info("listening", "server", "admin", "addr", aln.Addr().String())
	}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go g.watch(ctx, hup)

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	// shutdown_timeout may have changed by reload since the start.
	timeout := g.current().cfg.Server.ShutdownTimeout
	g.log.Info("shutting down", "drain_timeout", timeout)
	dctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, s := range servers {
		if err := s.Shutdown(dctx); err != nil {
			// Requests still running past the deadline are cut off, so that
			// none records anything after the final flush.
			g.log.Warn("drain incomplete: closing the connections of requests still running", "err", err)
			s.Close()
		}
	}
	// The hooks get a deadline of their own: a drain that used all of its
	// time must not leave the final flush none.
	hctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	g.close(hctx)
	g.log.Info("stopped")
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}
