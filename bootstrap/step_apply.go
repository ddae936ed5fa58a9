package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"time"

	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

var errBackInMaintenance = errors.New("back in maintenance mode")

// applyMaintenance sends a machine its config over the insecure maintenance
// connection, then waits until it answers on mTLS with that config. It
// refuses when the machine answers on mTLS: a configured machine is never
// sent an insecure apply. The config is for the release the machine booted
// (bootRelease), which parses it: a Talos refuses a document kind or field
// of a newer release (configloader). The machine then installs its
// config's installer, the inventory's release, and boots it; when that
// release's config differs from the one sent (a newer contract), it is
// applied once the machine runs it, as devata apply would.
func (s *Sequence) applyMaintenance(ctx context.Context, m *inventory.Machine) error {
	boots, why := s.bootRelease(m)
	cfg, err := s.desiredFor(m, boots)
	if err != nil {
		return fmt.Errorf("render its config for Talos %s (%s): %w", boots, why, err)
	}
	for attempt := 1; ; attempt++ {
		err := ApplyMaintenance(ctx, s.dialer, m, cfg, s.opts.Timeout)
		switch {
		case err == nil:
			s.say("    %s: config applied over the maintenance connection (mode auto), for the Talos %s config contract (%s); waiting for it to answer on mTLS", m.Name, s.contractName(boots), why)
		case errors.Is(err, ErrRefused) || !talosapi.IsUnreachable(err) || ctx.Err() != nil:
			return err
		default:
			// The connection dropped mid-apply: the machine may have rebooted into its config, or not.
			s.say("    %s: connection lost during the apply (%v); waiting to see whether it rebooted into its config", m.Name, err)
		}
		runs, current, werr := s.waitConfigured(ctx, m, err != nil, cfg)
		if errors.Is(werr, errBackInMaintenance) && attempt < 3 {
			s.say("    %s: still in maintenance mode after the interrupted apply: applying again", m.Name)
			continue
		}
		if werr != nil || current {
			return werr
		}
		desired, err := s.desiredFor(m, runs)
		if err != nil {
			return fmt.Errorf("render its config for Talos %s, which it runs now: %w", runs, err)
		}
		s.say("    %s: runs Talos %s now, installed from its config: applying the config of the Talos %s config contract (mode auto)", m.Name, runs, s.contractName(runs))
		return s.applyConfig(ctx, m, desired, talosapi.ModeAuto)
	}
}

// ApplyMaintenance is talosapi.ApplyMaintenance, its refusal of a
// configured machine wrapping ErrRefused.
func ApplyMaintenance(ctx context.Context, d *talosapi.Dialer, m *inventory.Machine, config []byte, timeout time.Duration) error {
	err := talosapi.ApplyMaintenance(ctx, d, m, config, timeout)
	if errors.Is(err, talosapi.ErrConfigured) {
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	return err
}

// applyRunning applies the desired config to a configured machine before the
// cluster exists, in the mode its dry run resolved, and waits for it.
func (s *Sequence) applyRunning(ctx context.Context, m *inventory.Machine, mode talosapi.Mode) error {
	cfg, err := s.desiredFor(m, s.runs(m))
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	return s.applyConfig(ctx, m, cfg, mode)
}

// applyConfig applies cfg to a configured machine in mode and waits until
// it runs its desired config.
func (s *Sequence) applyConfig(ctx context.Context, m *inventory.Machine, cfg []byte, mode talosapi.Mode) error {
	actx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	c, err := s.dialer.Client(actx, m)
	if err == nil {
		_, err = talosapi.Apply(actx, c, cfg, mode, 0)
		c.Close()
	}
	cancel()
	if err != nil && !talosapi.IsUnreachable(err) {
		return fmt.Errorf("apply: %w", err)
	}
	s.say("    %s: desired config applied (%s); waiting for it to run it", m.Name, mode)
	_, _, err = s.waitConfigured(ctx, m, false, nil)
	return err
}
