package render_test

import (
	"fmt"
	"testing"

	"devata.dev/devata/inventory"
	"devata.dev/devata/render"
)

// fleet grows the example inventory to n machines (3 control planes, the rest
// workers alternating between the two worker shapes).
func fleet(tb testing.TB, n int) *inventory.Inventory {
	inv, _ := loadFixture(tb)
	base := inv.Machines
	inv.Machines = nil
	for i := range n {
		var m inventory.Machine
		if i < 3 {
			m = base[i]
		} else {
			m = base[3+i%2]
			m.Name = fmt.Sprintf("worker-%d", i)
		}
		m.Address = fmt.Sprintf("10.%d.%d.%d", 20+i/65536, i/256%256, i%256)
		inv.Machines = append(inv.Machines, m)
	}
	return inv
}

// BenchmarkRender renders a 1,000-machine fleet per iteration and reports the
// cost per machine. Goal: 1,000 machines in ≤ 2 s on the 2-core dev machine.
func BenchmarkRender(b *testing.B) {
	inv := fleet(b, 1000)
	_, bundle := loadFixture(b)
	b.ResetTimer()
	for b.Loop() {
		out, err := render.Render(inv, bundle)
		if err != nil {
			b.Fatal(err)
		}
		if len(out) != 1000 {
			b.Fatalf("rendered %d", len(out))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/machine")
}

// BenchmarkRenderValidated is what every drift and reconcile pass starts
// with: render and validate a 1,000-machine fleet.
func BenchmarkRenderValidated(b *testing.B) {
	inv := fleet(b, 1000)
	_, bundle := loadFixture(b)
	b.ResetTimer()
	for b.Loop() {
		out, err := render.Validated(inv, bundle)
		if err != nil {
			b.Fatal(err)
		}
		if len(out) != 1000 {
			b.Fatalf("rendered %d", len(out))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/machine")
}
