package render

import (
	"context"
	"fmt"
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"devata.dev/devata/internal/talos"
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
// it is lean is decided here alone (DesiredOf).
type Desired struct {
	held map[string][]byte
	lean *Renderer
	// older renders, on demand, for a machine that runs an older Talos
	// than cluster.talosVersion (For); nil for a HeldDesired.
	older *olderContracts
}

// DesiredOf renders and validates the configs of the named machines of
// inv (all of them when none is named; names not in the inventory are
// ignored, the caller reports them). With leanOK and more than LeanAbove
// machines it keeps none. It stops between machines once ctx is done (the
// error is then an *inventory.InterruptedError).
func DesiredOf(ctx context.Context, inv *inventory.Inventory, bundle *secrets.Bundle, only []string, leanOK bool) (*Desired, error) {
	n := len(only)
	if n == 0 {
		n = len(inv.Machines)
	}
	older := &olderContracts{inv: inv, bundle: bundle, renderers: map[int]*Renderer{}}
	if leanOK && n > LeanAbove {
		r, err := NewRenderer(inv, bundle)
		if err != nil {
			return nil, err
		}
		if _, err := r.renderAll(ctx, inv, true, only, false); err != nil {
			return nil, err
		}
		return &Desired{lean: r, older: older}, nil
	}
	rendered, err := renderAll(ctx, inv, bundle, true, only)
	if err != nil {
		return nil, err
	}
	d := HeldDesired(rendered)
	d.older = older
	return d, nil
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

// For is the desired config of m for a machine that runs Talos version
// running: the config Config gives, unless running is an older minor
// release than cluster.talosVersion, when it is rendered (and validated)
// for that release's config contract, so that a machine half-way through an
// upgrade is never sent a document or field its Talos refuses
// (contract.go). running "" (not known) means cluster.talosVersion.
func (d *Desired) For(m *inventory.Machine, running string) ([]byte, error) {
	if d.older != nil {
		if r, err := d.older.renderer(running); r != nil || err != nil {
			if err != nil {
				return nil, err
			}
			rd, err := r.render(m, true)
			if err != nil {
				return nil, err
			}
			return rd.Config, nil
		}
	}
	return d.Config(m)
}

// Only is the map of one machine's config, for a plan or rollout of it.
func (d *Desired) Only(m *inventory.Machine) (map[string][]byte, error) {
	c, err := d.Config(m)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{m.Name: c}, nil
}

// olderContracts renders configs for the config contract of a Talos
// release older than the inventory's, one renderer per release.
type olderContracts struct {
	inv       *inventory.Inventory
	bundle    *secrets.Bundle
	mu        sync.Mutex
	renderers map[int]*Renderer
}

// renderer is the renderer for the contract of a machine running version
// running, or nil when that is the inventory's own (running is not older
// than cluster.talosVersion, or not known).
func (o *olderContracts) renderer(running string) (*Renderer, error) {
	minor, ok := talos.Minor(running)
	target, tok := talos.Minor(o.inv.Cluster.TalosVersion)
	if !ok || !tok || minor >= target || minor < talos.OldestMinor {
		return nil, nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if r, ok := o.renderers[minor]; ok {
		return r, nil
	}
	inv := *o.inv
	inv.Cluster.TalosVersion = fmt.Sprintf("v1.%d.0", minor) // the contract is the release's minor; the installer stays the inventory's
	r, err := NewRenderer(&inv, o.bundle)
	if err != nil {
		return nil, fmt.Errorf("render for Talos 1.%d, which a machine runs: %w", minor, err)
	}
	o.renderers[minor] = r
	return r, nil
}
