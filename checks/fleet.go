package checks

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/checks/target"
	"devata.dev/devata/drift"
	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
	"devata.dev/devata/talosapi"
)

// FleetCheck is one drift pass over (part of) an inventory.
type FleetCheck struct {
	Inventory *inventory.Inventory
	// Desired holds each machine's rendered config by name.
	Desired map[string][]byte
	// DesiredFor, when set, gives a machine's config instead, once the
	// machine's Talos version is observed, inside its turn: rendered for
	// an older release's config contract when the machine runs one (a fleet
	// half-way through an upgrade), and rendered there and then when none is
	// held (a pass over a very large fleet holds only the configs in flight).
	DesiredFor talosapi.DesiredFunc
	Dialer     *talosapi.Dialer
	// Kube is the cluster's Kubernetes API every check's target carries;
	// nil makes the Kubernetes side of every check Unknown.
	Kube kubernetes.Interface
	// Families are the checks that run after the machine checks, on the
	// same target (Families builds them); nil: the machine checks alone.
	Families []drift.Check[*target.Target]
	// Machines and Checks restrict the pass; empty means all.
	Machines, Checks []string
	Concurrency      int
	Timeout          time.Duration
	// Done, if set, is called once per machine as it finishes (for progress lines).
	Done func(machine string, results []drift.Result)
}

// Select returns the machines a pass covers, in inventory order, or an error
// naming any requested machine or check that does not exist.
func (f *FleetCheck) Select() ([]*inventory.Machine, []drift.Check[*target.Target], error) {
	// A set, not a search per name: reconcile passes every machine it owns,
	// and a search per name was quadratic (minutes at 100,000 machines).
	var ms []*inventory.Machine
	want := make(map[string]bool, len(f.Machines))
	for _, name := range f.Machines {
		want[name] = true
	}
	for i := range f.Inventory.Machines {
		m := &f.Inventory.Machines[i]
		if len(f.Machines) == 0 || want[m.Name] {
			ms = append(ms, m)
			delete(want, m.Name)
		}
	}
	for _, name := range f.Machines {
		if want[name] {
			return nil, nil, fmt.Errorf("--machines: no machine %q in %s%s", name, f.Inventory.Path, didYouMean(name, machineNames(f.Inventory)))
		}
	}
	all := append(machines.Checks(), f.Families...)
	names := make([]string, 0, len(all))
	for _, c := range all {
		names = append(names, c.Name)
	}
	if err := validate(f.Checks, names); err != nil {
		return nil, nil, err
	}
	var checks []drift.Check[*target.Target]
	for _, c := range all {
		if len(f.Checks) == 0 || slices.Contains(f.Checks, c.Name) {
			checks = append(checks, c)
		}
	}
	return ms, checks, nil
}

// Report runs the pass into a new, finished report whose header is h with
// the pass's machines (inventory order, at the endpoints dialled). A
// selection error (a --machines or --checks name that does not exist) is
// returned before anything is observed.
func (f *FleetCheck) Report(ctx context.Context, h drift.Header) (*drift.Report, error) {
	ms, checks, err := f.Select()
	if err != nil {
		return nil, err
	}
	rep := drift.NewReport(f.Header(h, ms))
	f.run(ctx, rep, ms, checks)
	rep.Finish()
	return rep, nil
}

// Header is h listing machines ms as the pass dials them.
func (f *FleetCheck) Header(h drift.Header, ms []*inventory.Machine) drift.Header {
	h.Machines = make([]drift.Machine, 0, len(ms))
	for _, m := range ms {
		dm := drift.Machine{Name: m.Name, Role: m.Role, Address: f.Dialer.Endpoint(m)}
		if h := m.ActiveHold(); h != nil {
			dm.Held = h.Reason
		}
		h.Machines = append(h.Machines, dm)
	}
	return h
}

// Run observes every selected machine with bounded concurrency and adds each
// machine's results to out as soon as it is done; the observation, whole
// configs included, is dropped then. One machine's failure never stops the
// others: it becomes that machine's Unknown results.
func (f *FleetCheck) Run(ctx context.Context, out drift.Collector) error {
	ms, checks, err := f.Select()
	if err != nil {
		return err
	}
	f.run(ctx, out, ms, checks)
	return nil
}

