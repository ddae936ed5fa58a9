package reconcile_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/reconcile"
	"devata.dev/devata/sim"
	"devata.dev/devata/talosapi"
)

// upgradeHarness is a fleet that starts on an older Talos than the
// inventory's v1.11.0.
func upgradeHarness(t *testing.T, from string) *harness {
	t.Helper()
	return &harness{f: simtest.Start(t, simtest.Options{Bootstrap: true, TalosVersion: from})}
}

func (h *harness) upgradePlan(t *testing.T, u reconcile.Upgrades) *reconcile.Plan {
	t.Helper()
	p := h.planner()
	p.Upgrades = &u
	plan, err := p.Plan(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// versions is what every machine reports over the Talos API.
func (h *harness) versions(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i := range h.f.Inventory.Machines {
		m := &h.f.Inventory.Machines[i]
		out[m.Name] = talosapi.Observe(t.Context(), h.f.Dialer, m).Version
	}
	return out
}

// unavailability samples the control planes until stop: the most that were
// not running at one moment, and which ever were not.
type unavailability struct {
	mu   sync.Mutex
	most int
	seen map[string]bool
}

func watchControlPlanes(f *simtest.Fleet) (*unavailability, func()) {
	u := &unavailability{seen: map[string]bool{}}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			n := 0
			for _, cp := range f.Inventory.ControlPlanes() {
				if m := f.Sim.Machine(cp.Name); !m.Running() || m.Observe().Down {
					n++
					u.mu.Lock()
					u.seen[cp.Name] = true
					u.mu.Unlock()
				}
			}
			u.mu.Lock()
			u.most = max(u.most, n)
			u.mu.Unlock()
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return u, func() { close(done); wg.Wait() }
}

// A 3+2 fleet on v1.10.6 upgraded to the inventory's v1.11.0: control planes
// first, never two down at once (a poller proves it), each back on the new
// version; a second plan has nothing left and makes no Upgrade call.
func TestUpgradeRollsControlPlanesOneAtATime(t *testing.T) {
	h := upgradeHarness(t, "v1.10.6")
	plan := h.upgradePlan(t, reconcile.Upgrades{Only: true})
	pending := plan.Pending()
	if len(pending) != 5 {
		t.Fatalf("plan has %d upgrades, want 5: %+v", len(pending), plan.Actions)
	}
	for i, a := range pending {
		if a.Kind != reconcile.KindUpgrade || a.Upgrade.From != "v1.10.6" || a.Upgrade.To != "v1.11.0" || a.Upgrade.Image != "ghcr.io/siderolabs/installer:v1.11.0" {
			t.Errorf("action %d: %+v %+v", i, a, a.Upgrade)
		}
		if (i < 3) != a.Machine.IsControlPlane() {
			t.Errorf("action %d is %s: control planes come first", i, a.Machine.Name)
		}
	}
	watch, stop := watchControlPlanes(h.f)
	out := h.rollout(nil).Run(context.Background(), plan)
	stop()
	if !out.Done() || len(out.Converged) != 5 {
		t.Fatalf("rollout: %+v\n%s", out, strings.Join(h.lines, "\n"))
	}
	if watch.most != 1 || len(watch.seen) != 3 {
		t.Errorf("at most %d control planes were down at once (want 1), and %v went down (want all three)", watch.most, watch.seen)
	}
	for name, v := range h.versions(t) {
		if v != "v1.11.0" {
			t.Errorf("%s runs %s after the upgrade", name, v)
		}
	}
	calls := map[string]int{}
	for _, m := range h.f.Sim.Machines() {
		calls[m.Name()] = m.Calls("Upgrade")
	}
	if again := h.upgradePlan(t, reconcile.Upgrades{Only: true}); len(again.Pending()) != 0 {
		t.Errorf("a second plan still upgrades %d machines", len(again.Pending()))
	}
	for _, m := range h.f.Sim.Machines() {
		if n := m.Calls("Upgrade"); n != calls[m.Name()] || n != 1 {
			t.Errorf("%s got %d Upgrade calls, want exactly one", m.Name(), n)
		}
	}
}

// SIGTERM in the middle: the control plane being upgraded is finished,
// nothing else is touched, and running again continues where the machines
// are, never upgrading one twice.
func TestUpgradeInterruptedResumesFromWhatTheMachinesReport(t *testing.T) {
	h := upgradeHarness(t, "v1.10.6")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	plan := h.upgradePlan(t, reconcile.Upgrades{Only: true})
	out := h.rollout(func(line string) {
		if strings.Contains(line, "cp-2: upgrade accepted") {
			cancel()
		}
	}).Run(ctx, plan)
	if out.InFlight != "cp-2" || strings.Join(out.Converged, ",") != "cp-1,cp-2" || len(out.Untouched) != 3 {
		t.Fatalf("interrupted rollout: %+v\n%s", out, strings.Join(h.lines, "\n"))
	}
	v := h.versions(t)
	if v["cp-2"] != "v1.11.0" || v["cp-3"] != "v1.10.6" || v["worker-1"] != "v1.10.6" {
		t.Fatalf("after the interrupt: %v", v)
	}
	plan = h.upgradePlan(t, reconcile.Upgrades{Only: true})
	var names []string
	for _, a := range plan.Pending() {
		names = append(names, a.Machine.Name)
	}
	if strings.Join(names, ",") != "cp-3,worker-1,worker-2" {
		t.Fatalf("resumed plan upgrades %v, want cp-3, worker-1, worker-2", names)
	}
	if out := h.rollout(nil).Run(context.Background(), plan); !out.Done() {
		t.Fatalf("resumed rollout: %+v", out)
	}
	for _, m := range h.f.Sim.Machines() {
		if n := m.Calls("Upgrade"); n != 1 {
			t.Errorf("%s got %d Upgrade calls, want one", m.Name(), n)
		}
	}
}

// The version rule: no downgrade, no jump past the next minor, unless forced.
func TestUpgradeRefusesDowngradesAndJumpsWithoutForce(t *testing.T) {
	h := upgradeHarness(t, "v1.9.5")
	plan := h.upgradePlan(t, reconcile.Upgrades{Only: true})
	if len(plan.Pending()) != 0 || len(plan.Skipped()) != 5 || !strings.Contains(plan.Skipped()[0].Reason, "a jump from v1.9.5 to v1.11.0") {
		t.Fatalf("v1.9.5 → v1.11.0 without --force: %+v", plan.Actions)
	}
	if plan = h.upgradePlan(t, reconcile.Upgrades{Only: true, Force: true}); len(plan.Pending()) != 5 {
		t.Errorf("with --force: %d upgrades, want 5", len(plan.Pending()))
	}
	h.f.Inventory.Cluster.TalosVersion, h.f.Inventory.Cluster.InstallImage = "v1.9.4", "ghcr.io/siderolabs/installer:v1.9.4"
	if plan = h.upgradePlan(t, reconcile.Upgrades{Only: true}); len(plan.Skipped()) != 5 || !strings.Contains(plan.Skipped()[0].Reason, "a downgrade from v1.9.5 to v1.9.4") {
		t.Errorf("downgrade without --force: %+v", plan.Actions)
	}
	h.f.Inventory.Cluster.TalosVersion = "v1.9.6"
	if plan = h.upgradePlan(t, reconcile.Upgrades{Only: true}); len(plan.Skipped()) != 5 || !strings.Contains(plan.Skipped()[0].Reason, "cluster.installImage ghcr.io/siderolabs/installer:v1.9.4 is tagged v1.9.4, not cluster.talosVersion v1.9.6") {
		t.Errorf("an installer of another version: %+v", plan.Actions)
	}
	for _, m := range h.f.Sim.Machines() {
		if n := m.Calls("Upgrade"); n != 0 {
			t.Errorf("planning sent %d Upgrade calls to %s", n, m.Name())
		}
	}
}

// A control plane whose new version fails to boot comes back on the old
// one: the rollout stops there, says so, and touches no other machine.
func TestUpgradeThatDoesNotTakeStopsTheRollout(t *testing.T) {
	h := upgradeHarness(t, "v1.10.6")
	cp2 := h.f.Sim.Machine("cp-2")
	cp2.SetFaults(sim.Faults{UpgradeBootFails: true})
	out := h.rollout(nil).Run(context.Background(), h.upgradePlan(t, reconcile.Upgrades{Only: true}))
	if out.Done() || strings.Join(out.Failed, ",") != "cp-2" || strings.Join(out.Converged, ",") != "cp-1" || len(out.Untouched) != 3 {
		t.Fatalf("rollout: %+v\n%s", out, strings.Join(h.lines, "\n"))
	}
	if !strings.Contains(out.Stopped, "cp-2 went down and came back on Talos v1.10.6, not v1.11.0") {
		t.Errorf("stopped: %s", out.Stopped)
	}
	if n := h.f.Sim.Machine("cp-3").Calls("Upgrade"); n != 0 {
		t.Errorf("cp-3 got %d Upgrade calls after cp-2 failed", n)
	}
}

// reconcile --upgrade: the loop upgrades machines whose version is not the
// inventory's, one control plane at a time, and records each as an
// upgrade; without --upgrade it only reports the drift and sends no Upgrade.
func TestLoopUpgradesOnlyWhenAsked(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true, TalosVersion: "v1.10.6"})
	h := newLoop(t, f)
	upgradeCalls := func() int {
		n := 0
		for _, m := range f.Sim.Machines() {
			n += m.Calls("Upgrade")
		}
		return n
	}
	res := h.loop().Once(context.Background())
	if n := upgradeCalls(); n != 0 || len(res.Queued) != 0 {
		t.Fatalf("without --upgrade: %d Upgrade calls, queued %v", n, res.Queued)
	}
	h.opts.Changes.Upgrades = &reconcile.Upgrades{}
	h.renew() // as reconcile restarted with --upgrade
	watch, stop := watchControlPlanes(f)
	res = h.loop().Once(context.Background())
	stop()
	if res.ExitCode() != 0 || len(res.Queued) != 5 {
		t.Fatalf("with --upgrade: exit %d, queued %v, outcomes %v, errors %v", res.ExitCode(), res.Queued, res.Outcomes, res.Errors)
	}
	if watch.most != 1 {
		t.Errorf("%d control planes were down at once", watch.most)
	}
	if n := upgradeCalls(); n != 5 {
		t.Errorf("%d Upgrade calls, want 5", n)
	}
	converged := 0
	for _, r := range h.audit.records(t) {
		if r.Action != "upgrade" || r.Diff != "" || !strings.Contains(r.Reason, "runs Talos v1.10.6, the inventory says v1.11.0") {
			t.Errorf("audit record %+v", r)
		}
		if r.Result == reconcile.ResultConverged {
			converged++
		}
	}
	if converged != 5 {
		t.Errorf("%d converged upgrade records, want 5", converged)
	}
	if got := h.metric(t, "devata_reconcile_actions_total", "action", "upgrade", "result", "converged"); got != 5 {
		t.Errorf("actions_total{upgrade,converged} = %v, want 5", got)
	}
	if res = h.loop().Once(context.Background()); len(res.Queued) != 0 || upgradeCalls() != 5 {
		t.Errorf("a pass after the upgrade queued %v", res.Queued)
	}
}

