// Command testbin builds the pinned kube-apiserver and etcd that
// internal/testenv runs into the cache directory, unless they are already
// there, and prints the directory. Tests build them on demand too; running
// this first keeps a cold build out of test timeouts. With -talosctl it also
// builds the real talosctl v1.11.0 the talosctl-tagged tests run.
//
//	go run ./internal/testenv/cmd/testbin [-dir DIR] [-talosctl]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"devata.dev/devata/internal/testenv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("testbin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "cache directory (default $"+testenv.DirEnv+", else the user cache directory)")
	withTalosctl := fs.Bool("talosctl", false, "also build talosctl "+testenv.TalosctlVersion+" (for go test -tags talosctl)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "testbin: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *dir == "" {
		d, err := testenv.DefaultDir()
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		*dir = d
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	*dir = abs
	if err := testenv.Install(ctx, *dir, stderr); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if *withTalosctl {
		if err := os.Setenv(testenv.DirEnv, *dir); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		if _, err := testenv.Talosctl(ctx, stderr); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	fmt.Fprintln(stdout, *dir)
	return 0
}
