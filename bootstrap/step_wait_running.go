package bootstrap

import (
	"context"
	"fmt"
	"strings"
	"time"

	"devata.dev/devata/internal/heartbeat"
	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// waitRunning waits, once etcd is healthy, until every machine this run
// configured (s.configured) ends its boot: stage running, and ready or not
// ready only for its Node, what the closing drift report's machine-stage
// check wants. A control plane's boot waits for etcd (machined's boot
// sequence waits for every service: v1alpha1_sequencer_tasks.go
// StartAllServices; the stage turns running only after it,
// machine_status.go), so configure could not wait for it; and a config
// applied to a running machine restarts what it changed a moment after the
// apply replied (k8s/kubelet_service.go KubeletServiceController restarts
// the kubelet on a KubeletSpec change, control_plane_static_pod.go writes
// new static pods), so nothing of the old state counts as done. A machine
// still not there after --wait is left to the drift report, which names
// it with what to do.
func (s *Sequence) waitRunning(ctx context.Context) string {
	if len(s.configured) == 0 {
		return ""
	}
	start := time.Now()
	deadline := start.Add(s.opts.Wait)
	pending := append([]*inventory.Machine(nil), s.configured...)
	last := map[string]string{}
	beat := heartbeat.Start(s.say, 0, s.opts.Wait, "the machines configured to end their boot (stage running, ready)")
	defer beat.Stop()
	for {
		var still []*inventory.Machine
		var saw []string
		for _, m := range pending {
			octx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
			o := talosapi.Observe(octx, s.dialer, m)
			cancel()
			now := ""
			switch {
			case o.Err != nil:
				now = o.Err.Error()
			case o.StatusErr != nil:
				now = o.StatusErr.Error()
			case o.Stage == "running" && (o.Ready || o.NotReadyOnlyForNode()):
				continue
			default:
				now = "stage " + o.Stage
				if len(o.Unmet) > 0 {
					now += " (" + strings.Join(o.Unmet, "; ") + ")"
				}
			}
			still = append(still, m)
			saw = append(saw, m.Name+": "+now)
			if last[m.Name] != now {
				s.say("    waiting for %s to end its boot: %s", m.Name, now)
				last[m.Name] = now
			}
		}
		pending = still
		if len(pending) == 0 {
			return "; " + names(s.configured) + " running"
		}
		beat.Saw(strings.Join(saw, "; "))
		if time.Now().After(deadline) || sleep(ctx, s.opts.Poll) != nil {
			// the drift report that follows names each one, with what to do
			return fmt.Sprintf("; not running after %s: %s", time.Since(start).Round(time.Second), names(pending))
		}
	}
}
