package main

import (
	"testing"
	"time"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
)

// One control plane unreachable from the start: apply of no-reboot
// changes to cp-1 and worker-1 ends at once at cp-1's gate, naming cp-2
// and what --machines and --allow-quorum-loss would mean, instead of
// waiting out --wait; with --machines worker-1 the worker's change goes
// through (issue 33, item 3).
func TestGateFailsAtOnceForAControlPlaneDownBeforeTheRun(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	sf.Drift(t, "cp-1", "time.cloudflare.com", "pool.ntp.org")
	sf.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	sf.Sim.Machine("cp-2").SetFaults(sim.Faults{Unreachable: true})

	start := time.Now()
	r := devata(t, nil, "apply", "--config", sf.settings, "--yes", "--wait", "2m", "--timeout", "2s")
	took := time.Since(start)
	lacks(t, "apply", r.stdout+r.err, "cp-2 did not answer when this run was planned and is still down", "--machines (no etcd gate holds a worker)", "--allow-quorum-loss does not help here")
	if r.code == 0 || took > time.Minute {
		t.Fatalf("apply with cp-2 down: exit %d after %s (want a failure well inside --wait 2m)\n%s%s", r.code, took.Round(time.Second), r.stdout, r.err)
	}
	if n := sf.Sim.Machine("cp-1").Calls("ApplyConfiguration"); n != 1 { // the plan's dry run only
		t.Errorf("cp-1: %d ApplyConfiguration calls, want only the plan's dry run", n)
	}

	r = devata(t, nil, "apply", "--config", sf.settings, "--yes", "--wait", "2m", "--timeout", "2s", "--machines", "worker-1")
	if r.code != 0 || !inSync(sf, "worker-1") {
		t.Errorf("apply --machines worker-1: exit %d, in sync %t\n%s%s", r.code, inSync(sf, "worker-1"), r.stdout, r.err)
	}
}
