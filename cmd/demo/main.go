// Command demo is demo.sh's helper: it writes the demo's config and
// country database, then fills a running demo gateway with made-up visits
// and prints the pages to open.
//
//	demo prepare [-config configs/gateway.quickstart.yaml] [-dir data] [-listen ADDR] [-admin ADDR] [-upstream URL]
//	demo seed [-config data/demo/gateway.yaml] [-for 10m]
//
// prepare writes DIR/demo/countries.mmdb, a country database of the
// documentation address ranges the seeded visits come from (made here: the
// demo needs no download and no licence), and DIR/demo/gateway.yaml, the
// quick-start config with that database as analytics.geoip.path, the
// embedded store under DIR and the addresses given. Unique visitors and
// share tokens are on when their variables (LINKGATE_UNIQUES_SECRET,
// LINKGATE_SHARE_KEY, as the config names them) hold secrets: demo.sh
// makes new ones for each run.
//
// seed waits until the gateway is ready, sends a few minutes' worth of
// visits to the demo links through it (countries by X-Forwarded-For, which
// the quick start trusts from 127.0.0.1; referrers, sources, devices,
// crawlers and link previews), makes a share link with the admin API,
// prints the URLs of a link's page, the all-links page and the share link,
// then goes on visiting now and then for the -for duration, so that the
// live view moves.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/linkgate/linkgate/internal/cli"
)

func main() {
	cli.Main(func(ctx context.Context) error {
		if err := run(ctx, os.Args, os.Stdout); err != nil && ctx.Err() == nil {
			return fmt.Errorf("demo: %w", err)
		}
		return nil // done, or stopped by a signal
	})
}

// run runs the subcommand args[1] with the rest of args, writing what it
// has to say to stdout.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: demo prepare|seed [flags]")
	}
	switch args[1] {
	case "prepare":
		return prepare(args[2:], stdout)
	case "seed":
		return seed(ctx, args[2:], stdout)
	}
	return fmt.Errorf("unknown subcommand %q: want prepare or seed", args[1])
}
