package machines

import (
	"context"

	"devata.dev/devata/inventory"
)

// Survey is one look at a machine before a change: its observation, how its
// applied config differs from the desired one and, when it differs and it is
// safe to ask, what Talos says applying it would do (a dry run, no write).
// The planner and the bootstrap sequence decide from it.
type Survey struct {
	Obs *Observation
	// Compared is set when the machine answered with its applied config;
	// Diff is then set, unless CompareErr says why the two could not be
	// compared.
	Compared   bool
	Diff       ConfigDiff
	CompareErr error
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

// SurveyMachine observes m and compares its applied config with desired;
// with dryRun, a machine that differs and has no pending config is dry-run
// in mode.
func SurveyMachine(ctx context.Context, d *Dialer, m *inventory.Machine, desired []byte, mode Mode, dryRun bool) *Survey {
	s := &Survey{Obs: Observe(ctx, d, m)}
	o := s.Obs
	if o.Err != nil || o.ConfigErr != nil {
		return s
	}
	s.Compared = true
	if s.Diff, s.CompareErr = DiffConfigs(o.Active, desired); s.CompareErr != nil || s.Diff.Equal {
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
