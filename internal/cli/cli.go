// Package cli is the main of the repo's commands: run under a context that
// SIGINT and SIGTERM end, and an error printed to stderr with exit status 1;
// and Serve, the serving loop of the plain HTTP servers among them.
package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Main runs run until it returns, its context ended by SIGINT or SIGTERM,
// and exits with status 1 after printing its error, if it returns one.
func Main(run func(ctx context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
