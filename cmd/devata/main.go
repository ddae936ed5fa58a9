// Command devata keeps a cluster of bare-metal Talos Linux machines equal to one
// declarative inventory. main only wires the process to Run; every command
// lives in its own file and calls into the packages that do the work.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// DEVATA_CPUPROFILE=FILE writes a CPU profile of the run, for `go tool pprof`.
	if path := os.Getenv("DEVATA_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil {
			if err := pprof.StartCPUProfile(f); err == nil {
				defer f.Close()
			}
		}
	}
	code := Run(ctx, os.Args[1:], Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	pprof.StopCPUProfile()
	stop()
	os.Exit(code)
}
