package reconcile

import (
	"cmp"
	"time"

	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// Changes are the settings of planning and rolling out changes, the one
// place where a Planner and its Rollout are assembled: devata apply and
// upgrade (a plan of the fleet, confirmed at the console, then rolled out)
// and the loop's Reconciler (a plan of one machine) both build theirs here,
// so that a setting means the same in both.
type Changes struct {
	Dialer *talosapi.Dialer
	// Kube reads the Nodes (the Kubernetes version rules, a moved
	// kubelet's confirmation, drains); nil holds kubelet moves and reboots
	// undrained.
	Kube kubernetes.Interface
	// Mode is the apply mode asked for (talosapi.ModeAuto when empty).
	Mode talosapi.Mode
	// Concurrency bounds how many machines are observed at once (at least 1).
	Concurrency int
	// Timeout bounds one Talos API call (30s when zero); Wait a machine's
	// return or a gate (10m when zero); Poll how often a wait looks again.
	Timeout, Wait, TryTimeout, Poll time.Duration
	// PullTimeout bounds an upgrade's installer pull (Rollout.PullTimeout).
	PullTimeout time.Duration
	// MaxUnavailable is how many workers change at once (at least 1).
	MaxUnavailable int
	// AllowQuorumLoss lets a rebooting change take down a control plane of
	// an etcd of one or two members (Rollout.AllowQuorumLoss).
	AllowQuorumLoss bool
	// Upgrades, when set, also plans Talos upgrades (Planner.Upgrades).
	Upgrades *Upgrades
	// Joins plans the configuration of machines in maintenance mode once
	// etcd runs (Planner.Joins).
	Joins bool
	// ForceDeprecatedAPIs lets a Kubernetes minor upgrade go ahead while
	// clients still request APIs it removes (Planner.ForceDeprecatedAPIs).
	ForceDeprecatedAPIs bool
	// Drain drains a Node before a change that reboots its machine, within
	// DrainTimeout (Rollout.Drain, Rollout.DrainTimeout).
	Drain        bool
	DrainTimeout time.Duration
	// IgnoreHold names held machines this plan may change anyway
	// (Planner.IgnoreHold).
	IgnoreHold map[string]bool
	// Windows keeps disruptive changes to the maintenance windows, read
	// on Now (time.Now when nil): Planner.Windows, Planner.Now.
	Windows bool
	Now     func() time.Time
}

// Defaults of Changes, and of the loop's settings that say the same
// (reconcile --timeout, --wait).
const (
	DefaultTimeout = 30 * time.Second
	DefaultWait    = 10 * time.Minute
)

// withDefaults is c with every unset setting given its default: the only
// place Changes are defaulted.
func (c Changes) withDefaults() Changes {
	c.Mode = cmp.Or(c.Mode, talosapi.ModeAuto)
	c.Concurrency = max(c.Concurrency, 1)
	c.MaxUnavailable = max(c.MaxUnavailable, 1)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.Wait = cmp.Or(c.Wait, DefaultWait)
	return c
}

// Planner is the planner of inv's machines, whose desired configs are
// desired (for cluster.talosVersion) and desiredFor (for the Talos each
// machine runs; nil: desired).
func (c Changes) Planner(inv *inventory.Inventory, desired map[string][]byte, desiredFor talosapi.DesiredFunc) *Planner {
	c = c.withDefaults()
	return &Planner{
		Inventory: inv, Desired: desired, DesiredFor: desiredFor, Dialer: c.Dialer, Kube: c.Kube,
		Mode: c.Mode, Concurrency: c.Concurrency, Timeout: c.Timeout,
		Upgrades: c.Upgrades, Joins: c.Joins, ForceDeprecatedAPIs: c.ForceDeprecatedAPIs, Drain: c.Drain,
		IgnoreHold: c.IgnoreHold, Windows: c.Windows, Now: c.Now,
	}
}

// Rollout is the rollout of a plan made by Planner, saying its progress
// through say (nil: silent).
func (c Changes) Rollout(inv *inventory.Inventory, desired map[string][]byte, say func(format string, args ...any)) *Rollout {
	c = c.withDefaults()
	return &Rollout{
		Inventory: inv, Desired: desired, Dialer: c.Dialer, Kube: c.Kube, MaxUnavailable: c.MaxUnavailable,
		Timeout: c.Timeout, Wait: c.Wait, TryTimeout: c.TryTimeout, Poll: c.Poll, PullTimeout: c.PullTimeout,
		AllowQuorumLoss: c.AllowQuorumLoss, Drain: c.Drain, DrainTimeout: c.DrainTimeout, Say: say,
	}
}
