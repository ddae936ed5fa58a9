package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/drift"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
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

// talosctl's conventions (issue 17): -n selects machines as --machines
// does; -e sends every call through the endpoint given (cp-1: with cp-1
// down, worker-1 is out of reach through it, though up); --context picks a
// context, and an unknown one is named with those there are; next steps
// name the node as devata reached it.
func TestTalosctlNodesEndpointsContext(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	r := devata(t, nil, "drift", "--config", sf.settings, machineChecks, "-o", "json", "-n", "10.20.0.22", "-n", "cp-1")
	if r.code != 0 {
		t.Fatalf("-n: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	var rep drift.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range rep.Machines {
		got = append(got, m.Name)
	}
	if want := []string{"cp-1", "worker-2"}; !slices.Equal(got, want) {
		t.Errorf("-n covers %v, want %v", got, want)
	}

	cp1 := sf.Overrides["cp-1"]
	r = devata(t, nil, "drift", "--config", sf.settings, machineChecks, "-e", cp1, "--context", "homelab")
	if r.code != 0 {
		t.Fatalf("-e %s --context homelab: exit %d\n%s%s", cp1, r.code, r.stdout, r.err)
	}

	// the endpoint is down: worker-1, up, is out of reach through it, and
	// the hint reaches it the way devata did
	sf.Sim.Machine("cp-1").SetFaults(sim.Faults{Unreachable: true})
	if r = devata(t, nil, "drift", "--config", sf.settings, machineChecks, "-n", "worker-1"); r.code != 0 {
		t.Fatalf("worker-1 dialed directly: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	r = devata(t, nil, "drift", "--config", sf.settings, machineChecks, "-e", cp1, "--context", "homelab", "-n", "worker-1", "-o", "json")
	if r.code != 2 {
		t.Fatalf("worker-1 through a down endpoint: exit %d, want 2\n%s%s", r.code, r.stdout, r.err)
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	want := "talosctl --context homelab -e " + cp1 + " -n " + sf.Overrides["worker-1"] + " version"
	if len(rep.Results) == 0 || !strings.Contains(rep.Results[0].Next, want) {
		t.Errorf("next step does not reach worker-1 as devata did (%s): %+v", want, rep.Results)
	}

	r = devata(t, nil, "drift", "--config", sf.settings, machineChecks, "--context", "nope")
	if r.code != 2 || !strings.Contains(r.err, `no context "nope" (it has "homelab")`) {
		t.Errorf("unknown context: exit %d\n%s", r.code, r.err)
	}
}
