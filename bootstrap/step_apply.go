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
// sent an insecure apply.
func (s *Sequence) applyMaintenance(ctx context.Context, m *inventory.Machine) error {
	for attempt := 1; ; attempt++ {
		err := ApplyMaintenance(ctx, s.dialer, m, s.desired[m.Name], s.opts.Timeout)
		switch {
		case err == nil:
			s.say("    %s: config applied over the maintenance connection (mode auto); waiting for it to answer on mTLS", m.Name)
		case errors.Is(err, ErrRefused) || !talosapi.IsUnreachable(err) || ctx.Err() != nil:
			return err
		default:
			// The connection dropped mid-apply: the machine may have rebooted into its config, or not.
			s.say("    %s: connection lost during the apply (%v); waiting to see whether it rebooted into its config", m.Name, err)
		}
		werr := s.waitConfigured(ctx, m, err != nil)
		if errors.Is(werr, errBackInMaintenance) && attempt < 3 {
			s.say("    %s: still in maintenance mode after the interrupted apply: applying again", m.Name)
			continue
		}
		return werr
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
	actx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	c, err := s.dialer.Client(actx, m)
	if err == nil {
		var cfg []byte
		if cfg, err = s.desiredFor(m, s.runs(m)); err == nil {
			_, err = talosapi.Apply(actx, c, cfg, mode, 0)
		}
		c.Close()
	}
	cancel()
	if err != nil && !talosapi.IsUnreachable(err) {
		return fmt.Errorf("apply: %w", err)
	}
	s.say("    %s: desired config applied (%s); waiting for it to run it", m.Name, mode)
	return s.waitConfigured(ctx, m, false)
}
