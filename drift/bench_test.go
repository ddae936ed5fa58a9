package drift_test

import (
	"fmt"
	"io"
	"testing"

	"devata.dev/devata/drift"
)

// fleetResults makes n machines' worth of results, nine checks each.
func fleetResults(n int) ([]drift.Machine, []drift.Result) {
	checks := []struct {
		name string
		rung drift.Rung
	}{
		{"cilium-declaration", drift.RungDeclaration}, {"config", drift.RungReconciliation},
		{"talos-version", drift.RungReconciliation}, {"cilium-agent", drift.RungReconciliation},
		{"machine-stage", drift.RungResources}, {"kubelet", drift.RungResources}, {"etcd", drift.RungResources},
		{"cilium-services", drift.RungInfrastructure}, {"storage", drift.RungInfrastructure},
	}
	machines := make([]drift.Machine, n)
	results := make([]drift.Result, 0, n*len(checks))
	for i := range n {
		name := fmt.Sprintf("node-%d", i)
		machines[i] = drift.Machine{Name: name, Role: "worker", Address: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)}
		for j, c := range checks {
			if (i+j)%97 == 0 {
				results = append(results, drift.Drifted("differs", "a", "b").Of(name, c.name, c.rung).WithNext("devata apply --machines "+name))
				continue
			}
			results = append(results, drift.InSync("observed").Of(name, c.name, c.rung))
		}
	}
	return machines, results
}

// The stream's memory grows with the number of machines (one summary each),
// not with the number of results.
func BenchmarkJSONStream10kMachines(b *testing.B) {
	machines, results := fleetResults(10_000)
	b.ReportAllocs()
	for b.Loop() {
		s := drift.NewJSONStream(io.Discard)
		if err := s.Begin(drift.Header{Cluster: "bench", Machines: machines}); err != nil {
			b.Fatal(err)
		}
		for _, r := range results {
			s.Add(r)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReport10kMachines(b *testing.B) {
	machines, results := fleetResults(10_000)
	b.ReportAllocs()
	for b.Loop() {
		r := drift.NewReport(drift.Header{Cluster: "bench", Machines: machines})
		r.Add(results...)
		r.Finish()
		for _, f := range drift.Formats() {
			if err := drift.Render(io.Discard, f, r, drift.TableOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	}
}
