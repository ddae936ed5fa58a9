package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
	"devata.dev/devata/reconcile"
)

func cpNames(n int) []string {
	var out []string
	for i := 1; i <= n; i++ {
		out = append(out, fmt.Sprintf("cp-%d", i))
	}
	return out
}

func healthyView(n int) reconcile.EtcdView {
	return reconcile.EtcdView{Members: cpNames(n), Healthy: cpNames(n)}
}

func TestMayTakeDown(t *testing.T) {
	oneDown := healthyView(3)
	oneDown.Healthy, oneDown.Down = []string{"cp-1", "cp-2"}, []string{"cp-3"}
	unhealthy := healthyView(5)
	unhealthy.Healthy = []string{"cp-1", "cp-2", "cp-3", "cp-5"}
	learner := healthyView(3)
	learner.Learners = []string{"cp-4"}
	disagree := reconcile.EtcdView{Healthy: cpNames(3), Problems: []string{"cp-3 sees members [cp-1 cp-3], want [cp-1 cp-2 cp-3]"}}
	for _, tc := range []struct {
		name string
		view reconcile.EtcdView
		down string
		// loss: refused because etcd is too small (--allow-quorum-loss
		// accepts it); wait: refused until etcd is healthy; neither: allowed.
		loss, wait bool
		want       string
	}{
		{name: "1 member", view: healthyView(1), down: "cp-1", loss: true,
			want: "etcd has 1 member; taking cp-1 down leaves 0 of 1, below quorum 1: the Kubernetes API stops until it returns; pass --allow-quorum-loss to accept that, or add control planes up to three (2 more)"},
		{name: "2 members", view: healthyView(2), down: "cp-2", loss: true,
			want: "etcd has 2 members; taking cp-2 down leaves 1 of 2, below quorum 2: the Kubernetes API stops until it returns; pass --allow-quorum-loss to accept that, or add a third control plane"},
		{name: "3 members", view: healthyView(3), down: "cp-2"},
		{name: "4 members", view: healthyView(4), down: "cp-4"},
		{name: "5 members", view: healthyView(5), down: "cp-1"},
		{name: "unhealthy member", view: unhealthy, down: "cp-1", wait: true, want: "etcd cannot lose cp-1 now: cp-4 is not healthy; wait until every member is healthy"},
		{name: "learner pending", view: learner, down: "cp-1", wait: true, want: "learner cp-4 is not yet promoted"},
		{name: "one already down", view: oneDown, down: "cp-2", wait: true, want: "cp-3 is down; taking cp-2 down now leaves 1 of 3 healthy, below quorum 2"},
		{name: "members disagree", view: disagree, down: "cp-1", wait: true, want: "the control planes do not agree on etcd's members"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := reconcile.MayTakeDown(tc.view, tc.down)
			if !tc.loss && !tc.wait {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var qe *reconcile.QuorumError
			if !errors.As(err, &qe) {
				t.Fatalf("want a *QuorumError, got %v", err)
			}
			if qe.Loss != tc.loss {
				t.Errorf("Loss = %t, want %t (%v)", qe.Loss, tc.loss, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error\n  %v\ndoes not say\n  %s", err, tc.want)
			}
		})
	}
}

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
	o := machines.Observe(context.Background(), h.f.Dialer, h.f.Inventory.Machine("cp-2"))
	if d, _ := machines.DiffConfigs(o.Active, h.f.Desired["cp-2"]); !d.Equal {
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
	h.loop.Source = func(ctx context.Context) (*reconcile.Desired, error) {
		d, err := files(ctx)
		if err != nil {
			return nil, err
		}
		d.Inventory.Machines = slices.DeleteFunc(d.Inventory.Machines, func(m inventory.Machine) bool { return m.Name == "cp-3" })
		delete(d.Configs, "cp-3")
		return d, nil
	}
	res := h.loop.Once(context.Background())
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
