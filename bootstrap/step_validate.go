package bootstrap

import (
	"context"
	"fmt"
	"path/filepath"

	"devata.dev/devata/inventory"
)

// validate loads the inventory; an invalid one stops the run before anything
// is sent.
func (s *Sequence) validate(context.Context) (string, error) {
	inv, err := inventory.Load(s.opts.InventoryPath)
	if err != nil {
		return "", fmt.Errorf("%w\n%s is invalid: nothing was sent to any machine; run devata validate", err, s.opts.InventoryPath)
	}
	s.inv = inv
	for _, w := range inv.Warnings {
		s.say("    warning: %s", w)
	}
	cps := len(inv.ControlPlanes())
	return fmt.Sprintf("%s: %d machines (%d control planes, %d workers)", filepath.Base(inv.Path), len(inv.Machines), cps, len(inv.Machines)-cps), nil
}
