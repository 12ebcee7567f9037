// Command tinyurl is the demo tiny-URL service that linkgate's quick start,
// end-to-end tests and benchmarks put behind the gateway. Links live in memory;
// those made by POST /shorten are also kept in the -links file, so that they
// survive a restart.
//
//	tinyurl [-listen 127.0.0.1:8081] [-password demo] [-base-url URL] [-log] [-links data/tinyurl/links.json]
//
//	POST /shorten   url=... (form or JSON)  201 {"short_key","short_url"}
//	GET  /<key>     302 to the long URL, 404 for an unknown key (HEAD too)
//	POST /login     email, password (form or JSON): 200 with the demo password, else 401
//	GET  /api/me    echoes X-User-ID (set by a trusted hop)
//	GET  /healthz   200
package main

import (
	"context"
	"os"

	"github.com/linkgate/linkgate/internal/cli"
)

func main() {
	cli.Main(func(ctx context.Context) error { return run(ctx, os.Args, os.Stdout) })
}
