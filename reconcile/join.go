package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"devata.dev/devata/internal/talos"
	"devata.dev/devata/plan"
	"devata.dev/devata/talosapi"
)

// A join configures a machine that answers in maintenance mode once the
// cluster exists, as devata bootstrap configures one (and as talosctl
// apply-config --insecure does): its desired config over the maintenance
// connection, mode auto; Talos installs it and reboots into it. A control
// plane then joins etcd (services/etcd.go buildInitialCluster: as a
// learner, promoted once it caught up; a member of its name left by a
// wiped disk is removed first), which the etcd gate before it allows for
// (gate.Etcd.PassJoin) and the gate after it confirms; every machine's
// Node must then register with its kubelet version (waitKubelet).
//
// The maintenance connection authenticates no one: the config, with the
// cluster's secrets, goes to whatever answers at the machine's address.
// devata apply joins (it asks first: a join reboots); reconcile joins
// only with --join.

// planJoins skips the joins when no control plane runs etcd: there is no
// cluster to join, and building one is devata bootstrap's job (it
// bootstraps etcd exactly once).
func (p *Planner) planJoins(actions []Action, others func() []*talosapi.Observation) {
	var joins []int
	runs := false
	for i, a := range actions {
		if a.Kind == KindJoin {
			joins = append(joins, i)
		}
		if a.Machine.IsControlPlane() && a.seen != nil && a.seen.etcdRunning {
			runs = true
		}
	}
	if len(joins) == 0 {
		return
	}
	reason := ""
	switch {
	case p.Kube == nil:
		reason = "in maintenance mode: a join is confirmed on the machine's Node, and devata has no kubeconfig: pass --kubeconfig (or set KUBECONFIG)"
	case runs || slices.ContainsFunc(others(), etcdRuns):
		p.joinConfigs(actions, others)
		return
	default:
		reason = "in maintenance mode, and no control plane runs etcd: there is no cluster to join; devata bootstrap builds it (etcd bootstrapped once)"
	}
	for _, i := range joins {
		a := &actions[i]
		a.Kind, a.Reboots, a.Reason = KindSkip, false, reason
	}
}

// joinConfigs gives each join the config of the release its machine
// booted (talos.BootRelease, as devata bootstrap does): a Talos in
// maintenance mode refuses a document kind or field of a newer release
// (configloader), so a machine booted from an older medium than the
// inventory's release is sent its own release's config; it installs the
// inventory's release from that config and the join then applies the
// inventory's (Rollout.join). A config that cannot be rendered skips the
// join, saying why.
func (p *Planner) joinConfigs(actions []Action, others func() []*talosapi.Observation) {
	if p.DesiredFor == nil || p.Inventory == nil {
		return
	}
	target := p.Inventory.Cluster.TalosVersion
	for i := range actions {
		a := &actions[i]
		if a.Kind != KindJoin {
			continue
		}
		own := ""
		if a.seen != nil {
			own = a.seen.talos
		}
		var reported []talos.Reported
		for _, b := range actions {
			if b.Machine.Name != a.Machine.Name && b.seen != nil && b.seen.talos != "" {
				reported = append(reported, talos.Reported{Machine: b.Machine.Name, Version: b.seen.talos})
			}
		}
		if own == "" {
			for _, o := range others() {
				if o != nil && o.Version != "" && o.Err == nil {
					reported = append(reported, talos.Reported{Machine: o.Machine.Name, Version: o.Version})
				}
			}
		}
		boots, why := talos.BootRelease(own, "", reported, "", "", target)
		contract := talos.ContractOf(boots, target)
		if contract == talos.ContractOf(target, target) {
			continue
		}
		cfg, err := p.DesiredFor(a.Machine, boots)
		if err != nil {
			a.Kind, a.Reboots = KindSkip, false
			a.Reason = fmt.Sprintf("in maintenance mode: its config for Talos %s (%s) could not be rendered: %v", boots, why, err)
			continue
		}
		a.Config = cfg
		a.Contract = fmt.Sprintf("its config is written for Talos %s, the release it boots (%s), until it runs %s, which then gets the inventory's", contract, why, target)
	}
}

