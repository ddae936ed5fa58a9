package reconcile

import (
	"context"
	"fmt"

	"devata.dev/devata/inventory"
	"devata.dev/devata/provenance"
	"devata.dev/devata/render"
)

// Where desired state comes from. A controller-runtime controller watches
// its sources for events; this loop reads its Source whole at the start of
// every pass instead, so nothing it does depends on an earlier event.

// Desired is the spec one pass works from: a validated inventory and every
// machine's rendered, validated config (held, or for a large inventory
// rendered again where needed: bootstrap.Desired decides).
type Desired struct {
	Inventory *inventory.Inventory
	Configs   *render.Desired
	// Provenance is where the inventory came from (provenance.Of), for the
	// pass's report and devata_inventory_info; zero when the source does not
	// say. ProvenanceErr is what could not be learnt of it: the pass goes on.
	Provenance    provenance.Info
	ProvenanceErr error
}

// Source reads the spec afresh; the loop calls it at the start of every pass.
type Source func(ctx context.Context) (*Desired, error)

// FileSource loads the inventory at path and renders it with the secrets
// bundle it names, every time it is called, so an edit of either is picked up
// by the next pass. The inventory's provenance is read right after it. An
// encrypted bundle opens with the age identities the process environment
// names, as sops reads them.
func FileSource(path string) Source {
	return FileSourceWith(path, render.AgeIdentitiesFromEnv(nil))
}

// FileSourceWith is FileSource opening an encrypted bundle with ids.
func FileSourceWith(path string, ids render.AgeIdentities) Source {
	return func(ctx context.Context) (*Desired, error) {
		inv, err := inventory.Load(path)
		if err != nil {
			return nil, err
		}
		prov, provErr := provenance.Of(ctx, path)
		bundle, err := render.LoadSecretsWith(inv.SecretsPath(), ids)
		if err != nil {
			return nil, err
		}
		configs, err := render.DesiredOf(context.Background(), inv, bundle, nil, true)
		if err != nil {
			return nil, fmt.Errorf("render %s: %w", path, err)
		}
		return &Desired{Inventory: inv, Configs: configs, Provenance: prov, ProvenanceErr: provErr}, nil
	}
}
