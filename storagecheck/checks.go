package storagecheck

import (
	"context"
	"errors"
	"slices"
	"strings"

	"devata.dev/devata/checks/target"
	"devata.dev/devata/drift"
	"devata.dev/devata/inventory"
)

// Check names, as `devata drift --checks` takes them.
const (
	CheckDeclaration = "storage-declaration"
	CheckVolumes     = "storage-volumes"
	CheckMounts      = "storage-mounts"
	CheckRawDisks    = "storage-raw-disks"
)

// noneExpected is the evidence of every storage check on a machine that
// expects no storage at all.
const noneExpected = "no volumes expected"

// view is what the storage checks read of one machine: its target's
// desired config and active config, and the storage resources Observe read
// on its connection, once per machine (viewOf).
type view struct {
	Machine *inventory.Machine
	// Desired is the machine's rendered config; its UserVolumeConfig documents
	// and machine.disks partitions are expected on the node. Nil means only
	// the inventory's volumes are expected.
	Desired []byte
	// Active is the node's active MachineConfig (v1alpha1) as Talos stores it
	// (talosapi.Observation.Active); ActiveErr says why it could not be read.
	// Only storage-declaration needs it.
	Active    []byte
	ActiveErr error
	// Obs is what Observe read; nil means storage was not observed.
	Obs *Observation

	// Talosctl is how next steps reach the node with talosctl, as devata
	// did (talosapi.Dialer.Talosctl); empty means "talosctl -n ADDRESS".
	Talosctl string

	exp *expectations
}

// viewKey holds a machine's view on its target.Target.
type viewKey struct{}

// viewOf reads the machine's storage on the connection the pass opened,
// once for all the storage checks, and reuses the active config the pass
// already holds. A machine the pass could not reach is not asked again: its
// storage results are Unknown with the same error.
func viewOf(ctx context.Context, t *target.Target) *view {
	return target.Once(t, viewKey{}, func() *view {
		v := &view{Machine: t.Machine, Desired: t.Desired, Talosctl: t.Talosctl, exp: expect(t.Machine, t.Desired)}
		o := t.Obs
		switch {
		case o != nil && o.Err != nil:
			v.Obs = &Observation{Err: o.Err}
		case t.Client != nil:
			v.Obs = Observe(ctx, t.Client, t.Machine)
		}
		if o != nil {
			v.Active, v.ActiveErr = o.Active, o.ConfigErr
		}
		return v
	})
}

// on runs a storage check on the machine's view.
func on(check func(context.Context, *view) []drift.Result) func(context.Context, *target.Target) []drift.Result {
	return func(ctx context.Context, t *target.Target) []drift.Result { return check(ctx, viewOf(ctx, t)) }
}

// talosctl is a talosctl command line for the node.
func (t *view) talosctl(args string) string {
	if t.Talosctl == "" {
		return "talosctl -n " + t.Machine.Address + " " + args
	}
	return t.Talosctl + " " + args
}

func (t *view) expectations() *expectations {
	if t.exp != nil {
		return t.exp
	}
	return expect(t.Machine, t.Desired)
}

// Checks returns the storage checks in ladder order. Every one fails open: an
// Unknown storage result is reported but does not block a rollout, since a
// rollout is what brings missing volumes in; the config check guards the
// rollout itself.
func Checks() []drift.Check[*target.Target] {
	return []drift.Check[*target.Target]{
		{Name: CheckDeclaration, Rung: drift.RungDeclaration, Run: on(checkDeclaration), Detail: true},
		{Name: CheckVolumes, Rung: drift.RungReconciliation, Run: on(checkVolumes)},
		{Name: CheckMounts, Rung: drift.RungInfrastructure, Run: on(checkMounts)},
		{Name: CheckRawDisks, Rung: drift.RungInfrastructure, Run: on(checkRawDisks), Detail: true},
	}
}

// notObserved is the Unknown of a check whose machine was not observed.
func notObserved(t *view) (drift.Result, bool) {
	switch {
	case t.Obs == nil:
		return drift.Unknown(errors.New("storage was not observed"), t.talosctl("get volumestatus")), true
	case t.Obs.Err != nil:
		return drift.Unreachable(t.Machine.Name, t.Obs.Err, t.talosctl("version")), true
	}
	return drift.Result{}, false
}

func unknownRead(err error, next string) drift.Result {
	return drift.ReadFailed(err, next, "storage resources need os:reader, the active MachineConfig os:admin", "a talosconfig with that role")
}

// missingOptions are the options a kubelet mount of a volume needs (bind,
// rshared, and rw or ro) that opts lacks.
func missingOptions(opts []string, mode string) []string {
	var missing []string
	for _, want := range []string{"rshared", mode} {
		if !slices.Contains(opts, want) {
			missing = append(missing, want)
		}
	}
	return missing
}

func devName(dev string) string { return strings.TrimPrefix(dev, "/dev/") }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
