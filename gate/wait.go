package gate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"devata.dev/devata/internal/heartbeat"
	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// ErrFailed is wrapped by every gate failure.
var ErrFailed = errors.New("gate failed")

// ErrNotBootstrapped is wrapped by a gate that refused at once because no
// control plane has etcd bootstrapped (EtcdView.NotBootstrapped): waiting
// does not help, devata bootstrap does.
var ErrNotBootstrapped = errors.New("etcd is not bootstrapped on any control plane")

// EtcdHealthy checks etcd from every control plane's point of view: every
// control plane answers, they agree that the members are exactly the
// inventory's control planes, etcd reports no errors and one leader.
func EtcdHealthy(ctx context.Context, inv *inventory.Inventory, d *talosapi.Dialer, timeout time.Duration) error {
	return ObserveEtcd(ctx, inv, d, timeout).Err()
}

// Etcd is the etcd gate of a rollout, passed before and after each change
// to a control plane.
type Etcd struct {
	Inventory *inventory.Inventory
	Dialer    *talosapi.Dialer
	// Timeout bounds one Talos API call; Wait bounds waiting for the gate;
	// Poll is how often it looks again.
	Timeout, Wait, Poll time.Duration
	// AllowQuorumLoss lets a change take down a control plane of an etcd
	// too small to lose one (one or two members; see MayTakeDown).
	AllowQuorumLoss bool
	// Say prints one line of progress for people.
	Say func(format string, args ...any)
	// Heartbeat is how often a wait says it still waits, through Say
	// (heartbeat.Every when zero).
	Heartbeat time.Duration
	// JoinedOnly leaves control planes that are not part of etcd yet
	// (EtcdView.Unjoined: in maintenance mode, listed by no member) out
	// of the members the gate expects, as apply and reconcile do, which
	// join them: etcd's health and quorum are its members'.
	JoinedOnly bool
	// AlreadyDown are control planes that did not answer before the run
	// began (the plan could not reach them), sorted or not: nothing this
	// run does brings them back, so a gate that finds one of them down
	// fails at once, naming it, instead of waiting out Wait.
	AlreadyDown []string
}

// Pass waits until every control plane answers, agrees on the members,
// which are exactly the inventory's control planes, and reports no errors and
// a leader. Before a change that takes control plane down (one that reboots)
// it also waits until MayTakeDown lets it go; a refusal because etcd is too
// small to lose a member stops at once, since waiting does not help, unless
// AllowQuorumLoss accepts it. So does a fleet where no control plane has
// etcd bootstrapped (EtcdView.NotBootstrapped): the error wraps
// ErrNotBootstrapped and says to run devata bootstrap. when names the moment
// in its lines and errors ("before cp-2"). While it waits, a heartbeat says
// every Heartbeat which problem it waits out.
func (g *Etcd) Pass(ctx context.Context, when string, down *inventory.Machine) error {
	return g.pass(ctx, when, down, nil)
}

// PassJoin is the gate before control plane joining joins etcd: every
// member healthy, the control planes that are not part of etcd yet
// (joining among them) left out. When a member still bears joining's name
// (its previous life: a disk wiped without leaving etcd), Talos removes
// that member as the machine joins (services/etcd.go addMember), so etcd
// must be able to lose it (MayRemove) instead.
func (g *Etcd) PassJoin(ctx context.Context, when string, joining *inventory.Machine) error {
	return g.pass(ctx, when, nil, joining)
}

