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
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/linkgate/linkgate/gateway"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/upgrade"
)

const usage = `linkgate: a reverse proxy for a tiny-URL service that limits abuse and counts visits.

Usage:
  gateway [flags]              run the gateway
  gateway check-config FILE    compile FILE as start-up and reload do; exit 1 naming the field on error
  gateway version              print the version
  gateway probe URL            exit 0 when URL answers 2xx (container health checks)
  gateway share [-config FILE] [-ttl 30d] [-tenant NAME] (-all | SHORT_KEY)
                               print a read-only share token of a link's stats (or all links'),
                               signed with the key of stats.share.key_env

Flags:
`

// version and revision may be set at build time, with -ldflags
// "-X main.version=v1.2.0 -X main.revision=$(git rev-parse HEAD)", for
// builds that carry no version control information of their own (a Docker
// build, whose context has no .git; a git worktree; -buildvcs=false):
// otherwise the module version and the VCS revision Go records in the
// binary are printed (runtime/debug.ReadBuildInfo). "dev" and "" mean unset.
var (
	version  = "dev"
	revision = ""
)

// run is the whole program; main only supplies the process's context, args,
// output and environment, so that tests can run it in-process.
func run(ctx context.Context, args []string, stdout io.Writer, getenv func(string) string) (err error) {
	if len(args) > 1 {
		if done, err := subcommand(ctx, args, stdout, getenv); done {
			return err
		}
	}
	fl, err := parseFlags(args, stdout)
	if fl == nil {
		return err // an error, or -help answered
	}
	// A binary upgrade (SIGUSR2) starts the binary at this one's path, so
	// that a new release put there is what runs, with these arguments and
	// environment; a process started so says why it failed, if it does,
	// to the one it was to replace, which serves on.
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("gateway: the binary's path: %w", err)
	}
	up, err := upgrade.New(upgrade.Command{Path: exe, Args: args, Env: os.Environ()}, getenv)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			up.Fail(err)
		}
	}()
	// Taken from the start: the default action of both is to end the
	// process, which must not happen to one still starting.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	usr2 := make(chan os.Signal, 1)
	signal.Notify(usr2, syscall.SIGUSR2)
	defer signal.Stop(usr2)
	log, err := newLogger(stdout, fl.logFormat, fl.logLevel)
	if err != nil {
		return err
	}
	plan, err := gateway.Load(fl.path, getenv)
	if err != nil {
		return err
	}
	g, err := gateway.New(plan, gateway.Options{
		Path: fl.path, Getenv: getenv, Log: log, Watch: fl.watch, Hangup: hup, Version: buildInfo().short(),
		// Bound before the analytics pipeline starts: a start that cannot
		// listen (the port in use) starts nothing it must then stop.
		Listen:  true,
		Upgrade: up, Upgrades: usr2,
	})
	if err != nil {
		return err
	}
	return g.Serve(ctx)
}

// subcommand runs the subcommand args[1] names, if it names one.
func subcommand(ctx context.Context, args []string, stdout io.Writer, getenv func(string) string) (done bool, err error) {
	switch args[1] {
	case "version":
		bi, _ := debug.ReadBuildInfo()
		fmt.Fprint(stdout, versionText(bi, version, revision))
		return true, nil
	case "check-config":
		if len(args) != 3 {
			return true, errors.New("usage: gateway check-config FILE")
		}
		// The same compile as start-up and every reload: what it
		// accepts, the gateway runs.
		if _, err := gateway.Load(args[2], getenv); err != nil {
			return true, err
		}
		fmt.Fprintf(stdout, "%s: ok\n", args[2])
		return true, nil
	case "probe":
		if len(args) != 3 {
			return true, errors.New("usage: gateway probe URL")
		}
		return true, probe(ctx, args[2])
	case "share":
		return true, share(args[2:], stdout, getenv)
	}
	return false, nil
}

// flags are the serving command's flags.
type flags struct {
	path, logFormat, logLevel string
	watch                     bool
}

// parseFlags parses the serving command's flags; nil when they do not
// parse (with the error) or asked for help (without).
func parseFlags(args []string, stdout io.Writer) (*flags, error) {
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
			return nil, nil
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("gateway: unexpected argument %q (subcommands: check-config, version, probe, share)", fs.Arg(0))
	}
	return &flags{path: *path, logFormat: *logFormat, logLevel: *logLevel, watch: *watchFile}, nil
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

// buildInfo is this binary's buildVersion.
func buildInfo() buildVersion {
	bi, _ := debug.ReadBuildInfo()
	return readVersion(bi, version, revision)
}

