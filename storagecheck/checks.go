package storagecheck

import (
	"errors"
	"slices"
	"strings"

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

// Target is everything the storage checks need about one machine.
type Target struct {
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

	exp *expectations // set by NewTarget; else derived per check
}

// NewTarget builds a Target and derives its expectations once (a literal
// Target works too, deriving them in every check).
func NewTarget(m *inventory.Machine, desired, active []byte, activeErr error, obs *Observation) *Target {
	return &Target{Machine: m, Desired: desired, Active: active, ActiveErr: activeErr, Obs: obs, exp: expect(m, desired)}
}

// talosctl is a talosctl command line for the node.
func (t *Target) talosctl(args string) string {
	if t.Talosctl == "" {
		return "talosctl -n " + t.Machine.Address + " " + args
	}
	return t.Talosctl + " " + args
}

func (t *Target) expectations() *expectations {
	if t.exp != nil {
		return t.exp
	}
	return expect(t.Machine, t.Desired)
}

// Checks returns the storage checks in ladder order. Every one fails open: an
// Unknown storage result is reported but does not block a rollout, since a
// rollout is what brings missing volumes in; the config check guards the
// rollout itself.
func Checks() []drift.Check[*Target] {
	return []drift.Check[*Target]{
		{Name: CheckDeclaration, Rung: drift.RungDeclaration, Run: checkDeclaration, Detail: true},
		{Name: CheckVolumes, Rung: drift.RungReconciliation, Run: checkVolumes},
		{Name: CheckMounts, Rung: drift.RungInfrastructure, Run: checkMounts},
		{Name: CheckRawDisks, Rung: drift.RungInfrastructure, Run: checkRawDisks, Detail: true},
	}
}

// notObserved is the Unknown of a check whose machine was not observed.
func notObserved(t *Target) (drift.Result, bool) {
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