func (g *Etcd) pass(ctx context.Context, when string, down, joining *inventory.Machine) error {
	wctx, cancel := context.WithTimeout(ctx, g.Wait)
	defer cancel()
	health := "etcd to be healthy (gate " + when + ")"
	beat := heartbeat.Start(g.Say, g.Heartbeat, g.Wait, health)
	defer beat.Stop()
	for {
		v := g.observe(ctx, joining)
		if len(v.NotBootstrapped) > 0 {
			return fmt.Errorf("%w %s: %w (each waits to be bootstrapped or to join: %s): run devata bootstrap",
				ErrFailed, when, ErrNotBootstrapped, strings.Join(v.NotBootstrapped, ", "))
		}
		err := v.Err()
		waitsFor, last := health, ""
		if joining != nil && slices.Contains(v.Members, joining.Name) {
			err = MayRemove(v, joining.Name)
			waitsFor = "etcd to be able to lose " + joining.Name + "'s old member, which its join replaces (gate " + when + ")"
		}
		if err == nil && down != nil {
			var qe *QuorumError
			switch qerr := MayTakeDown(v, down.Name); {
			case qerr == nil:
			case errors.As(qerr, &qe) && qe.Loss && g.AllowQuorumLoss:
				g.say("    gate %s: quorum loss accepted (--allow-quorum-loss): %s", when, qe.Why)
			case qe != nil && qe.Loss:
				return fmt.Errorf("%w %s: %w", ErrFailed, when, qerr)
			default:
				err = qerr
				if qe != nil {
					last = qe.Why
				}
				waitsFor = "etcd to be able to lose " + down.Name + " and keep quorum (gate " + when + ")"
			}
		}
		if err == nil {
			beat.Stop() // no heartbeat after the verdict
			g.say("    gate %s: etcd healthy, %d/%d members", when, len(v.Healthy), len(v.Members))
			return nil
		}
		if gone := alreadyDown(v, g.AlreadyDown); len(gone) > 0 {
			beat.Stop()
			return fmt.Errorf("%w %s: %s did not answer when this run was planned and %s still down, so etcd cannot be seen healthy and no control plane is changed (%v). "+
				"Bring %s back (talosctl -n %s version), then run again; to change only the workers meanwhile, name them with --machines (no etcd gate holds a worker). "+
				"--allow-quorum-loss does not help here: it accepts taking down a control plane of an etcd too small to lose one, not changing one while another is down",
				ErrFailed, when, strings.Join(gone, ", "), isAre(len(gone)), err, strings.Join(gone, ", "), strings.Join(gone, ","))
		}
		if last == "" {
			last = err.Error()
		}
		beat.For(waitsFor)
		beat.Saw(last)
		select {
		case <-wctx.Done():
			return fmt.Errorf("%w %s: %v", ErrFailed, when, err)
		case <-time.After(g.Poll):
		}
	}
}

// observe is ObserveEtcd over the control planes the gate counts: with
// JoinedOnly, or before a join, those not part of etcd yet are left out,
// and so is joining.
func (g *Etcd) observe(ctx context.Context, joining *inventory.Machine) EtcdView {
	v := ObserveEtcd(ctx, g.Inventory, g.Dialer, g.Timeout)
	var out []string
	if g.JoinedOnly || joining != nil {
		out = v.Unjoined
	}
	if joining != nil && !slices.Contains(out, joining.Name) {
		out = append(slices.Clone(out), joining.Name)
	}
	if len(out) == 0 {
		return v
	}
	inv := *g.Inventory
	inv.Machines = slices.DeleteFunc(slices.Clone(inv.Machines), func(m inventory.Machine) bool { return slices.Contains(out, m.Name) })
	if len(inv.ControlPlanes()) == 0 {
		return EtcdView{Problems: []string{"no control plane but " + strings.Join(out, ", ") + ", which are not part of etcd: no cluster to join; devata bootstrap builds it"}}
	}
	return ObserveEtcd(ctx, &inv, g.Dialer, g.Timeout)
}

func (g *Etcd) say(format string, args ...any) {
	if g.Say != nil {
		g.Say(format, args...)
	}
}

// alreadyDown are the control planes of already that v counts down.
func alreadyDown(v EtcdView, already []string) []string {
	var out []string
	for _, name := range v.Down {
		if slices.Contains(already, name) {
			out = append(out, name)
		}
	}
	return out
}
