package storagecheck_test

import (
	"testing"
	"time"

	"devata.dev/devata/checks"
	"devata.dev/devata/drift"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/storagecheck"
)

// The storage checks read a machine's storage once per pass, on the
// target's connection, whichever of them run: four checks, one Mounts call
// per machine (the sim counts the calls apid routes to each machine).
func TestStorageReadOncePerMachinePerPass(t *testing.T) {
	f := simtest.Start(t, simtest.Options{})
	before := map[string]int{}
	for _, m := range f.Sim.Machines() {
		before[m.Name()] = m.Calls("Mounts")
	}
	fc := &checks.FleetCheck{Inventory: f.Inventory, Desired: f.Desired, Dialer: f.Dialer,
		Checks:   []string{storagecheck.CheckDeclaration, storagecheck.CheckVolumes, storagecheck.CheckMounts, storagecheck.CheckRawDisks},
		Families: storagecheck.Checks(), Concurrency: 4, Timeout: 10 * time.Second}
	rep, err := fc.Report(t.Context(), drift.Header{Cluster: "homelab"})
	if err != nil {
		t.Fatal(err)
	}
	if want := 4 * len(f.Inventory.Machines); len(rep.Results) != want {
		t.Fatalf("%d results, want %d", len(rep.Results), want)
	}
	for _, r := range rep.Results {
		if r.Status == drift.StatusUnknown {
			t.Errorf("%s %s Unknown: %s", r.Machine, r.Check, r.Reason)
		}
	}
	for _, m := range f.Sim.Machines() {
		if n := m.Calls("Mounts") - before[m.Name()]; n != 1 {
			t.Errorf("%s: %d Mounts calls in one pass of four storage checks, want 1", m.Name(), n)
		}
	}
}