// run is Run over a selection already made.
func (f *FleetCheck) run(ctx context.Context, out drift.Collector, ms []*inventory.Machine, checks []drift.Check[*target.Target]) {
	var nodes *talosapi.Nodes
	// the Nodes are the kubelet check's; the families read their own
	if slices.ContainsFunc(checks, func(c drift.Check[*target.Target]) bool { return c.Name == machines.CheckKubelet }) {
		n := talosapi.ObserveNodes(ctx, f.Kube)
		nodes = &n
	}
	var reads []talosapi.Read
	if slices.ContainsFunc(checks, func(c drift.Check[*target.Target]) bool { return c.Name == machines.CheckExtensions }) {
		reads = append(reads, talosapi.ReadBootImage)
	}
	var cps []string
	for _, m := range f.Inventory.ControlPlanes() {
		cps = append(cps, m.Name)
	}
	pass := target.NewPass()
	selected := func(name string) bool { return len(f.Checks) == 0 || slices.Contains(f.Checks, name) }
	var mu sync.Mutex
	// Per-machine problems become Unknown results, so ForEach's error is only
	// about machines never started (cancelled); it is reported, not fatal.
	ferr := talosapi.ForEach(ctx, ms, f.Concurrency, f.Timeout, func(ctx context.Context, m *inventory.Machine) error {
		t := &target.Target{
			Machine:           m,
			Inventory:         f.Inventory,
			Desired:           f.Desired[m.Name],
			TalosVersion:      f.Inventory.Cluster.TalosVersion,
			KubernetesVersion: f.Inventory.Cluster.KubernetesVersion,
			ControlPlanes:     cps,
			Kube:              f.Kube,
			Nodes:             nodes,
			Talosctl:          f.Dialer.Talosctl(m),
			Node:              f.Dialer.Node(m),
			Selected:          selected,
		}
		t.In(pass)
		c, err := f.Dialer.Client(ctx, m)
		if err != nil {
			t.Obs = &talosapi.Observation{Machine: m, Endpoint: f.Dialer.Endpoint(m), Err: fmt.Errorf("dial %s: %w", f.Dialer.Endpoint(m), err)}
		} else {
			defer c.Close()
			t.Client = c
			t.Obs = talosapi.ObserveWith(ctx, c, f.Dialer, m, reads...)
		}
		if f.DesiredFor != nil {
			var err error
			if t.Desired, err = f.DesiredFor(m, t.Obs.Version); err != nil {
				// validated before the pass: the config check is then Unknown
				t.Desired = nil
			}
		}
		var results []drift.Result
		for _, c := range checks {
			if c.AppliesTo(t) {
				results = append(results, c.Evaluate(ctx, m.Name, t)...)
			}
		}
		heldNext(results, m)
		mu.Lock()
		out.Add(results...)
		if f.Done != nil {
			f.Done(m.Name, results)
		}
		mu.Unlock()
		return nil
	})
	if ferr != nil {
		mu.Lock()
		out.AddError(ferr)
		mu.Unlock()
	}
}

// heldNext says, on the results of a machine the inventory holds, that
// apply, upgrade and reconcile leave it alone: the command a result
// advises changes it only once the hold is released, or with --ignore-hold.
func heldNext(results []drift.Result, m *inventory.Machine) {
	h := m.ActiveHold()
	if h == nil {
		return
	}
	for i, r := range results {
		if strings.Contains(r.Next, "devata apply") || strings.Contains(r.Next, "devata upgrade") {
			results[i].Next = fmt.Sprintf("held by the inventory (%s), so apply, upgrade and reconcile leave it: release the hold, or add --ignore-hold to: %s", h.Reason, r.Next)
		}
	}
}

// didYouMean is "; did you mean NAME?" for the candidate nearest to name
// (inventory.Nearest, the inventory's own "did you mean"), or "".
func didYouMean(name string, candidates []string) string {
	if near := inventory.Nearest(name, candidates); near != "" {
		return fmt.Sprintf("; did you mean %q?", near)
	}
	return ""
}

func machineNames(inv *inventory.Inventory) []string {
	names := make([]string, len(inv.Machines))
	for i := range inv.Machines {
		names[i] = inv.Machines[i].Name
	}
	return names
}
