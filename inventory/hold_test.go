package inventory_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"devata.dev/devata/inventory"
)

func TestWindowAt(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	inv := &inventory.Inventory{Cluster: inventory.Cluster{MaintenanceWindows: []inventory.MaintenanceWindow{
		{Name: "monday-night", Days: []string{"mon"}, Start: "23:00", Duration: "3h", TimeZone: "Europe/Berlin"},
		{Name: "saturday", Days: []string{"Sat"}, Start: "10:00", Duration: "90m"},
	}}}
	all := &inventory.Machine{Name: "w1"}
	onlySat := &inventory.Machine{Name: "w2", MaintenanceWindows: []string{"saturday"}}
	none := &inventory.Inventory{}
	// 2026-12-07 is a Monday
	for _, tc := range []struct {
		name     string
		m        *inventory.Machine
		at       time.Time
		open     string
		next     string
		nextWhen time.Time
	}{
		{"before monday's window", all, time.Date(2026, 12, 7, 22, 59, 0, 0, berlin), "", "monday-night", time.Date(2026, 12, 7, 23, 0, 0, 0, berlin)},
		{"inside, across midnight", all, time.Date(2026, 12, 8, 1, 30, 0, 0, berlin), "monday-night", "", time.Time{}},
		{"closed at its end", all, time.Date(2026, 12, 8, 2, 0, 0, 0, berlin), "", "saturday", time.Date(2026, 12, 12, 10, 0, 0, 0, time.UTC)},
		{"saturday in UTC", all, time.Date(2026, 12, 12, 11, 29, 0, 0, time.UTC), "saturday", "", time.Time{}},
		{"a machine with saturday only, on monday night", onlySat, time.Date(2026, 12, 7, 23, 30, 0, 0, berlin), "", "saturday", time.Date(2026, 12, 12, 10, 0, 0, 0, time.UTC)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := inv.WindowAt(tc.m, tc.at)
			if !s.Any || s.Open != tc.open || s.Next != tc.next || !s.NextAt.Equal(tc.nextWhen) {
				t.Fatalf("WindowAt(%s, %s) = %+v, want open %q, next %q at %s", tc.m.Name, tc.at, s, tc.open, tc.next, tc.nextWhen)
			}
			if s.Allows() != (tc.open != "") {
				t.Errorf("Allows() = %v with open %q", s.Allows(), tc.open)
			}
		})
	}
	if s := none.WindowAt(all, time.Now()); s.Any || !s.Allows() {
		t.Errorf("no windows declared: %+v, want any time", s)
	}
}

// A group's hold and maintenance windows reach its machines; a machine's
// own win (issue 36: "a machine or group marked held").
func TestGroupHoldsAndWindows(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(path, []byte(`apiVersion: devata.dev/v1alpha1
kind: Inventory
cluster:
  name: lab
  endpoint: https://10.0.0.10:6443
  maintenanceWindows:
    - {name: nightly, start: "02:00", duration: 3h}
    - {name: weekend, days: [sat, sun], start: "10:00", duration: 8h}
groups:
  - name: pool-a
    selector: {matchLabels: {example.com/pool: a}}
    hold: {reason: "rack move"}
    maintenanceWindows: [weekend]
machines:
  - {name: cp-1, role: controlplane, address: 10.0.0.11, installDisk: /dev/sda}
  - {name: w-1, role: worker, address: 10.0.0.21, installDisk: /dev/sda, labels: {example.com/pool: a}}
  - {name: w-2, role: worker, address: 10.0.0.22, installDisk: /dev/sda, labels: {example.com/pool: a}, hold: {reason: "disk swap"}, maintenanceWindows: [nightly]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	hold := func(name string) string {
		if h := inv.Machine(name).ActiveHold(); h != nil {
			return h.Reason
		}
		return ""
	}
	windows := func(name string) []string {
		var out []string
		for _, w := range inv.WindowsOf(inv.Machine(name)) {
			out = append(out, w.Name)
		}
		return out
	}
	for _, tc := range []struct {
		machine, hold string
		windows       []string
	}{
		{"cp-1", "", []string{"nightly", "weekend"}},
		{"w-1", "group pool-a: rack move", []string{"weekend"}},
		{"w-2", "disk swap", []string{"nightly"}},
	} {
		if got := hold(tc.machine); got != tc.hold {
			t.Errorf("%s held %q, want %q", tc.machine, got, tc.hold)
		}
		if got := windows(tc.machine); !slices.Equal(got, tc.windows) {
			t.Errorf("%s windows %v, want %v", tc.machine, got, tc.windows)
		}
	}
}
