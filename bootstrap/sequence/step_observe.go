package sequence

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// observe looks at every machine until each gives a clear answer (it may be
// rebooting from an interrupted run), then refuses if etcd data exists that
// this sequence did not make.
func (s *Sequence) observe(ctx context.Context) (string, error) {
	deadline := time.Now().Add(s.opts.Wait)
	last := ""
	for {
		s.st = observeFleet(ctx, s.inv, s.dialer, s.desired, s.opts.Concurrency, s.opts.Timeout, true)
		unclear, permanent := s.st.inconclusive(s.inv)
		if len(unclear) == 0 {
			break
		}
		if permanent {
			return "", fmt.Errorf("nothing was changed: %s (bootstrap needs an os:admin talosconfig)", strings.Join(unclear, "; "))
		}
		if msg := strings.Join(unclear, "; "); msg != last {
			s.say("    waiting for a clear answer from: %s", msg)
			last = msg
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no clear answer within %s, so nothing was changed: %s", s.opts.Wait, strings.Join(unclear, "; "))
		}
		if err := sleep(ctx, s.opts.Poll); err != nil {
			return "", err
		}
	}
	if v, why := etcdVerdict(s.inv, s.st); v == etcdForeign || v == etcdUnclear {
		return "", fmt.Errorf("%w: %s", ErrRefused, why)
	}
	var maint, done, differ []string
	for i := range s.inv.Machines {
		name := s.inv.Machines[i].Name
		switch {
		case s.st.maintenance(name):
			maint = append(maint, name)
		case s.st.differs(name):
			differ = append(differ, name)
		default:
			done = append(done, name)
		}
	}
	var parts []string
	if len(maint) > 0 {
		parts = append(parts, "maintenance mode: "+strings.Join(maint, ", "))
	}
	if len(differ) > 0 {
		parts = append(parts, "config differs: "+strings.Join(differ, ", "))
	}
	if len(done) > 0 {
		parts = append(parts, "runs the desired config: "+strings.Join(done, ", "))
	}
	return strings.Join(parts, "; "), nil
}