// An upgrade call that runs out of PullTimeout while Talos pulls the
// installer inside it started nothing: the rollout stops there at once,
// saying so and what to do, without waiting Wait for a machine that will
// not go down, and touches no other machine.
func TestUpgradeWhosePullRunsOutIsNotStarted(t *testing.T) {
	h := upgradeHarness(t, "v1.10.6")
	for _, m := range h.f.Sim.Machines() {
		m.SetFaults(sim.Faults{InstallerPullDelay: 2 * time.Second})
	}
	ro := h.rollout(nil)
	ro.Timeout, ro.PullTimeout, ro.Wait = 5*time.Second, 300*time.Millisecond, time.Minute
	began := time.Now()
	out := ro.Run(context.Background(), h.upgradePlan(t, reconcile.Upgrades{Only: true}))
	took := time.Since(began)
	if out.Done() || strings.Join(out.Failed, ",") != "cp-1" || len(out.Untouched) != 4 || took > 30*time.Second {
		t.Fatalf("rollout after %s: %+v\n%s", took, out, strings.Join(h.lines, "\n"))
	}
	for _, want := range []string{"cp-1: upgrade to v1.11.0 not started: Talos did not answer the upgrade call within --pull-timeout 300ms", "still runs v1.10.6 and nothing was installed", "or give a longer --pull-timeout"} {
		if !strings.Contains(out.Stopped, want) {
			t.Errorf("stopped: %s\nwant %q", out.Stopped, want)
		}
	}
	for _, m := range h.f.Sim.Machines() {
		if o := m.Observe(); o.TalosVersion != "v1.10.6" || o.Upgrading || o.NextVersion != "" {
			t.Errorf("%s after the rollout: %+v; want nothing started", m.Name(), o)
		}
	}
	if n := h.f.Sim.Machine("cp-2").Calls("Upgrade"); n != 0 {
		t.Errorf("cp-2 got %d Upgrade calls after cp-1's pull ran out", n)
	}
}
