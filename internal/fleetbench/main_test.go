package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The harness end to end on a fleet small enough for CI: devata built, two
// sim processes, drift, the floor, 10 % drifted and converged by reconcile.
// It checks what the benchmark reports, not how fast: the figures must be
// there and the counts must add up.
func TestMeasureSmallFleet(t *testing.T) {
	t.Chdir("../..") // fleetbench runs from the repository root
	bin := filepath.Join(t.TempDir(), "devata")
	build := exec.Command("go", "build", "-o", bin, "./cmd/devata")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	base := options{bin: bin, checks: "config,talos-version,machine-stage", concurrency: 8, maxUnavailable: 8, perSim: 20}

	t.Run("drift only", func(t *testing.T) {
		const n = 12
		o := base
		r, err := measure(o, filepath.Join(t.TempDir(), "fleet"), n)
		if err != nil {
			t.Fatal(err)
		}
		if r.SimProcesses != 1 || r.SimKubernetes || r.Drift.ExitCode != 0 || r.Floor.ExitCode != 0 || r.Reconcile != nil {
			t.Fatalf("sims %d (kubernetes %t), drift exit %d, floor exit %d, reconcile %v", r.SimProcesses, r.SimKubernetes, r.Drift.ExitCode, r.Floor.ExitCode, r.Reconcile)
		}
		// The calls per second reported for drift rest on driftCalls: with
		// no reconcile, the sim served exactly drift's calls and the floor's
		// one Version per machine.
		if want := driftCalls(n) + n; r.SimCallsTotal != want {
			t.Errorf("the sim served %d calls, want %d (drift %d + floor %d)", r.SimCallsTotal, want, driftCalls(n), n)
		}
		if r.Drift.Seconds <= 0 || r.Drift.CPUSeconds <= 0 || r.Drift.PeakRSSMiB <= 0 || r.SimPeakRSSMiB <= 0 || r.DriftOnFloor <= 0 {
			t.Errorf("missing figures: %+v", r)
		}
		if m := memTotalMiB(); m <= 0 {
			t.Errorf("host memory read as %v MiB from /proc/meminfo", m)
		}
	})

	t.Run("two sims and a converging reconcile", func(t *testing.T) {
		const n = 30 // 27 workers, at most 17 per sim beside the control planes
		o := base
		o.driftPercent = 10
		r, err := measure(o, filepath.Join(t.TempDir(), "fleet"), n)
		if err != nil {
			t.Fatal(err)
		}
		if r.SimProcesses != 2 || r.Drift.ExitCode != 0 {
			t.Fatalf("sims %d, drift exit %d", r.SimProcesses, r.Drift.ExitCode)
		}
		rec := r.Reconcile
		if rec == nil || rec.Drifted != 3 || rec.ExitCode != 0 || !rec.Converged || rec.Outcomes["converged"] != rec.Drifted {
			t.Fatalf("reconcile: %+v", rec)
		}
		var b strings.Builder
		printTable(&b, Report{Results: []Result{r}})
		for _, want := range []string{"converged 3", "drift/floor", "reconcile --once"} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("table lacks %q:\n%s", want, b.String())
			}
		}
	})
}

// The sims start Kubernetes only for a check that reads it: the default
// checks read the Talos API alone.
func TestNeedsKubernetes(t *testing.T) {
	for _, tc := range []struct {
		checks string
		want   bool
	}{
		{"config,talos-version,machine-stage", false},
		{"config, etcd", false},
		{"config,kubelet", true},
		{"cilium-agent", true},
		{"storage-volumes,storage-mounts", false},
	} {
		if got := needsKubernetes(tc.checks); got != tc.want {
			t.Errorf("needsKubernetes(%q) = %t, want %t", tc.checks, got, tc.want)
		}
	}
}
