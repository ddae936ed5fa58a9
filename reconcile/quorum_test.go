package reconcile_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/inventory"
	"devata.dev/devata/reconcile"
	"devata.dev/devata/talosapi"
)

// twoControlPlanes is the homelab fleet with cp-3 left in maintenance and
// out of the inventory: etcd has two members, cp-1 and cp-2.
func twoControlPlanes(t *testing.T) *harness {
	t.Helper()
	f := simtest.Start(t, simtest.Options{Bootstrap: true, Maintenance: []string{"cp-3"}})
	inv := *f.Inventory
	inv.Machines = nil
	for _, m := range f.Inventory.Machines {
		if m.Name != "cp-3" {
			inv.Machines = append(inv.Machines, m)
		}
	}
	f.Inventory = &inv
	return &harness{f: f}
}

func TestRebootOfOneOfTwoControlPlanesIsRefusedWithoutTheFlag(t *testing.T) {
	h := twoControlPlanes(t)
	if n := len(h.f.Inventory.ControlPlanes()); n != 2 {
		t.Fatalf("%d control planes, want 2", n)
	}
	// A machine feature outside Talos' live fields needs a reboot.
	h.f.Drift(t, "cp-2", "diskQuotaSupport: true", "diskQuotaSupport: false")
	h.f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	plan, err := h.planner().Plan(context.Background(), []*inventory.Machine{h.f.Inventory.Machine("cp-2"), h.f.Inventory.Machine("worker-1")})
	if err != nil {
		t.Fatal(err)
	}
	if p := plan.Pending(); len(p) != 2 || p[0].Machine.Name != "cp-2" || !p[0].Reboots {
		t.Fatalf("want cp-2 rebooting then worker-1, got %+v", p)
	}
	before := h.applyCalls()
	out := h.rollout(nil).Run(context.Background(), plan)
	want := "gate failed before cp-2: etcd has 2 members; taking cp-2 down leaves 1 of 2, below quorum 2: the Kubernetes API stops until it returns; pass --allow-quorum-loss to accept that, or add a third control plane"
	if !out.Refused || !strings.HasPrefix(out.Stopped, want) {
		t.Fatalf("want a quorum refusal\n  %s\ngot %+v\n%s", want, out, strings.Join(h.lines, "\n"))
	}
	if strings.Join(out.Untouched, ",") != "cp-2,worker-1" || len(out.Converged) != 0 {
		t.Errorf("converged %v untouched %v", out.Converged, out.Untouched)
	}
	after := h.applyCalls()
	for _, name := range []string{"cp-2", "worker-1"} {
		if after[name] != before[name] {
			t.Errorf("%s: %d ApplyConfiguration calls after the refusal, want 0", name, after[name]-before[name])
		}
	}

	// With the flag the same plan goes through, cp-2's reboot included.
	h.lines = nil
	ro := h.rollout(nil)
	ro.AllowQuorumLoss = true
	ro.Wait = 10 * time.Second
	out = ro.Run(context.Background(), plan)
	if !out.Done() || strings.Join(out.Converged, ",") != "cp-2,worker-1" {
		t.Fatalf("with AllowQuorumLoss: %+v\n%s", out, strings.Join(h.lines, "\n"))
	}
	if !strings.Contains(strings.Join(h.lines, "\n"), "quorum loss accepted (--allow-quorum-loss): etcd has 2 members") {
		t.Errorf("the accepted loss is not said:\n%s", strings.Join(h.lines, "\n"))
	}
	o := talosapi.Observe(context.Background(), h.f.Dialer, h.f.Inventory.Machine("cp-2"))
	if d, _ := talosapi.DiffConfigs(o.Active, h.f.Desired["cp-2"]); !d.Equal {
		t.Error("cp-2 does not run its desired config")
	}
}

func TestNoRebootChangeOfTwoControlPlanesNeedsNoFlag(t *testing.T) {
	h := twoControlPlanes(t)
	h.f.Drift(t, "cp-2", "time.cloudflare.com", "pool.ntp.org")
	plan, err := h.planner().Plan(context.Background(), []*inventory.Machine{h.f.Inventory.Machine("cp-2")})
	if err != nil {
		t.Fatal(err)
	}
	if p := plan.Pending(); len(p) != 1 || p[0].Reboots {
		t.Fatalf("want one change without a reboot, got %+v", p)
	}
	if out := h.rollout(nil).Run(context.Background(), plan); !out.Done() {
		t.Fatalf("rollout: %+v\n%s", out, strings.Join(h.lines, "\n"))
	}
}

func TestLoopLeavesARefusedRebootPendingAndChangesTheOthers(t *testing.T) {
	h2 := twoControlPlanes(t)
	f := h2.f
	f.Drift(t, "cp-2", "diskQuotaSupport: true", "diskQuotaSupport: false")
	f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	h := newLoop(t, f)
	files := reconcile.FileSource(f.Inventory.Path)
	h.opts.Source = func(ctx context.Context) (*reconcile.Desired, error) {
		d, err := files(ctx)
		if err != nil {
			return nil, err
		}
		d.Inventory.Machines = slices.DeleteFunc(d.Inventory.Machines, func(m inventory.Machine) bool { return m.Name == "cp-3" })
		delete(d.Configs.Held(), "cp-3")
		return d, nil
	}
	res := h.loop().Once(context.Background())
	if res.Outcomes["cp-2"] != reconcile.OutcomeBlocked || res.Outcomes["worker-1"] != reconcile.OutcomeConverged {
		t.Fatalf("outcomes %v, want cp-2 blocked and worker-1 converged\n%s", res.Outcomes, h.logs)
	}
	if res.Blocked != "" || res.ExitCode() != 1 {
		t.Errorf("blocked %q exit %d: a quorum refusal is not a failed gate, and leaves drift (1)", res.Blocked, res.ExitCode())
	}
	if n := writes(f.Sim.Machine("cp-2")); n != 0 {
		t.Errorf("%d writes reached cp-2", n)
	}
	var rec *reconcile.AuditRecord
	for _, r := range h.audit.records(t) {
		if r.Machine == "cp-2" {
			rec = &r
		}
	}
	if rec == nil || rec.Result != reconcile.ResultBlocked || !strings.Contains(rec.Error, "below quorum 2") {
		t.Errorf("cp-2's audit record: %+v", rec)
	}
}
