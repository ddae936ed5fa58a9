package bootstrap

import (
	"context"
	"fmt"
	"strings"
	"time"

	"devata.dev/devata/gate"
	"devata.dev/devata/internal/heartbeat"
)

// waitEtcd waits until every control plane agrees etcd is healthy with
// exactly the configured control planes as members, then until the
// machines this run configured ended their boot (waitRunning). Besides a line for each
// new problem, every heartbeat.Every it says what it waits for.
func (s *Sequence) waitEtcd(ctx context.Context) (string, error) {
	deadline := time.Now().Add(s.opts.Wait)
	last := ""
	var looked time.Time
	beat := heartbeat.Start(s.say, 0, s.opts.Wait, "etcd to be healthy with members ["+strings.Join(sortedCPNames(s.inv), " ")+"]")
	defer beat.Stop()
	for {
		err := gate.EtcdHealthy(ctx, s.inv, s.dialer, s.opts.Timeout)
		if err == nil {
			beat.Stop()
			return "etcd healthy, members [" + strings.Join(sortedCPNames(s.inv), " ") + "]" + s.waitRunning(ctx), nil
		}
		beat.Saw(err.Error())
		if time.Since(looked) >= 2*time.Second {
			// a control plane whose etcd failed does not heal by waiting:
			// name it, with what to do, now
			looked = time.Now()
			st := observeFleet(ctx, s.inv, s.dialer, s.desiredFor, s.opts.Concurrency, s.opts.Timeout, false)
			if why := brokenVerdict(s.inv, st); why != "" {
				return "", fmt.Errorf("etcd not healthy (%w): %s", err, strings.TrimPrefix(why, "nothing was bootstrapped: "))
			}
			if why := joinFailedAdvice(s.inv, st); why != "" {
				return "", fmt.Errorf("etcd not healthy (%w): etcd on a control plane gave up joining: %s", err, why)
			}
		}
		if err.Error() != last {
			s.say("    waiting: %v", err)
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("etcd not healthy within %s: %w", s.opts.Wait, err)
		}
		if err := sleep(ctx, s.opts.Poll); err != nil {
			return "", err
		}
	}
}
