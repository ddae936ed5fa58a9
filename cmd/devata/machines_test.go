package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/drift"
	"devata.dev/devata/internal/simtest"
)

// --machines takes a machine's name, its address or its host:port, as
// talosctl -n takes nodes (issue 17); anything else is named in the error.
func TestMachinesByNameOrAddress(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	r := devata(t, nil, "drift", "--config", sf.settings, machineChecks, "-o", "json", "--machines", "10.20.0.21,cp-2,10.20.0.13:50000")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	var rep drift.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range rep.Machines {
		got = append(got, m.Name)
	}
	if want := []string{"cp-2", "cp-3", "worker-1"}; !slices.Equal(got, want) {
		t.Errorf("report covers %v, want %v", got, want)
	}

	r = devata(t, nil, "apply", "--config", sf.settings, "--dry-run", "--machines", "10.20.0.22")
	if r.code != 0 || !strings.Contains(r.stdout, "worker-2") || strings.Contains(r.stdout, "cp-1") {
		t.Errorf("apply --machines by address: exit %d\n%s%s", r.code, r.stdout, r.err)
	}

	r = devata(t, nil, "drift", "--config", sf.settings, machineChecks, "--machines", "10.20.0.99")
	if r.code != 2 || !strings.Contains(r.err, `no machine named "10.20.0.99", or with that address`) {
		t.Errorf("unknown address: exit %d\n%s", r.code, r.err)
	}
}
