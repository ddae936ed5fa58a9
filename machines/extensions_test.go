package machines_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/checks"
	"devata.dev/devata/drift"
	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
	"devata.dev/devata/sim"
)

// workerSchematic gives the workers of the Talos 1.14 homelab a schematic
// of their own (Longhorn's iSCSI and util-linux tools).
const workerSchematic = `  workers:
    schematic:
      customization:
        systemExtensions:
          officialExtensions: [siderolabs/iscsi-tools, siderolabs/util-linux-tools]
        extraKernelArgs: [net.ifnames=0]
`

func withWorkerSchematic(schematic string) func(string) string {
	return func(raw string) string {
		return strings.Replace(raw, "  workers:\n", schematic, 1)
	}
}

// inventoryVariant loads f's inventory with edit applied, as an operator's
// edited copy of it (its patches beside it).
func inventoryVariant(t *testing.T, f *simtest.Fleet, edit func(string) string) *inventory.Inventory {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(f.Dir, "inventory.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(f.Dir, "edited.yaml")
	if err := os.WriteFile(path, []byte(edit(string(raw))), 0o644); err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func extensionsReport(t *testing.T, f *simtest.Fleet, inv *inventory.Inventory) *drift.Report {
	t.Helper()
	rep := drift.NewReport(drift.Header{Cluster: inv.Cluster.Name, Simulated: true})
	fc := &checks.FleetCheck{Inventory: inv, Desired: f.Desired, Dialer: f.Dialer, Checks: []string{machines.CheckExtensions}, Concurrency: 4, Timeout: 5 * time.Second}
	if err := fc.Run(context.Background(), rep); err != nil {
		t.Fatal(err)
	}
	rep.Finish()
	return rep
}

// The extensions check against a Talos 1.14 fleet whose workers booted
// from their schematic's Image Factory installer and whose control planes
// from the empty schematic's: in sync as installed; drifted, with the
// extensions to add and drop and the upgrade that fixes it, once the
// inventory's worker schematic changes; unknown for an unreachable machine.
func TestExtensionsCheck(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Example: examples.HomelabV114Name, TalosVersion: "v1.14.1", EditInventory: withWorkerSchematic("  workers:\n" + strings.TrimPrefix(workerSchematic, "  workers:\n"))})

	rep := extensionsReport(t, f, f.Inventory)
	if got := len(rep.Results); got != 5 {
		t.Fatalf("%d results, want one per machine:\n%v", got, rep.Results)
	}
	for _, r := range rep.Results {
		want := "ExtensionStatus: the empty schematic, no extensions"
		if strings.HasPrefix(r.Machine, "worker-") {
			want = "ExtensionStatus: schematic " + f.Inventory.SchematicOf(f.Inventory.Machine(r.Machine)).ID()[:8] + ", extensions iscsi-tools, util-linux-tools"
		}
		if r.Status != drift.StatusInSync || !slices.Contains(r.Evidence, want) {
			t.Errorf("%s: %s %q, evidence %q; want in sync with %q", r.Machine, r.Status, r.Reason, r.Evidence, want)
		}
		if strings.HasPrefix(r.Machine, "worker-") && !slices.Contains(r.Evidence, "KernelCmdline has net.ifnames=0") {
			t.Errorf("%s: evidence %q lacks the kernel argument", r.Machine, r.Evidence)
		}
	}

	// the inventory now wants drbd instead of the util-linux tools
	edited := inventoryVariant(t, f, func(raw string) string {
		return strings.Replace(raw, "officialExtensions: [siderolabs/iscsi-tools, siderolabs/util-linux-tools]", "officialExtensions: [siderolabs/iscsi-tools, siderolabs/drbd]", 1)
	})
	f.Sim.Machine("worker-2").SetFaults(sim.Faults{Unreachable: true})
	rep = extensionsReport(t, f, edited)

	w1 := statusOf(rep, "worker-1", machines.CheckExtensions)
	if w1.Status != drift.StatusDrifted || !strings.Contains(w1.Reason, "schematic is not the inventory's") {
		t.Fatalf("worker-1: %s %q, want drifted: another schematic", w1.Status, w1.Reason)
	}
	if !slices.Equal(w1.Changes, []string{"+ extension drbd", "- extension util-linux-tools"}) {
		t.Errorf("worker-1 changes %q, want drbd added and util-linux-tools dropped", w1.Changes)
	}
	if !strings.Contains(w1.Next, "devata upgrade --machines worker-1 --drop-extensions") || !strings.Contains(w1.Next, edited.SchematicOf(edited.Machine("worker-1")).ID()) {
		t.Errorf("worker-1 next %q, want the upgrade with --drop-extensions to the new schematic's installer", w1.Next)
	}
	if w1.Desired == w1.Actual || !strings.Contains(w1.Desired, "drbd") || !strings.Contains(w1.Actual, "util-linux-tools") {
		t.Errorf("worker-1 desired %q actual %q", w1.Desired, w1.Actual)
	}
	if r := statusOf(rep, "worker-2", machines.CheckExtensions); r.Status != drift.StatusUnknown {
		t.Errorf("unreachable worker-2: %s %q, want unknown", r.Status, r.Reason)
	}
	if r := statusOf(rep, "cp-1", machines.CheckExtensions); r.Status != drift.StatusInSync {
		t.Errorf("cp-1 (its schematic unchanged): %s %q", r.Status, r.Reason)
	}

	// adding an extension drops none: a plain upgrade fixes it
	added := inventoryVariant(t, f, func(raw string) string {
		return strings.Replace(raw, "officialExtensions: [siderolabs/iscsi-tools, siderolabs/util-linux-tools]", "officialExtensions: [siderolabs/iscsi-tools, siderolabs/util-linux-tools, siderolabs/drbd]", 1)
	})
	w1 = statusOf(extensionsReport(t, f, added), "worker-1", machines.CheckExtensions)
	if w1.Status != drift.StatusDrifted || !slices.Equal(w1.Changes, []string{"+ extension drbd"}) || strings.Contains(w1.Next, "--drop-extensions") || !strings.Contains(w1.Next, "devata upgrade --machines worker-1") {
		t.Errorf("worker-1 with drbd added: %s changes %q next %q", w1.Status, w1.Changes, w1.Next)
	}
}
