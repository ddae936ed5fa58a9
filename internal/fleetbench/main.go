// Command fleetbench measures devata against its simulated fleet in separate
// processes: it builds devata, generates an inventory of N machines, starts
// `devata sim` for it, runs `devata drift`, then injects drift into 1% of the
// machines and runs a converging `devata reconcile --once`, and prints wall
// time, CPU, peak RSS and calls per second beside two baselines (a bare mTLS
// floor and the real talosctl loop). It is a benchmark, not a test: it
// asserts nothing and only reports (main_test.go checks the harness itself
// on a 30-machine fleet).
//
//	go run ./internal/fleetbench -n 1000,10000 [-talosctl] [-json results.json]
//	go run ./internal/fleetbench -n 100000 -large [-stream] -json results-100k.json
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"devata.dev/devata/internal/testenv"
)

// largeFleet is the size above which -large must be given: such a run takes
// many minutes and gigabytes (the sim holds every machine's parsed config).
const largeFleet = 20000

type options struct {
	bin, talosctl  string
	checks         string
	concurrency    int
	driftPercent   float64
	maxUnavailable int
	writeRate      float64
	perSim         int
	stream         bool
}

func main() {
	sizes := flag.String("n", "1000", "comma-separated fleet sizes")
	large := flag.Bool("large", false, fmt.Sprintf("allow sizes above %d (many minutes, and ~1 GiB of sim memory per 10,000 machines)", largeFleet))
	checks := flag.String("checks", "config,talos-version,machine-stage", "checks devata drift and reconcile run")
	concurrency := flag.Int("concurrency", 32, "devata --concurrency")
	jsonOut := flag.String("json", "", "also write the results as JSON to this file")
	withTalosctl := flag.Bool("talosctl", false, "also time the real talosctl loop over 100 machines (builds talosctl once: minutes)")
	driftPercent := flag.Float64("drift-percent", 1, "share of machines whose config is edited behind devata's back before `devata reconcile --once` (0: skip reconcile)")
	maxUnavailable := flag.Int("max-unavailable", 0, "devata reconcile --max-unavailable (default: -concurrency)")
	stream := flag.Bool("stream", false, "devata drift -o json --stream: write results as machines finish instead of holding the report (for the largest fleets)")
	perSim := flag.Int("per-sim", simCapacity(), "most machines one sim process serves (default: from the open-files limit, a listener per machine)")
	writeRate := flag.Float64("write-rate", 0, "devata reconcile --write-rate (0: unlimited; the benchmark measures devata, not the rollout policy)")
	flag.Parse()

	var ns []int
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		check(err)
		if n > largeFleet && !*large {
			check(fmt.Errorf("-n %d: sizes above %d take many minutes and gigabytes; add -large to run them", n, largeFleet))
		}
		ns = append(ns, n)
	}
	o := options{stream: *stream, perSim: max(*perSim, 100), checks: *checks, concurrency: *concurrency, driftPercent: *driftPercent, maxUnavailable: *maxUnavailable, writeRate: *writeRate}
	if o.maxUnavailable < 1 {
		o.maxUnavailable = o.concurrency
	}
	if *withTalosctl {
		var err error
		o.talosctl, err = testenv.Talosctl(context.Background(), os.Stderr)
		check(err)
	}

	work, err := os.MkdirTemp("", "fleetbench-")
	check(err)
	defer os.RemoveAll(work)
	o.bin = filepath.Join(work, "devata")
	fmt.Fprintln(os.Stderr, "building devata…")
	build := exec.Command("go", "build", "-o", o.bin, "./cmd/devata")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	check(build.Run())

	rep := Report{Host: Host{CPUs: runtime.NumCPU(), MemTotalMiB: memTotalMiB(), GoVersion: runtime.Version(), Started: time.Now().UTC().Truncate(time.Second)}}
	for _, n := range ns {
		r, err := measure(o, filepath.Join(work, strconv.Itoa(n)), n)
		check(err)
		rep.Results = append(rep.Results, r)
		// the next size needs the memory and the ports back
		check(os.RemoveAll(filepath.Join(work, strconv.Itoa(n))))
	}
	printTable(os.Stdout, rep)
	if *jsonOut != "" {
		data, _ := json.MarshalIndent(rep, "", "  ")
		check(os.WriteFile(*jsonOut, append(data, '\n'), 0o644))
	}
}

func after(s, prefix string) string {
	if i := strings.Index(s, prefix); i >= 0 {
		return s[i+len(prefix):]
	}
	return ""
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench:", err)
		os.Exit(1)
	}
}
