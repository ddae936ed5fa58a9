package storagecheck

import (
	"context"
	"slices"

	"github.com/siderolabs/talos/pkg/machinery/client"

	"devata.dev/devata/drift"
	"devata.dev/devata/machines"
)

// Extension plugs the storage checks into a checks.FleetCheck: they read on
// the connection the machine checks opened and reuse the active config those
// already hold. A machine the machine checks could not reach is not asked
// again; its storage results are Unknown with the same error.
func Extension() machines.Extension { return extension{} }

type extension struct{}

func (extension) Checks() []drift.Info { return drift.Infos(Checks()) }

func (extension) Run(ctx context.Context, c *client.Client, mt *machines.Target, want []string) []drift.Result {
	o := mt.Obs
	var so *Observation
	if o.Err != nil {
		so = &Observation{Err: o.Err}
	} else {
		so = Observe(ctx, c, mt.Machine)
	}
	t := NewTarget(mt.Machine, mt.Desired, o.Active, o.ConfigErr, so)
	t.Talosctl = mt.Talosctl
	var out []drift.Result
	for _, ch := range Checks() {
		if slices.Contains(want, ch.Name) {
			out = append(out, ch.Evaluate(ctx, mt.Machine.Name, t)...)
		}
	}
	return out
}
