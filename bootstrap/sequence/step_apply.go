package sequence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
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
		case errors.Is(err, ErrRefused) || !machines.IsUnreachable(err) || ctx.Err() != nil:
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

// ApplyMaintenance applies config to a machine in maintenance mode (mode
// auto, insecure). It first asks over mTLS and refuses, naming the machine
// and what it answered, when the machine is configured.
func ApplyMaintenance(ctx context.Context, d *machines.Dialer, m *inventory.Machine, config []byte, timeout time.Duration) error {
	if answer := answersMTLS(ctx, d, m, timeout); answer != "" {
		return fmt.Errorf("%w: %s answers on mTLS (%s): it is configured, so no insecure maintenance apply is sent to it; use devata apply for configured machines", ErrRefused, m.Name, answer)
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := d.MaintenanceClient(actx, m)
	if err != nil {
		return fmt.Errorf("dial %s: %w", d.Endpoint(m), err)
	}
	defer c.Close()
	if _, err := machines.Apply(actx, c, config, machines.ModeAuto, 0); err != nil {
		return fmt.Errorf("maintenance apply: %w", err)
	}
	return nil
}

// answersMTLS returns what the machine said over mTLS, or "" when it did not
// answer there.
func answersMTLS(ctx context.Context, d *machines.Dialer, m *inventory.Machine, timeout time.Duration) string {
	vctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := d.Client(vctx, m)
	if err != nil {
		return ""
	}
	defer c.Close()
	resp, err := c.Version(vctx)
	if err != nil {
		return ""
	}
	tag := "?"
	if msgs := resp.GetMessages(); len(msgs) > 0 {
		tag = msgs[0].GetVersion().GetTag()
	}
	return "Version answered: Talos " + tag
}

// applyRunning applies the desired config to a configured machine before the
// cluster exists, in the mode its dry run resolved, and waits for it.
func (s *Sequence) applyRunning(ctx context.Context, m *inventory.Machine, mode machines.Mode) error {
	actx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	c, err := s.dialer.Client(actx, m)
	if err == nil {
		_, err = machines.Apply(actx, c, s.desired[m.Name], mode, 0)
		c.Close()
	}
	cancel()
	if err != nil && !machines.IsUnreachable(err) {
		return fmt.Errorf("apply: %w", err)
	}
	s.say("    %s: desired config applied (%s); waiting for it to run it", m.Name, mode)
	return s.waitConfigured(ctx, m, false)
}
