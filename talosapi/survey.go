package talosapi

import (
	"context"
	"fmt"

	"devata.dev/devata/inventory"
)

// Survey is one look at a machine before a change: its observation, how its
// applied config differs from the desired one and, when it differs and it is
// safe to ask, what Talos says applying it would do (a dry run, no write).
// The planner and the bootstrap sequence decide from it.
type Survey struct {
	Obs *Observation
	// Config is the desired config the machine was compared with: for the
	// Talos it runs (DesiredFunc).
	Config []byte
	// Compared is set when the machine answered with its applied config;
	// Diff is then set, unless CompareErr says why the two could not be
	// compared.
	Compared   bool
	Diff       ConfigDiff
	CompareErr error
	// Foreign is set when the config the machine runs says it is not the
	// machine devata would write to: another cluster's or another
	// bundle's, or another machine of this cluster (IdentityMismatch). No
	// dry run is sent then, and no writing command touches it.
	Foreign IdentityMismatch
	// Pending: the applied config differs and is not the one the machine
	// would boot (a try waiting for its rollback, or a staged config). No
	// dry run is sent then: any ApplyConfiguration but TRY cancels a
	// pending try's rollback (v1alpha1_server.go ApplyConfiguration).
	Pending bool
	// DryRan is set when a dry run was asked for; DialErr says the
	// machine could not be dialled for it, else Dry is Talos' answer or
	// DryErr its refusal.
	DryRan  bool
	DialErr error
	Dry     ApplyOutcome
	DryErr  error
}

// Differs reports whether the applied config is not the desired one (or
// could not be compared with it).
func (s *Survey) Differs() bool { return s.Compared && (s.CompareErr != nil || !s.Diff.Equal) }

// DesiredFunc gives a machine's desired config for the Talos version it
// runs ("" when not known): rendered for that release's config contract
// when it is older than the inventory's (bootstrap Desired.For).
type DesiredFunc func(m *inventory.Machine, running string) ([]byte, error)

// HeldConfigs is the DesiredFunc of configs held by machine name, the same
// whatever the machine runs.
func HeldConfigs(held map[string][]byte) DesiredFunc {
	return func(m *inventory.Machine, _ string) ([]byte, error) {
		if c, ok := held[m.Name]; ok {
			return c, nil
		}
		return nil, fmt.Errorf("no desired config for %s", m.Name)
	}
}

// SurveyMachine observes m and compares its applied config with its
// desired config for the Talos it runs; with dryRun, a machine that differs
// and has no pending config is dry-run in mode.
func SurveyMachine(ctx context.Context, d *Dialer, inv *inventory.Inventory, m *inventory.Machine, desiredFor DesiredFunc, mode Mode, dryRun bool, reads ...Read) *Survey {
	s := &Survey{Obs: Observe(ctx, d, m, reads...)}
	o := s.Obs
	if o.Err != nil || o.ConfigErr != nil {
		return s
	}
	s.Compared = true
	desired, err := desiredFor(m, o.Version)
	if err != nil {
		s.CompareErr = fmt.Errorf("render its config for Talos %s: %w", o.Version, err)
		return s
	}
	s.Config = desired
	if s.Diff, s.CompareErr = DiffConfigs(o.Active, desired); s.CompareErr != nil || s.Diff.Equal {
		return s
	}
	if s.Foreign, s.CompareErr = Foreign(o.Active, desired, OtherMachine(inv, m)); s.CompareErr != nil || s.Foreign.Any() {
		return s
	}
	if s.Pending = o.PendingConfig(); s.Pending || !dryRun {
		return s
	}
	s.DryRan = true
	c, err := d.Client(ctx, m)
	if err != nil {
		s.DialErr = err
		return s
	}
	defer c.Close()
	s.Dry, s.DryErr = DryRun(ctx, c, desired, mode)
	return s
}

// OtherMachine says whether a name is another machine's of inv than m.
func OtherMachine(inv *inventory.Inventory, m *inventory.Machine) func(string) bool {
	return func(name string) bool {
		return inv != nil && name != m.Name && inv.Machine(name) != nil
	}
}

// Foreign compares the identities of the running and the desired config.
func Foreign(running, desired []byte, isOther func(string) bool) (IdentityMismatch, error) {
	got, err := IdentityOf(running)
	if err != nil {
		return IdentityMismatch{}, fmt.Errorf("applied config: %w", err)
	}
	want, err := IdentityOf(desired)
	if err != nil {
		return IdentityMismatch{}, fmt.Errorf("desired config: %w", err)
	}
	return CompareIdentity(got, want, isOther), nil
}
