package sim_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"devata.dev/devata/sim"
)

// BenchmarkFleet starts a fleet of configured machines and reports the heap
// and goroutines each costs, for the ≥10,000-machine target.
func BenchmarkFleet(b *testing.B) {
	cp, wk := baseConfigs(b)

	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			specs := make([]sim.MachineSpec, n)
			for i := range specs {
				specs[i] = sim.MachineSpec{Name: fmt.Sprintf("m-%d", i), Role: "worker", Config: wk}
				if i < 3 {
					specs[i] = sim.MachineSpec{Name: fmt.Sprintf("m-%d", i), Role: "controlplane", Config: cp}
				}
			}

			for b.Loop() {
				runtime.GC()

				var before, after runtime.MemStats

				runtime.ReadMemStats(&before)
				goroutines := runtime.NumGoroutine()

				f, err := sim.Start(b.Context(), sim.Options{Bundle: bundle, Machines: specs, RebootDelay: time.Second})
				if err != nil {
					b.Fatal(err)
				}

				runtime.GC()
				runtime.ReadMemStats(&after)

				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "heap-B/machine")
				b.ReportMetric(float64(runtime.NumGoroutine()-goroutines)/float64(n), "goroutines/machine")

				if err := f.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
