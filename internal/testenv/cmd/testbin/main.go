// Command testbin builds the pinned kube-apiserver, etcd, S3 server
// (versitygw) and node_exporter (the textfile scraper) that internal/testenv
// runs into the cache directory, unless they are already
// there, and prints the directory. Tests build them on demand too; running
// this first keeps a cold build out of test timeouts. With -talosctl it also
// builds the real talosctl releases the talosctl-tagged tests run
// (testenv.TalosctlVersions: v1.11.0, v1.13.9 and v1.14.1), or those that
// -talosctl-versions lists. With -talosapi it builds Talos' own API
// integration suites (testenv.TalosAPIVersions) that the talosapi-tagged
// test runs against the sim.
//
//	go run ./internal/testenv/cmd/testbin [-dir DIR] [-talosctl] [-talosctl-versions v1.11.0,v1.13.9,v1.14.1] [-talosapi]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
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
	withTalosctl := fs.Bool("talosctl", false, "also build talosctl "+strings.Join(testenv.TalosctlVersions, ", ")+" (for go test -tags talosctl)")
	withTalosAPI := fs.Bool("talosapi", false, "also build Talos' API integration suites "+strings.Join(testenv.TalosAPIVersions, ", ")+" (for go test -tags talosapi)")
	talosctlVersions := fs.String("talosctl-versions", "", "comma-separated talosctl releases to build instead of all (implies -talosctl)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	versions := testenv.TalosctlVersions
	if *talosctlVersions != "" {
		*withTalosctl = true
		versions = strings.Split(*talosctlVersions, ",")
		for _, v := range versions {
			if !slices.Contains(testenv.TalosctlVersions, v) {
				fmt.Fprintf(stderr, "testbin: no talosctl %q to build (have %s)\n", v, strings.Join(testenv.TalosctlVersions, ", "))
				return 2
			}
		}
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
		for _, v := range versions {
			if _, err := testenv.TalosctlAt(ctx, v, stderr); err != nil {
				fmt.Fprintln(stderr, err)
				return 1
			}
		}
	}
	if *withTalosAPI {
		if err := os.Setenv(testenv.DirEnv, *dir); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		for _, v := range testenv.TalosAPIVersions {
			if _, err := testenv.TalosAPISuites(ctx, v, stderr); err != nil {
				fmt.Fprintln(stderr, err)
				return 1
			}
		}
	}
	fmt.Fprintln(stdout, *dir)
	return 0
}
