package main

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
)

// devata plan names the config contract it renders for and why (issue 30
// item 2): the oldest release a machine runs, each machine older than
// cluster.talosVersion named with the release it runs, and its dry runs
// are of the config that release accepts, so the 1.14 documents of the
// inventory (DiscoveryServiceConfig, KubeletConfig, …) never block a 1.13
// machine; the target when none runs an older one; the target, said so,
// when no machine answers with its version.
func TestPlanNamesItsConfigContract(t *testing.T) {
	type contract struct {
		Talos, Target, Reason string
		Older                 []struct {
			Machine, Runs, Talos string
			Maintenance          bool
		}
	}
	plan := func(t *testing.T, sf *simFleet, format string) (contract, string) {
		t.Helper()
		r := devata(t, nil, "plan", "--config", sf.settings, "-o", format, "--skip-nodes")
		if r.code == exitTrouble {
			t.Fatalf("plan -o %s: exit %d\n%s%s", format, r.code, r.stdout, r.err)
		}
		var p struct {
			Contract contract
			Blocked  int
		}
		if format == "json" {
			if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
				t.Fatalf("%v\n%s", err, r.stdout)
			}
			if p.Blocked != 0 {
				t.Errorf("%d steps blocked:\n%s", p.Blocked, r.stdout)
			}
		}
		return p.Contract, r.stdout
	}

	t.Run("OldestRunning", func(t *testing.T) {
		sf := startSim(t, simtest.Options{Example: examples.HomelabV114Name, Bootstrap: true, TalosVersion: "v1.13.9", DesiredKubernetesVersion: "v1.36.3"})
		c, _ := plan(t, sf, "json")
		if c.Talos != "1.13" || c.Target != "v1.14.1" || len(c.Older) != 5 || c.Older[0].Machine != "cp-1" || c.Older[0].Runs != "v1.13.9" || c.Older[0].Talos != "1.13" {
			t.Errorf("contract %+v; want 1.13 for the five machines on v1.13.9, target v1.14.1", c)
		}
		if !strings.Contains(c.Reason, "the oldest release a machine runs (cp-1 runs v1.13.9, ") {
			t.Errorf("reason %q", c.Reason)
		}
		_, text := plan(t, sf, "text")
		if !strings.Contains(text, "\ncontract: configs rendered for the Talos 1.13 config contract: the oldest release a machine runs (cp-1 runs v1.13.9,") {
			t.Errorf("text plan lacks the contract line:\n%s", text)
		}
		_, md := plan(t, sf, "markdown")
		if !strings.Contains(md, "\n- Config contract: configs rendered for the Talos 1.13 config contract: the oldest release a machine runs") {
			t.Errorf("runbook lacks the contract line:\n%s", md)
		}
	})

	t.Run("Target", func(t *testing.T) {
		sf := startSim(t, simtest.Options{Example: examples.HomelabV114Name, Bootstrap: true, TalosVersion: "v1.14.1"})
		c, _ := plan(t, sf, "json")
		if c.Talos != "1.14" || c.Target != "v1.14.1" || len(c.Older) != 0 ||
			c.Reason != "cluster.talosVersion v1.14.1, since no machine runs an older release (5 of 5 answered with their version)" {
			t.Errorf("contract %+v; want the target's", c)
		}
	})

	t.Run("MaintenanceSaysWhatItBoots", func(t *testing.T) {
		sf := startSim(t, simtest.Options{Example: examples.HomelabV114Name, TalosVersion: "v1.13.9", DesiredKubernetesVersion: "v1.36.3", Maintenance: allMachines})
		c, _ := plan(t, sf, "json")
		if c.Talos != "1.13" || len(c.Older) != 5 || c.Older[0].Runs != "v1.13.9" || !c.Older[0].Maintenance {
			t.Errorf("contract %+v; want 1.13 for the five machines booted from v1.13.9 in maintenance mode", c)
		}
	})

	t.Run("NoneAnswers", func(t *testing.T) {
		// in maintenance mode on Talos 1.11 Version is Unimplemented; with
		// the Version resource refused too no machine says its version
		sf := startSim(t, simtest.Options{Maintenance: allMachines})
		for _, m := range allMachines {
			sf.Sim.Machine(m).SetFaults(sim.Faults{ErrorCodes: map[string]codes.Code{"State.Get": codes.PermissionDenied}})
		}
		c, _ := plan(t, sf, "json")
		if c.Talos != "1.11" || len(c.Older) != 0 || !strings.Contains(c.Reason, "since no machine answered with its Talos version") {
			t.Errorf("contract %+v; want the target's, none answered", c)
		}
	})
}
