// Command gateway is linkgate: a reverse proxy in front of a tiny-URL
// service that limits abusive traffic and counts visits to short links.
//
//	gateway -config FILE         run the gateway
//	gateway check-config FILE    validate a config file
//	gateway version              print the version
//	gateway probe URL            exit 0 when URL answers 2xx (container health checks)
package main

import (
	"context"
	"os"

	"github.com/linkgate/linkgate/internal/cli"
)

func main() {
	cli.Main(func(ctx context.Context) error { return run(ctx, os.Args, os.Stdout, os.Getenv) })
}
