// Command devata keeps a cluster of bare-metal Talos Linux machines equal to one
// declarative inventory. main only wires the process to Run; every command
// lives in its own file and calls into the packages that do the work.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, os.Args[1:], Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}
