package inventory_test

import (
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
