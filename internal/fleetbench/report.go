package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what -json writes.
type Report struct {
	Host    Host     `json:"host"`
	Results []Result `json:"results"`
}

// Host says where the figures were taken.
type Host struct {
	CPUs        int       `json:"cpus"`
	MemTotalMiB float64   `json:"memTotalMiB"`
	GoVersion   string    `json:"goVersion"`
	Started     time.Time `json:"started"`
}

// Run is one measured process (or, for the floor, one in-process loop).
type Run struct {
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpuSeconds,omitempty"`
	PeakRSSMiB float64 `json:"peakRSSMiB,omitempty"`
	ExitCode   int     `json:"exitCode"`
	// SimCPUSeconds is what the sim spent meanwhile, on the same cores.
	SimCPUSeconds float64 `json:"simCPUSeconds,omitempty"`
	// LoopbackBytes is what crossed the loopback interface meanwhile, both
	// directions, TCP/IP headers included (and anything else using loopback).
	LoopbackBytes int64 `json:"loopbackBytes,omitempty"`
	// Load averages (1, 5, 15 min) when the run started and ended: a busy
	// machine makes wall times noisy.
	LoadStart [3]float64 `json:"loadAverageStart"`
	LoadEnd   [3]float64 `json:"loadAverageEnd"`
}

// Reconcile is the converging `devata reconcile --once` after drift was
// injected behind devata's back.
type Reconcile struct {
	Run
	Drifted   int            `json:"driftedMachines"`
	Outcomes  map[string]int `json:"outcomes"`
	Converged bool           `json:"converged"` // every drifted machine runs its desired config again
	Flags     []string       `json:"flags"`
}

// Result is one fleet size.
type Result struct {
	Machines     int `json:"machines"`
	Concurrency  int `json:"concurrency"`
	SimProcesses int `json:"simProcesses"`
	// SimKubernetes: the sims ran a kube-apiserver and their kubelets (only
	// when a check reads Kubernetes).
	SimKubernetes   bool     `json:"simKubernetes"`
	SimStartSeconds float64  `json:"simStartSeconds"`
	SimPeakRSSMiB   float64  `json:"simPeakRSSMiB"`
	Drift           Run      `json:"drift"`
	DriftFlags      []string `json:"driftFlags"`
	Calls           int      `json:"driftCalls"`
	CallsPerSecond  float64  `json:"driftCallsPerSecond"`
	// SimCallsTotal is every call the sim served, over all the runs.
	SimCallsTotal int `json:"simCallsTotal"`
	// Floor: one mTLS dial and one Version call per machine, same concurrency.
	Floor        Run     `json:"floor"`
	DriftOnFloor float64 `json:"driftOnFloor"`
	// Over the first 100 machines: devata drift, and the talosctl loop operators
	// script (get machineconfig + service kubelet, one process per call).
	Drift100      *Run       `json:"drift100,omitempty"`
	Talosctl100   *Run       `json:"talosctl100,omitempty"`
	TalosctlRatio float64    `json:"talosctlOnDrift100,omitempty"`
	Reconcile     *Reconcile `json:"reconcile,omitempty"`
}

func printTable(w io.Writer, rep Report) {
	fmt.Fprintf(w, "%d CPUs, %.0f MiB; load averages (1 min) at the start and end of each run in brackets\n\n", rep.Host.CPUs, rep.Host.MemTotalMiB)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "machines\tsims\tsim start\tsim RSS\tdrift wall\tdrift CPU\tsim CPU\tdrift RSS\tcalls/s\tKiB/machine\texit\tfloor\tdrift/floor\tload\t")
	for _, r := range rep.Results {
		d := r.Drift
		fmt.Fprintf(tw, "%d\t%d\t%.1fs\t%.0f MiB\t%.2fs\t%.2fs\t%.2fs\t%.0f MiB\t%.0f\t%.1f\t%d\t%.2fs\t%.2f×\t%s\t\n",
			r.Machines, r.SimProcesses, r.SimStartSeconds, r.SimPeakRSSMiB, d.Seconds, d.CPUSeconds, d.SimCPUSeconds, d.PeakRSSMiB, r.CallsPerSecond, float64(d.LoopbackBytes)/1024/float64(r.Machines), d.ExitCode,
			r.Floor.Seconds, r.DriftOnFloor, loads(d))
	}
	tw.Flush()
	var rec, tal []Result
	for _, r := range rep.Results {
		if r.Reconcile != nil {
			rec = append(rec, r)
		}
		if r.Talosctl100 != nil {
			tal = append(tal, r)
		}
	}
	if len(rec) > 0 {
		fmt.Fprintln(w, "\nreconcile --once after drifting some machines' configs behind devata's back:")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "machines\tdrifted\twall\tCPU\tsim CPU\tpeak RSS\texit\tconverged\toutcomes\tload\t")
		for _, r := range rec {
			c := r.Reconcile
			fmt.Fprintf(tw, "%d\t%d\t%.2fs\t%.2fs\t%.2fs\t%.0f MiB\t%d\t%v\t%s\t%s\t\n", r.Machines, c.Drifted, c.Seconds, c.CPUSeconds, c.SimCPUSeconds, c.PeakRSSMiB, c.ExitCode, c.Converged, outcomes(c.Outcomes), loads(c.Run))
		}
		tw.Flush()
		fmt.Fprintf(w, "(flags: %s)\n", strings.Join(rec[0].Reconcile.Flags, " "))
	}
	for _, r := range tal {
		fmt.Fprintf(w, "\n100 machines (of %d): talosctl loop %.2fs, devata drift %.2fs: devata is %.1f× faster %s\n", r.Machines, r.Talosctl100.Seconds, r.Drift100.Seconds, r.TalosctlRatio, loads(*r.Talosctl100))
	}
}

func loads(r Run) string { return fmt.Sprintf("[%.2f→%.2f]", r.LoadStart[0], r.LoadEnd[0]) }

func outcomes(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
