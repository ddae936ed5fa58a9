package bootstrap

import (
	"context"
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"devata.dev/devata/inventory"
)

// LeanAbove is the number of machines past which a lean-capable Desired
// holds no rendered configs: it validates them all first, then renders each
// again where the machine is checked or changed (about 0.2 ms of CPU per
// machine more, 3 KiB per machine less: some 300 MiB at 100,000 machines).
var LeanAbove = 5000

// Desired is every machine's rendered, validated config, either held or,
// when lean, rendered again on demand. Either way every config was rendered
// and validated when the Desired was made, before anything is sent. Whether
// it is lean is decided here alone (RenderDesired).
type Desired struct {
	held map[string][]byte
	lean *Renderer
}

// RenderDesired renders and validates the configs of the named machines of
// inv (all of them when none is named; names not in the inventory are
// ignored, the caller reports them). With leanOK and more than LeanAbove
// machines it keeps none. It stops between machines once ctx is done (the
// error is then an *inventory.InterruptedError).
func RenderDesired(ctx context.Context, inv *inventory.Inventory, bundle *secrets.Bundle, only []string, leanOK bool) (*Desired, error) {
	n := len(only)
	if n == 0 {
		n = len(inv.Machines)
	}
	if leanOK && n > LeanAbove {
		r, err := NewRenderer(inv, bundle)
		if err != nil {
			return nil, err
		}
		if _, err := r.renderAll(ctx, inv, true, only, false); err != nil {
			return nil, err
		}
		return &Desired{lean: r}, nil
	}
	rendered, err := renderAll(ctx, inv, bundle, true, only)
	if err != nil {
		return nil, err
	}
	return HeldDesired(rendered), nil
}

// HeldDesired is a Desired holding the rendered configs given.
func HeldDesired(rendered []*Rendered) *Desired {
	d := &Desired{held: make(map[string][]byte, len(rendered))}
	for _, r := range rendered {
		d.held[r.Machine] = r.Config
	}
	return d
}

// Lean reports whether the configs are rendered on demand, not held.
func (d *Desired) Lean() bool { return d.lean != nil }

// Held is the configs held by machine name; nil when lean.
func (d *Desired) Held() map[string][]byte { return d.held }

// Config is one machine's desired config.
func (d *Desired) Config(m *inventory.Machine) ([]byte, error) {
	if c, ok := d.held[m.Name]; ok {
		return c, nil
	}
	if d.lean == nil {
		return nil, fmt.Errorf("no desired config for %s", m.Name)
	}
	rd, err := d.lean.Render(m)
	if err != nil {
		return nil, err
	}
	return rd.Config, nil
}

// Only is the map of one machine's config, for a plan or rollout of it.
func (d *Desired) Only(m *inventory.Machine) (map[string][]byte, error) {
	c, err := d.Config(m)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{m.Name: c}, nil
}
