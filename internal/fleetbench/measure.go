package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func measure(o options, dir string, n int) (Result, error) {
	r := Result{Machines: n, Concurrency: o.concurrency}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return r, err
	}
	parts, endpoints, err := writeInventory(dir, n, o.perSim)
	if err != nil {
		return r, err
	}
	kube := needsKubernetes(o.checks)
	fmt.Fprintf(os.Stderr, "%d machines: starting devata sim (%d process(es), --kubernetes=%t)…\n", n, len(parts), kube)
	start := time.Now()
	s, err := startSims(o.bin, dir, parts, endpoints, kube)
	defer s.kill()
	if err != nil {
		return r, err
	}
	r.SimStartSeconds = time.Since(start).Seconds()
	r.SimProcesses = len(parts)
	r.SimKubernetes = kube

	fmt.Fprintf(os.Stderr, "%d machines: devata drift…\n", n)
	driftArgs := []string{"drift", "--config", s.config(), "--checks", o.checks, "--concurrency", strconv.Itoa(o.concurrency), "-o", "json"}
	if o.stream {
		driftArgs = append(driftArgs, "--stream")
	}
	r.DriftFlags = driftArgs[3:]
	var stderr string
	r.Drift, stderr = runDevata(o.bin, s, driftArgs, io.Discard)
	if r.Drift.ExitCode != 0 {
		fmt.Fprintf(os.Stderr, "devata drift exited %d: %s\n", r.Drift.ExitCode, lastLines(stderr, 5))
	}
	r.Calls = driftCalls(n)
	r.CallsPerSecond = float64(r.Calls) / r.Drift.Seconds

	fmt.Fprintf(os.Stderr, "%d machines: floor (dial + Version each)…\n", n)
	if r.Floor, err = floor(s, o.concurrency); err != nil {
		return r, err
	}
	r.DriftOnFloor = r.Drift.Seconds / r.Floor.Seconds
	if o.talosctl != "" {
		fmt.Fprintf(os.Stderr, "%d machines: devata drift and the talosctl loop over 100 machines…\n", n)
		d, t, err := hundred(o, s)
		if err != nil {
			return r, err
		}
		r.Drift100, r.Talosctl100, r.TalosctlRatio = &d, &t, t.Seconds/d.Seconds
	}
	if o.driftPercent > 0 {
		fmt.Fprintf(os.Stderr, "%d machines: drift %.3g%% of the configs behind devata's back, then devata reconcile --once…\n", n, o.driftPercent)
		rec, err := reconcileRun(o, s, dir, n)
		if err != nil {
			return r, err
		}
		r.Reconcile = rec
	}
	r.SimPeakRSSMiB = s.peakRSS()
	r.SimCallsTotal = s.stop()
	return r, nil
}

// driftCalls is the number of Talos API calls one drift pass makes with the
// benchmark's checks: Version, both MachineConfigs, MachineStatus and the
// kubelet service per machine, and the etcd service, members and status on
// each of the three control planes (talosapi.ObserveWith). The sim counts only a
// total when it stops, over every run; a drift-only run served exactly this.
func driftCalls(n int) int { return 5*n + 3*min(n, 3) }

// runDevata runs one devata command to its end and measures it.
func runDevata(bin string, s *simFleet, args []string, stdout io.Writer) (Run, string) {
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Stdout = cleanEnv(), stdout
	var stderr strings.Builder
	cmd.Stderr = &stderr
	r := Run{LoadStart: loadAvg()}
	simBefore, loBefore := s.cpu(), loopbackBytes()
	start := time.Now()
	err := cmd.Run()
	r.Seconds = time.Since(start).Seconds()
	r.SimCPUSeconds = s.cpu() - simBefore
	r.LoopbackBytes = loopbackBytes() - loBefore
	r.LoadEnd = loadAvg()
	if cmd.ProcessState == nil {
		r.ExitCode = -1
		return r, fmt.Sprintf("%v\n%s", err, stderr.String())
	}
	r.ExitCode = cmd.ProcessState.ExitCode()
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.PeakRSSMiB = float64(ru.Maxrss) / 1024
		r.CPUSeconds = tv(ru.Utime) + tv(ru.Stime)
	}
	return r, stderr.String()
}
