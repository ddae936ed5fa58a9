package storagecheck

import (
	"devata.dev/devata/checks/target"
	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// NewTarget is the target of a machine whose storage obs observed, with
// its desired and active configs: the storage checks' view of it, as if
// the pass had read it.
func NewTarget(m *inventory.Machine, desired, active []byte, activeErr error, obs *Observation) *target.Target {
	t := &target.Target{Machine: m, Desired: desired, Obs: &talosapi.Observation{Machine: m, Active: active, ConfigErr: activeErr}}
	target.Set(t, viewKey{}, &view{Machine: m, Desired: desired, Active: active, ActiveErr: activeErr, Obs: obs, exp: expect(m, desired)})
	return t
}