// etcdRuns reports a control plane whose etcd answered: its member list,
// or, without a leader (no quorum), its own status. An etcd without quorum
// is still a cluster to join once it has one again, never one to bootstrap.
func etcdRuns(o *talosapi.Observation) bool {
	return o.Etcd != nil || o.EtcdLocal != nil
}

// join configures a machine in maintenance mode and waits until it runs its
// desired config, running and ready, and its Node reports its kubelet.
func (r *Rollout) join(ctx context.Context, a Action) error {
	m := a.Machine
	start := time.Now()
	desired := r.Desired[m.Name]
	sent := desired
	if a.Config != nil {
		// the config of the release it booted (Planner.joinConfigs)
		sent = a.Config
	}
	plan.Say(r.say, m.Name, "join: its config over the maintenance connection (insecure, mode auto); it installs and reboots")
	if a.Contract != "" {
		r.say("    %s: %s", m.Name, a.Contract)
	}
	err := talosapi.ApplyMaintenance(ctx, r.Dialer, m, sent, r.Timeout)
	switch {
	case errors.Is(err, talosapi.ErrConfigured):
		return fmt.Errorf("%s: configured since it was planned: %w; run devata apply again to plan it afresh", m.Name, err)
	case err != nil && (!talosapi.IsUnreachable(err) || ctx.Err() != nil):
		return fmt.Errorf("%s: join: %w", m.Name, err)
	case err != nil:
		r.say("    %s: connection lost during the apply (%v); waiting to see whether it rebooted into its config", m.Name, err)
	default:
		waits := "its Node"
		if m.IsControlPlane() {
			waits = "etcd and its Node"
		}
		r.say("    %s: config applied; waiting for it to come back configured, then for %s", m.Name, waits)
	}
	o, err := r.waitConverged(ctx, m, sent, true, "to come back configured, running and ready")
	if err != nil {
		return err
	}
	if target := r.Inventory.Cluster.TalosVersion; a.Config != nil && talos.ContractOf(o.Version, target) == talos.ContractOf(target, target) {
		// it installed the inventory's release from the config sent: now
		// the config of that release's contract, as an apply would
		d, derr := talosapi.DiffConfigs(o.Active, desired)
		if derr != nil {
			return fmt.Errorf("%s: compare its config with the inventory's: %w", m.Name, derr)
		}
		if !d.Equal {
			r.say("    %s: runs Talos %s now, installed from its config: applying the inventory's config (mode auto)", m.Name, o.Version)
			if err := r.applyWait(ctx, m, desired, talosapi.ModeAuto, true, d.Summary(), ""); err != nil {
				return err
			}
		}
	} else {
		desired = sent
	}
	k, err := talosapi.KubeComponentsOf(desired)
	if err != nil {
		return fmt.Errorf("%s: desired config: %w", m.Name, err)
	}
	if err := r.waitKubelet(ctx, m, talosapi.ImageTag(k.Kubelet)); err != nil {
		return err
	}
	r.mu.Lock()
	r.joinedOn[m.Name] = o.Version // Run made it
	r.mu.Unlock()
	r.say("    %s: joined: runs its desired config on Talos %s, its Node reports kubelet %s (%s)", m.Name, o.Version, talosapi.ImageTag(k.Kubelet), time.Since(start).Round(time.Millisecond))
	if want := r.Inventory.Cluster.TalosVersion; o.Version != want {
		// Talos installed nothing (the disk held an install) or installed
		// what machine.install.image holds
		if err := UpgradePath(o.Version, want); err != nil {
			r.say("    %s: it runs Talos %s, the inventory says %s, and devata upgrade would refuse it: %v", m.Name, o.Version, want, err)
		} else {
			r.say("    %s: it runs Talos %s, the inventory says %s: devata upgrade --machines %s moves it", m.Name, o.Version, want, m.Name)
		}
	}
	return nil
}
