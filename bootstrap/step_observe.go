package bootstrap

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
		s.st = observeFleet(ctx, s.inv, s.dialer, s.desiredFor, s.opts.Concurrency, s.opts.Timeout, true)
		if foreign := s.st.foreignCA(s.inv); len(foreign) > 0 {
			// an answer, not an outage: waiting cannot change it
			if s.secretsMissing {
				return "", s.foreignBundle(foreign)
			}
			return "", fmt.Errorf("%w: %s %s with certificates the talosconfig's CA did not sign: the talosconfig (%s) is not this cluster's, or the machines were configured from another bundle than %s; nothing was changed. "+
				"Use the cluster's talosconfig (--talosconfig), or the bundle the machines were made from",
				ErrRefused, strings.Join(foreign, ", "), plural(len(foreign), "answers", "answer"), s.talosconfigSource(), rel(s.inv, s.secretsPath))
		}
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
	if s.secretsMissing {
		var configured []string
		for i := range s.inv.Machines {
			if name := s.inv.Machines[i].Name; !s.st.maintenance(name) {
				configured = append(configured, name)
			}
		}
		if len(configured) > 0 {
			return "", s.foreignBundle(configured)
		}
	}
	if v, why := etcdVerdict(s.inv, s.st); v == etcdForeign || v == etcdUnclear || v == etcdBroken {
		return "", fmt.Errorf("%w: %s", ErrRefused, why)
	}
	created := ""
	if s.secretsMissing {
		msg, err := s.writeMissingSecrets()
		if err != nil {
			return "", err
		}
		created = msg + "; "
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
	return created + strings.Join(parts, "; "), nil
}
