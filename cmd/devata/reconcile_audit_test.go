package main

import (
	"runtime"
	"strings"
	"testing"

	"devata.dev/devata/internal/simtest"
)

func TestReconcileOnceAuditLogDevFullChangesNothing(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/dev/full is Linux's")
	}
	sf := startSim(t, simtest.Options{Bootstrap: true})
	sf.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	r := devata(t, nil, "reconcile", "--once", "--config", sf.settings, loopChecks, "--audit-log", "/dev/full")
	if r.code != 2 || inSync(sf, "worker-1") {
		t.Fatalf("exit %d, worker-1 changed %t\n%s%s", r.code, inSync(sf, "worker-1"), r.stdout, r.err)
	}
	if !strings.Contains(r.stdout, "worker-1 not changed: audit log /dev/full: write") || !strings.Contains(r.stdout, "fix or free the audit log path, or run without --audit-log") {
		t.Errorf("the refusal is not reported:\n%s", r.stdout)
	}
	if n := sf.Sim.Machine("worker-1").Calls("ApplyConfiguration") - sf.Sim.Machine("worker-1").Calls("ApplyConfiguration(dry-run)"); n != 0 {
		t.Errorf("%d configuration writes reached worker-1", n)
	}
}

func TestApplyAndReconcileHaveAllowQuorumLoss(t *testing.T) {
	for _, verb := range []string{"apply", "reconcile"} {
		if r := devata(t, nil, verb, "--help"); r.code != 0 || !strings.Contains(r.stdout, "--allow-quorum-loss") {
			t.Errorf("devata %s --help: exit %d, no --allow-quorum-loss\n%s", verb, r.code, r.stdout)
		}
	}
}
