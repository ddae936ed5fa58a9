package bootstrap

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/internal/heartbeat"
)

// bootstrapEtcd checks etcd on every control plane and bootstraps the first by
// name only when none has any data: every control plane's etcd service
// has been seen waiting in its PreFunc for EtcdSettle, on devata's own
// clock, and its data directory listed empty where it can be listed
// (dataDirFact: a control plane with data passes through that wait on
// every boot, and its directory says so whatever the time).
// AlreadyExists counts as done. Every heartbeat.Every it says what it waits
// for: the control planes to be up, etcd's wait to hold, a clear answer, or
// Talos to take the bootstrap.
func (s *Sequence) bootstrapEtcd(ctx context.Context) (string, error) {
	deadline := time.Now().Add(s.opts.Wait)
	waitingSince := map[string]time.Time{}
	said := ""
	beat := heartbeat.Start(s.say, 0, s.opts.Wait, "every control plane to be configured and up, its etcd waiting to be bootstrapped")
	defer beat.Stop()
	for {
		s.st = observeFleet(ctx, s.inv, s.dialer, s.desiredFor, s.opts.Concurrency, s.opts.Timeout, false)
		v, why := etcdVerdict(s.inv, s.st)
		notReady, unsettled := s.etcdWaits(waitingSince)
		switch {
		case v == etcdUnclear:
			beat.For("a clear etcd answer from every control plane")
			beat.Saw(why)
		case len(notReady) > 0:
			beat.For("every control plane to be configured and up, its etcd waiting to be bootstrapped")
			beat.Saw("not configured and up yet: " + strings.Join(notReady, ", "))
		case len(unsettled) > 0:
			beat.For(fmt.Sprintf("etcd's wait to be bootstrapped to hold for %s on every control plane", s.opts.EtcdSettle))
			beat.Saw("not held long enough yet: " + strings.Join(unsettled, ", "))
		}
		switch {
		case v == etcdForeign || v == etcdBroken:
			return "", fmt.Errorf("%w: %s", ErrRefused, why)
		case v == etcdOurs && s.opts.Recover != nil:
			if old := s.snapshotMembersRunning(); len(old) > 0 {
				return "", fmt.Errorf("%w: %s; etcd still runs the cluster %s was taken of (members %s keep their IDs): --recover-from rebuilds an etcd that is gone, and recovering now would make a second cluster. Inspect it with talosctl -n %s etcd members; to rebuild from the snapshot anyway, wipe every control plane's etcd first (talosctl reset --system-labels-to-wipe EPHEMERAL)",
					ErrRefused, why, s.recoverFrom(), strings.Join(old, ", "), bootstrapNode(s.inv).Address)
			}
			return why + " with new member IDs, restored from a snapshot: nothing to recover", nil
		case v == etcdOurs:
			return why + ": nothing to bootstrap", nil
		case v == etcdNone && len(notReady) == 0 && len(unsettled) > 0:
			if msg := strings.Join(unsettled, ", "); msg != said {
				s.say("    etcd waits to be bootstrapped on every control plane; watching it hold for %s before bootstrapping (%s)", s.opts.EtcdSettle, msg)
				said = msg
			}
		case v == etcdNone && len(notReady) == 0:
			msg, err := s.bootstrapFirst(ctx, why)
			if client.StatusCode(err) != codes.FailedPrecondition || time.Now().After(deadline) {
				return msg, err
			}
			// Talos takes a bootstrap only once etcd waits for one; look again, then retry.
			s.say("    %v: not ready for it yet, trying again", err)
			beat.For(bootstrapNode(s.inv).Name + " to take the bootstrap")
			beat.Saw(err.Error())
		}
		if time.Now().After(deadline) {
			if v == etcdUnclear {
				return "", fmt.Errorf("%w: %s", ErrRefused, why)
			}
			return "", fmt.Errorf("control planes not configured and up within %s: %s", s.opts.Wait, strings.Join(append(notReady, unsettled...), ", "))
		}
		if err := sleep(ctx, s.opts.Poll); err != nil {
			return "", err
		}
	}
}

// etcdWaits names the control planes not yet configured and up
// (notReady), and those whose etcd waits to be bootstrapped but has not yet
// held that wait for EtcdSettle (unsettled); waitingSince keeps, across
// looks, when each was first seen waiting.
func (s *Sequence) etcdWaits(waitingSince map[string]time.Time) (notReady, unsettled []string) {
	now := time.Now()
	for _, m := range s.inv.ControlPlanes() {
		if !s.st.configured(m.Name) {
			notReady = append(notReady, m.Name)
		}
		if f := s.st.etcd[m.Name]; !f.None || f.JoinFailed || s.st.maintenance(m.Name) || !s.st.obs[m.Name].WaitingForEtcd() {
			// only a service Preparing needs to be seen holding: a
			// failed join or an unreadable snapshot is evidence of an
			// empty data directory at once
			delete(waitingSince, m.Name)
			continue
		}
		if _, ok := waitingSince[m.Name]; !ok {
			waitingSince[m.Name] = now
		}
		if now.Sub(waitingSince[m.Name]) < s.opts.EtcdSettle {
			unsettled = append(unsettled, m.Name)
		}
	}
	return notReady, unsettled
}

func (s *Sequence) bootstrapFirst(ctx context.Context, why string) (string, error) {
	m := bootstrapNode(s.inv)
	for _, cp := range s.inv.ControlPlanes() {
		s.say("    %s: %s", cp.Name, s.st.etcd[cp.Name].Seen)
	}
	if s.opts.Recover != nil {
		return s.recoverFirst(ctx, m, why)
	}
	s.say("    %s: bootstrapping %s, the first control plane by name", why, m.Name)
	bctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	c, err := s.dialer.Client(bctx, m)
	if err != nil {
		return "", fmt.Errorf("dial %s: %w", m.Name, err)
	}
	defer c.Close()
	err = c.Bootstrap(bctx, &machine.BootstrapRequest{})
	switch client.StatusCode(err) {
	case codes.OK:
		return "bootstrapped etcd on " + m.Name, nil
	case codes.AlreadyExists:
		return m.Name + " already holds etcd data (AlreadyExists): treated as bootstrapped", nil
	}
	return "", fmt.Errorf("bootstrap %s: %w", m.Name, err)
}
