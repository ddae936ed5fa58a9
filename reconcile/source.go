package reconcile

import (
	"context"
	"fmt"

	"devata.dev/devata/bootstrap"
	"devata.dev/devata/inventory"
)

// Where desired state comes from. A controller-runtime controller watches
// its sources for events; this loop reads its Source whole at the start of
// every pass instead, so nothing it does depends on an earlier event.

// Desired is the spec one pass works from: a validated inventory and every
// machine's rendered, validated config, held in Configs or, for a large
// inventory, rendered again by Render when needed (every config was
// validated when the Desired was made).
type Desired struct {
	Inventory *inventory.Inventory
	Configs   map[string][]byte
	Render    func(m *inventory.Machine) ([]byte, error)
}

// Config is one machine's desired config.
func (d *Desired) Config(m *inventory.Machine) ([]byte, error) {
	if c, ok := d.Configs[m.Name]; ok {
		return c, nil
	}
	if d.Render == nil {
		return nil, fmt.Errorf("no desired config for %s", m.Name)
	}
	return d.Render(m)
}

// only is the map of one machine's config, for a plan or rollout of it.
func (d *Desired) only(m *inventory.Machine) (map[string][]byte, error) {
	c, err := d.Config(m)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{m.Name: c}, nil
}

// LeanAbove is the number of machines past which FileSource keeps no
// rendered configs: it validates every one, then renders a machine's again
// where it is observed or changed.
var LeanAbove = 5000

// Source reads the spec afresh; the loop calls it at the start of every pass.
type Source func(ctx context.Context) (*Desired, error)

// FileSource loads the inventory at path and renders it with the secrets
// bundle it names, every time it is called, so an edit of either is picked up
// by the next pass.
func FileSource(path string) Source {
	return func(context.Context) (*Desired, error) {
		inv, err := inventory.Load(path)
		if err != nil {
			return nil, err
		}
		bundle, err := bootstrap.LoadSecrets(inv.SecretsPath())
		if err != nil {
			return nil, err
		}
		if len(inv.Machines) > LeanAbove {
			r, _, err := bootstrap.ValidateOnly(inv, bundle, nil)
			if err != nil {
				return nil, fmt.Errorf("render %s: %w", path, err)
			}
			return &Desired{Inventory: inv, Render: func(m *inventory.Machine) ([]byte, error) {
				rd, err := r.Render(m)
				if err != nil {
					return nil, err
				}
				return rd.Config, nil
			}}, nil
		}
		rendered, err := bootstrap.RenderValidated(inv, bundle)
		if err != nil {
			return nil, fmt.Errorf("render %s: %w", path, err)
		}
		d := &Desired{Inventory: inv, Configs: map[string][]byte{}}
		for _, r := range rendered {
			d.Configs[r.Machine] = r.Config
		}
		return d, nil
	}
}
