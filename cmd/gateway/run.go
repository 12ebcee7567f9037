package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/linkgate/linkgate/gateway"
)

const usage = `linkgate: a reverse proxy for a tiny-URL service that limits abuse and counts visits.

Usage:
  gateway [flags]              run the gateway
  gateway check-config FILE    compile FILE as start-up and reload do; exit 1 naming the field on error
  gateway version              print the version
  gateway probe URL            exit 0 when URL answers 2xx (container health checks)

Flags:
`

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
			// The same compile as start-up and every reload: what it
			// accepts, the gateway runs.
			if _, err := gateway.Load(args[2], getenv); err != nil {
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
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("gateway: unexpected argument %q (subcommands: check-config, version, probe)", fs.Arg(0))
	}
	log, err := newLogger(stdout, *logFormat, *logLevel)
	if err != nil {
		return err
	}
	plan, err := gateway.Load(*path, getenv)
	if err != nil {
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	g, err := gateway.New(plan, gateway.Options{
		Path: *path, Getenv: getenv, Log: log, Watch: *watchFile, Hangup: hup, Version: version,
		// Bound before the analytics pipeline starts: a start that cannot
		// listen (the port in use) starts nothing it must then stop.
		Listen: true,
	})
	if err != nil {
		return err
	}
	return g.Serve(ctx)
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
