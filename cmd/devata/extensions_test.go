package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simfleet"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/inventory"
)

const longhornTools = "officialExtensions: [siderolabs/iscsi-tools, siderolabs/util-linux-tools]"

// schematicEdit gives the workers of the Talos 1.14 homelab a schematic
// with extensions (written as officialExtensions: [...]).
func schematicEdit(extensions string) func(string) string {
	return func(raw string) string {
		return strings.Replace(raw, "  workers:\n", "  workers:\n    schematic:\n      customization:\n        systemExtensions:\n          "+extensions+"\n", 1)
	}
}

// setWorkerExtensions rewrites the inventory's worker extensions and has
// the simulated Image Factory hold the new schematic, as an operator who
// edits the schematic and creates it at the Factory does.
func setWorkerExtensions(t *testing.T, sf *simFleet, from, to string) {
	t.Helper()
	path := filepath.Join(sf.Dir, "inventory.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(raw), from, to, 1)
	if edited == string(raw) {
		t.Fatalf("the inventory has no %q", from)
	}
	if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for id, s := range simfleet.Schematics(inv) {
		sf.Sim.CreateSchematic(id, s)
	}
}

// System extensions come only with an installer: a Talos 1.14 fleet whose
// workers run their schematic is in sync; once the inventory's schematic
// gains an extension, drift shows it and devata upgrade reinstalls the
// workers at the same version from the new schematic's installer (and
// only them); a schematic that would remove an extension is refused until
// --drop-extensions says so.
func TestUpgradeReinstallsForExtensions(t *testing.T) {
	sf := startSim(t, simtest.Options{Example: examples.HomelabV114Name, Bootstrap: true, TalosVersion: "v1.14.1", EditInventory: schematicEdit(longhornTools)})
	upgrades := func(name string) int {
		m := sf.Sim.Machine(name)
		return m.Calls("MachineService.Upgrade") + m.Calls("LifecycleService.Upgrade")
	}
	if r := devata(t, nil, "drift", "--config", sf.settings, "--checks", "extensions"); r.code != 0 {
		t.Fatalf("extensions as installed: exit %d\n%s%s", r.code, r.stdout, r.err)
	}

	withDRBD := "officialExtensions: [siderolabs/iscsi-tools, siderolabs/util-linux-tools, siderolabs/drbd]"
	setWorkerExtensions(t, sf, longhornTools, withDRBD)
	r := devata(t, nil, "drift", "--config", sf.settings, "--checks", "extensions")
	if r.code != 1 || strings.Count(r.stdout, "+ extension drbd") != 2 || !strings.Contains(r.stdout, "devata upgrade --machines worker-1") {
		t.Fatalf("drift after adding drbd: exit %d\n%s%s", r.code, r.stdout, r.err)
	}

	r = devata(t, nil, "upgrade", "--config", sf.settings, "--dry-run")
	lacks(t, "upgrade --dry-run", r.stdout, "worker-1, worker-2 (2 machines) reinstall Talos v1.14.1 (REBOOTS)", "a reinstall at the same version", "the inventory's installer carries schematic", "(extensions drbd, iscsi-tools, util-linux-tools)")
	if r.code != 1 || strings.Contains(r.stdout, "cp-1, ") {
		t.Fatalf("dry run: exit %d\n%s%s", r.code, r.stdout, r.err)
	}

	r = devata(t, nil, "upgrade", "--config", sf.settings, "--yes", "--wait", "1m")
	if r.code != 0 {
		t.Fatalf("upgrade: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	show(t, r)
	lacks(t, "upgrade", r.stdout, "==> worker-1: reinstall Talos v1.14.1 (factory.talos.dev/metal-installer/", "converged: worker-1, worker-2")
	inv, err := inventory.Load(filepath.Join(sf.Dir, "inventory.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"worker-1", "worker-2"} {
		want := inv.MachineInstallImage(inv.Machine(name))
		if o := sf.Sim.Machine(name).Observe(); o.InstallImage != want || o.TalosVersion != "v1.14.1" || upgrades(name) != 1 {
			t.Errorf("%s: runs %s from %s after %d upgrades; want v1.14.1 from %s after one", name, o.TalosVersion, o.InstallImage, upgrades(name), want)
		}
	}
	for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
		if n := upgrades(name); n != 0 {
			t.Errorf("%s, its schematic unchanged, was sent %d upgrades", name, n)
		}
	}
	if r := devata(t, nil, "drift", "--config", sf.settings, "--checks", "extensions"); r.code != 0 {
		t.Errorf("extensions after the reinstall: exit %d\n%s", r.code, r.stdout)
	}

	// dropping util-linux-tools: refused without --drop-extensions
	setWorkerExtensions(t, sf, withDRBD, "officialExtensions: [siderolabs/iscsi-tools, siderolabs/drbd]")
	r = devata(t, nil, "upgrade", "--config", sf.settings, "--yes", "--wait", "1m")
	lacks(t, "upgrade dropping an extension", r.stdout+r.err, "upgrade refused: it runs system extensions util-linux-tools", "--drop-extensions")
	if r.code == 0 || upgrades("worker-1") != 1 || upgrades("worker-2") != 1 {
		t.Fatalf("an upgrade that drops an extension without --drop-extensions: exit %d, upgrades %d/%d\n%s%s", r.code, upgrades("worker-1"), upgrades("worker-2"), r.stdout, r.err)
	}
	r = devata(t, nil, "upgrade", "--config", sf.settings, "--yes", "--wait", "1m", "--drop-extensions")
	if r.code != 0 || !strings.Contains(r.stdout, "util-linux-tools") {
		t.Fatalf("upgrade --drop-extensions: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if r := devata(t, nil, "drift", "--config", sf.settings, "--checks", "extensions"); r.code != 0 {
		t.Errorf("extensions after the drop: exit %d\n%s", r.code, r.stdout)
	}
	if r := devata(t, nil, "apply", "--config", sf.settings, "--drop-extensions"); r.code != 64 || !strings.Contains(r.err, "goes with --upgrade") {
		t.Errorf("apply --drop-extensions without --upgrade: exit %d\n%s", r.code, r.err)
	}
}
