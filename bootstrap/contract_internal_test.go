package bootstrap

import (
	"errors"
	"path/filepath"
	"testing"

	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// A machine in maintenance mode is configured for the release it booted,
// and counts toward the contract as one that runs it. When it could not
// say which (talosapi detectMaintenance read neither Version nor the
// Version resource), the release comes from what is known, in this order
// and said each time: the oldest release another machine runs, the
// snapshot sidecar's Talos version on --recover-from, cluster.talosVersion.
func TestBootReleaseOfAMachineInMaintenanceMode(t *testing.T) {
	inv, err := inventory.Load(filepath.Join("..", "examples", "homelab-v1.14", "inventory.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	unread := errors.New("the Version resource: not authorized (PermissionDenied)")
	maint := func(version string) *talosapi.Observation {
		o := &talosapi.Observation{Maintenance: true, Err: errors.New("maintenance mode"), Version: version}
		if version == "" {
			o.VersionErr = unread
		}
		return o
	}
	configured := func(version string) *talosapi.Observation { return &talosapi.Observation{Version: version} }
	down := &talosapi.Observation{Err: errors.New("not reachable"), Version: ""}

	for _, tc := range []struct {
		name                string
		obs                 map[string]*talosapi.Observation
		recoverTalos        string
		want, why, contract string
	}{
		{"it says", map[string]*talosapi.Observation{"cp-1": maint("v1.13.9"), "cp-2": configured("v1.14.1")}, "",
			"v1.13.9", "it boots v1.13.9", "1.13"},
		{"the oldest other", map[string]*talosapi.Observation{"cp-1": maint(""), "cp-2": configured("v1.14.1"), "cp-3": maint("v1.13.9"), "worker-1": down}, "v1.12.4",
			"v1.13.9", "its Talos version could not be read (the Version resource: not authorized (PermissionDenied)); the oldest release another machine runs: cp-3 runs v1.13.9", "1.13"},
		{"the sidecar", map[string]*talosapi.Observation{"cp-1": maint(""), "worker-1": down}, "v1.13.2",
			"v1.13.2", "its Talos version could not be read (the Version resource: not authorized (PermissionDenied)); the Talos version the snapshot's sidecar recorded: v1.13.2", "1.13"},
		{"the target", map[string]*talosapi.Observation{"cp-1": maint("")}, "",
			"v1.14.1", "its Talos version could not be read (the Version resource: not authorized (PermissionDenied)) and no other machine said its own; cluster.talosVersion v1.14.1", "1.14"},
	} {
		s := &Sequence{inv: inv, st: &fleetState{obs: tc.obs}, opts: Options{RecoverTalos: tc.recoverTalos}}
		got, why := s.bootRelease(inv.Machine("cp-1"))
		if got != tc.want || why != tc.why || s.contractName(got) != tc.contract {
			t.Errorf("%s: %s for the %s contract (%s); want %s for %s (%s)", tc.name, got, s.contractName(got), why, tc.want, tc.contract, tc.why)
		}
	}

	st := &fleetState{obs: map[string]*talosapi.Observation{"cp-1": maint("v1.13.9"), "cp-2": configured("v1.14.1"), "cp-3": maint("")}}
	c := contractOf(inv, st)
	if c.Talos != "1.13" || len(c.Older) != 1 || !c.Older[0].Maintenance ||
		c.Reason != "the oldest release a machine runs (cp-1 runs v1.13.9 in maintenance mode; cluster.talosVersion is v1.14.1): each machine older than v1.14.1 gets a config its own release accepts until it is upgraded, the others v1.14.1's" {
		t.Errorf("contract %+v; want 1.13 for cp-1 in maintenance mode on v1.13.9", c)
	}
}