// buildVersion is what a binary knows of its build: the version (set at
// build time, else the module's), the module, the VCS revision (Go's
// record, else the one set at build time), its time, whether the tree had
// uncommitted changes, and the toolchain.
type buildVersion struct {
	version, module, moduleVersion string
	revision, time                 string
	modified                       bool
	goVersion, platform            string
}

// readVersion reads bi (nil: no build information) and the values set at
// build time.
func readVersion(bi *debug.BuildInfo, version, revision string) buildVersion {
	v := buildVersion{moduleVersion: "(devel)", goVersion: runtime.Version()}
	goos, goarch := runtime.GOOS, runtime.GOARCH
	if bi != nil {
		v.module, v.goVersion = bi.Main.Path, bi.GoVersion
		if bi.Main.Version != "" {
			v.moduleVersion = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.revision = s.Value
			case "vcs.time":
				v.time = s.Value
			case "vcs.modified":
				v.modified = s.Value == "true"
			case "GOOS":
				goos = s.Value
			case "GOARCH":
				goarch = s.Value
			}
		}
	}
	v.platform = goos + "/" + goarch
	v.version = v.moduleVersion
	if version != "" && version != "dev" {
		v.version = version
	}
	if v.revision == "" {
		v.revision = revision
	}
	return v
}

// short is the version and the revision's first 12 characters, for the
// log line at start: "v1.2.0 (a06c2f453f6b)".
func (v buildVersion) short() string {
	s := v.version
	if v.revision != "" {
		s += " (" + v.revision[:min(12, len(v.revision))]
		if v.modified {
			s += ", modified"
		}
		s += ")"
	}
	return s
}

// versionText is what "gateway version" prints:
//
//	linkgate v1.2.0
//	module   github.com/linkgate/linkgate v1.2.0
//	revision a06c2f453f6b91160eac6ba663f9870d9c4d2074 (2026-11-26T21:20:00Z, modified)
//	go       go1.26.8 linux/amd64
func versionText(bi *debug.BuildInfo, version, revision string) string {
	v := readVersion(bi, version, revision)
	var b strings.Builder
	fmt.Fprintf(&b, "linkgate %s\n", v.version)
	if v.module != "" {
		fmt.Fprintf(&b, "module   %s %s\n", v.module, v.moduleVersion)
	}
	switch {
	case v.revision == "":
		b.WriteString("revision unknown (built without version control information: build in a git clone, or set -ldflags \"-X main.revision=...\")\n")
	default:
		var notes []string
		if v.time != "" {
			notes = append(notes, v.time)
		}
		if v.modified {
			notes = append(notes, "modified")
		}
		fmt.Fprintf(&b, "revision %s", v.revision)
		if len(notes) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(notes, ", "))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "go       %s %s\n", v.goVersion, v.platform)
	return b.String()
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

// share is "gateway share": it compiles the config as the gateway does (so
// the key is the one it checks tokens with), makes a share token and prints
// it with the paths it opens.
func share(args []string, stdout io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("gateway share", flag.ContinueOnError)
	fs.SetOutput(stdout)
	path := fs.String("config", "configs/gateway.quickstart.yaml", "config file")
	ttl := fs.String("ttl", "30d", "how long the token is valid: 24h, 30d, 8w (at most stats.share.max_ttl)")
	all := fs.Bool("all", false, "a token for all links (their page, and each link's)")
	tenantName := fs.String("tenant", "", "the tenant of the link (or of all links); default: the default tenant")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	key := fs.Arg(0)
	if fs.NArg() > 1 || (key == "") == !*all {
		return errors.New("usage: gateway share [-config FILE] [-ttl 30d] [-tenant NAME] (-all | SHORT_KEY)")
	}
	d, err := rollup.ParseDuration(*ttl)
	if err != nil || d <= 0 {
		return fmt.Errorf("gateway share: -ttl %q is not a duration like 24h, 30d or 8w", *ttl)
	}
	plan, err := gateway.Load(*path, getenv)
	if err != nil {
		return err
	}
	sh, err := plan.MakeShare(*tenantName, key, *all, d, time.Now())
	if err != nil {
		return fmt.Errorf("gateway share: %w", err)
	}
	what := "link " + sh.ShortKey
	if sh.All {
		what = "all links"
	}
	if sh.Tenant != "" {
		what += " of tenant " + sh.Tenant
	}
	fmt.Fprintf(stdout, "token   %s\nfor     %s\nexpires %s\npage    %s\nembed   %s\ndata    %s\n",
		sh.Token, what, sh.Expires.Format(time.RFC3339), sh.Page, sh.Embed, sh.Data)
	return nil
}
