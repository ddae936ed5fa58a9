package bootstrap

import (
	"context"
	"fmt"
	"time"

	"devata.dev/devata/internal/heartbeat"
	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// waitConfigured polls until the machine answers on mTLS and runs the
// desired config, at stage booting or running: a control plane stays
// booting until etcd runs (machined's boot sequence waits for every service,
// v1alpha1_sequencer_tasks.go StartAllServices), which needs the bootstrap
// that comes after this. With reapply, seeing it back in maintenance mode
// returns errBackInMaintenance. Every heartbeat.Every it says what it waits
// for and what it last saw. sent, when set, is the config a maintenance
// apply sent, of the contract of the release the machine booted: running it
// counts as done too, with current false when the release the machine runs
// now (runs) has a config of its own that differs.
func (s *Sequence) waitConfigured(ctx context.Context, m *inventory.Machine, reapply bool, sent []byte) (runs string, current bool, err error) {
	start := time.Now()
	deadline := start.Add(s.opts.Wait)
	var last string // what the last look found, once one did
	beat := heartbeat.Start(s.say, 0, s.opts.Wait, m.Name+" to answer on mTLS and run its desired config")
	defer beat.Stop()
	for {
		octx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		o := talosapi.Observe(octx, s.dialer, m)
		cancel()
		switch {
		case o.Maintenance && reapply:
			return "", false, errBackInMaintenance
		case o.Err != nil:
			last = o.Err.Error()
		case o.ConfigErr != nil:
			last = o.ConfigErr.Error()
		default:
			desired, err := s.desiredFor(m, o.Version)
			var d talosapi.ConfigDiff
			if err == nil {
				d, err = talosapi.DiffConfigs(o.Active, desired)
			}
			current := true
			if err == nil && !d.Equal && sent != nil {
				// the config sent from maintenance mode, for the release it
				// booted, on a machine that installed a newer one
				if ds, serr := talosapi.DiffConfigs(o.Active, sent); serr == nil && ds.Equal {
					d, current = ds, false
				}
			}
			switch {
			case err != nil:
				last = err.Error()
			case !d.Equal:
				last = "applied config differs: " + d.Summary()
			case o.Stage != "running" && o.Stage != "booting":
				last = "stage " + o.Stage
			default:
				beat.Stop()
				if !current {
					s.say("    %s: answers on mTLS and runs the config sent, stage %s (%s)", m.Name, o.Stage, time.Since(start).Round(time.Millisecond))
					return o.Version, false, nil
				}
				s.say("    %s: answers on mTLS and runs its desired config, stage %s (%s)", m.Name, o.Stage, time.Since(start).Round(time.Millisecond))
				return o.Version, true, nil
			}
		}
		beat.Saw(last)
		if time.Now().After(deadline) {
			return "", false, fmt.Errorf("did not come back on mTLS with its config within %s: %s", s.opts.Wait, last)
		}
		if err := sleep(ctx, s.opts.Poll); err != nil {
			return "", false, fmt.Errorf("waiting for it: %w (last: %s)", err, last)
		}
	}
}
