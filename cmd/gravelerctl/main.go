// Command gravelerctl is the command-line client of gravelerd. See
// `gravelerctl --help`; exit codes are documented in package cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"graveler/cmd/gravelerctl/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], cli.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}
