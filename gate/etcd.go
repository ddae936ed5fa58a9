// Package gate decides whether a change to the cluster may go ahead: etcd
// healthy from every control plane's point of view, and a control plane taken
// down only while etcd keeps quorum without it. Bootstrap, apply and reconcile
// ask it; it only reads.
package gate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// EtcdView is etcd as every control plane reports it at one moment: what
// MayTakeDown decides from.
type EtcdView struct {
	// Members are the voting members the answering control planes agree on,
	// sorted; nil when they disagree or none answered.
	Members []string
	// Healthy are the members whose etcd answered with no error and a leader.
	Healthy []string
	// Learners are members not yet promoted, as any control plane reports them.
	Learners []string
	// Down are control planes that did not answer or whose etcd does not run
	// (rebooting, stopped, failed).
	Down []string
	// NoLeader are control planes whose etcd runs but has no leader
	// (talosapi.ErrEtcdNoLeader), sorted: they hold data and can stream a
	// snapshot, but cannot list etcd's members. When no member is healthy
	// besides, etcd has no quorum (NoQuorum).
	NoLeader []string
	// Problems is everything EtcdHealthy refuses, sorted; empty when healthy.
	Problems []string
	// NotBootstrapped lists every control plane, sorted, when each one
	// answered and reports its etcd not running and waiting in its PreFunc
	// to be bootstrapped or to join (talosapi.Observation.WaitingForEtcd):
	// no etcd cluster exists, and waiting does not make one. Empty
	// otherwise.
	NotBootstrapped []string
	// Unjoined are control planes that answer in maintenance mode (not
	// configured) and that no member lists: not part of etcd yet, as
	// before apply joins a machine added to the inventory. A control plane
	// in maintenance mode that a member still lists (a disk wiped without
	// leaving etcd) is a member that is down, not one of these.
	Unjoined []string
}

// NoQuorum reports an etcd without quorum: a control plane runs etcd
// without a leader, and no member is healthy (with a leader). The
// Kubernetes API does not answer then; waiting helps only as the control
// planes that are down come back.
func (v EtcdView) NoQuorum() bool {
	return len(v.NoLeader) > 0 && len(v.Healthy) == 0
}

// QuorumError is MayTakeDown's refusal.
type QuorumError struct {
	// Loss: etcd is healthy but too small to lose a member (one or two
	// control planes); waiting does not help, --allow-quorum-loss does.
	// Otherwise etcd is not healthy enough right now, and waiting may help.
	Loss bool
	// Why says what taking it down means; Next what to do about it.
	Why, Next string
}

func (e *QuorumError) Error() string { return e.Why + "; " + e.Next }

// MayTakeDown decides whether control plane name may be taken down (a
// rebooting change) without etcd losing quorum. Every member must be healthy,
// the control planes must agree on the members, no learner may be pending and
// none may be down; then the healthy members left, healthy−1, must still be a
// quorum of the n members, ⌊n/2⌋+1. With one or two members no control plane
// can go down without the Kubernetes API stopping until it returns.
func MayTakeDown(v EtcdView, name string) error {
	n := len(v.Members)
	left := len(v.Healthy)
	if slices.Contains(v.Healthy, name) {
		left--
	}
	quorum := n/2 + 1
	var why []string
	if n == 0 && !v.NoQuorum() { // without quorum a Problem says so
		why = append(why, "the control planes do not agree on etcd's members")
	}
	for _, m := range v.Down {
		why = append(why, m+" is down")
	}
	for _, m := range v.Members {
		if !slices.Contains(v.Healthy, m) && !slices.Contains(v.Down, m) {
			why = append(why, m+" is not healthy")
		}
	}
	for _, l := range v.Learners {
		if l == "" {
			l = "(unnamed: its etcd has not started)"
		}
		why = append(why, "learner "+l+" is not yet promoted")
	}
	why = append(why, v.Problems...)
	if len(why) > 0 {
		msg := fmt.Sprintf("etcd cannot lose %s now: %s", name, strings.Join(why, "; "))
		if n > 0 && left < quorum {
			msg += fmt.Sprintf("; taking %s down now leaves %d of %d healthy, below quorum %d", name, max(left, 0), n, quorum)
		}
		if v.NoQuorum() {
			return &QuorumError{Why: msg, Next: noQuorumNext}
		}
		return &QuorumError{Why: msg, Next: "wait until every member is healthy, then run again"}
	}
	if left < quorum {
		return &QuorumError{Loss: true,
			Why: fmt.Sprintf("etcd has %d %s; taking %s down leaves %d of %d, below quorum %d: the Kubernetes API stops until it returns",
				n, plural(n, "member", "members"), name, left, n, quorum),
			Next: fmt.Sprintf("pass --allow-quorum-loss to accept that, or add %s so that one can be down without losing quorum", addControlPlanes(n))}
	}
	return nil
}

// noQuorumNext is what to do about an etcd without quorum.
const noQuorumNext = "bring back the control planes that are down (etcd elects a leader once more than half of its members run), then run again; devata backup etcd still takes a snapshot from a member that runs"

// addControlPlanes says what makes a cluster of n members survive one down.
func addControlPlanes(n int) string {
	if n == 2 {
		return "a third control plane"
	}
	return fmt.Sprintf("control planes up to three (%d more)", 3-n)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// ObserveEtcd asks every control plane of inv for its view of etcd, in a
// full observation of each (talosapi.Observe).
func ObserveEtcd(ctx context.Context, inv *inventory.Inventory, d *talosapi.Dialer, timeout time.Duration) EtcdView {
	return observeEtcd(ctx, inv, d, timeout, talosapi.Observe)
}

// ObserveEtcdOnly is ObserveEtcd through the etcd calls alone
// (talosapi.ObserveEtcd): what a talosconfig with the os:etcd:backup role
// may read. It tells control planes that wait to be bootstrapped
// (NotBootstrapped) only when the role may read the etcd service.
func ObserveEtcdOnly(ctx context.Context, inv *inventory.Inventory, d *talosapi.Dialer, timeout time.Duration) EtcdView {
	return observeEtcd(ctx, inv, d, timeout, func(ctx context.Context, d *talosapi.Dialer, m *inventory.Machine, _ ...talosapi.Read) *talosapi.Observation {
		return talosapi.ObserveEtcd(ctx, d, m)
	})
}

type observeFunc func(context.Context, *talosapi.Dialer, *inventory.Machine, ...talosapi.Read) *talosapi.Observation

func observeEtcd(ctx context.Context, inv *inventory.Inventory, d *talosapi.Dialer, timeout time.Duration, observe observeFunc) EtcdView {
	cps := inv.ControlPlanes()
	var want []string
	for _, m := range cps {
		want = append(want, m.Name)
	}
	slices.Sort(want)
	var (
		mu      sync.Mutex
		v       EtcdView
		waiting []string
		maint   []string
	)
	t := &etcdTally{v: &v, want: want, learners: map[string]bool{}, leaders: map[uint64]bool{}, listed: map[string]bool{}}
	learners, leaders, listed := t.learners, t.leaders, t.listed
	_ = talosapi.ForEach(ctx, cps, len(cps), timeout, func(ctx context.Context, m *inventory.Machine) error {
		o := observe(ctx, d, m)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case o.Err != nil:
			v.Problems = append(v.Problems, o.Err.Error())
			v.Down = append(v.Down, m.Name)
			if o.Maintenance {
				maint = append(maint, m.Name)
			}
		case errors.Is(o.EtcdErr, talosapi.ErrEtcdNoLeader):
			// it runs and holds data, but cannot say who the members are
			v.Problems = append(v.Problems, fmt.Sprintf("%s: etcd runs but has no leader (%s)", m.Name, etcdSays(o)))
			v.NoLeader = append(v.NoLeader, m.Name)
		case errors.Is(o.EtcdErr, talosapi.ErrEtcdLearner):
			// it joined and runs, a learner etcd refuses the member list
			v.Problems = append(v.Problems, fmt.Sprintf("%s: etcd runs as a learner, not yet promoted", m.Name))
			learners[m.Name] = true
		case o.Etcd == nil:
			v.Problems = append(v.Problems, fmt.Sprintf("%s: %v", m.Name, o.EtcdErr))
			v.Down = append(v.Down, m.Name)
			if o.WaitingForEtcd() {
				waiting = append(waiting, m.Name)
			}
		default:
			t.member(m, o)
		}
		return nil
	})
	if len(v.Problems) == 0 && (len(leaders) != 1 || leaders[0]) {
		v.Problems = append(v.Problems, "control planes do not agree on one etcd leader")
	}
	if len(t.seen) > 0 && !slices.ContainsFunc(t.seen, func(s []string) bool { return !slices.Equal(s, t.seen[0]) }) {
		v.Members = t.seen[0]
	}
	// A healthy control plane that is not a member counts for nothing.
	v.Healthy = slices.DeleteFunc(v.Healthy, func(m string) bool { return !slices.Contains(v.Members, m) })
	for l := range learners {
		v.Learners = append(v.Learners, l)
	}
	slices.Sort(v.Learners)
	slices.Sort(v.Healthy)
	slices.Sort(v.Down)
	slices.Sort(v.NoLeader)
	if v.NoQuorum() {
		v.Problems = append(v.Problems, v.NoQuorumReason())
	}
	slices.Sort(v.Problems)
	// Talos v1.11.0, internal/app/machined/pkg/system/services/etcd.go: on a
	// control plane with an empty data directory the etcd service's PreFunc
	// (argsForControlPlane) calls buildInitialCluster, which retries
	// addMember against the other control planes for EtcdJoinTimeout,
	// nagging "etcd is waiting to join the cluster, if this node is the
	// first node in the cluster, please run `talosctl bootstrap`"; only
	// BootstrapEtcd (the Bootstrap API) restarts it with Bootstrap: true.
	// So when every control plane waits there, none has a cluster to join and
	// nothing but a bootstrap ends the wait. (A control plane with data
	// passes through the PreFunc for a moment after each boot; every one at
	// once means they all just booted, and devata bootstrap, told to run,
	// watches the wait hold before it bootstraps and Talos refuses a
	// bootstrap over data.)
	for _, m := range maint {
		if !listed[m] {
			v.Unjoined = append(v.Unjoined, m)
		}
	}
	slices.Sort(v.Unjoined)
	if len(cps) > 0 && len(waiting) == len(cps) {
		slices.Sort(waiting)
		v.NotBootstrapped = waiting
	}
	return v
}

// etcdTally gathers, one control plane at a time (its caller holds the
// lock), what the members that answered with a member list say.
type etcdTally struct {
	v        *EtcdView
	want     []string // the inventory's control planes, sorted
	seen     [][]string
	learners map[string]bool
	leaders  map[uint64]bool
	listed   map[string]bool
}

// member counts one control plane whose etcd listed its members.
func (t *etcdTally) member(m *inventory.Machine, o *talosapi.Observation) {
	v := t.v
	got := slices.Clone(o.Etcd.Members)
	slices.Sort(got)
	t.seen = append(t.seen, got)
	if !slices.Equal(got, t.want) {
		v.Problems = append(v.Problems, fmt.Sprintf("%s sees members [%s], want [%s]", m.Name, strings.Join(got, " "), strings.Join(t.want, " ")))
	}
	healthy := true
	if o.EtcdErr != nil {
		v.Problems = append(v.Problems, fmt.Sprintf("%s: %v", m.Name, o.EtcdErr))
		healthy = false
	}
	if len(o.Etcd.Errors) > 0 {
		v.Problems = append(v.Problems, fmt.Sprintf("%s: etcd reports %s", m.Name, strings.Join(o.Etcd.Errors, "; ")))
		healthy = false
	}
	if o.EtcdErr == nil && o.Etcd.Leader == 0 {
		healthy = false
	}
	if healthy {
		v.Healthy = append(v.Healthy, m.Name)
	}
	for _, l := range o.Etcd.Learners {
		t.learners[l] = true
	}
	for _, h := range append(slices.Clone(o.Etcd.Members), o.Etcd.Learners...) {
		t.listed[h] = true
	}
	t.leaders[o.Etcd.Leader] = true
}

// NoQuorumReason says that etcd has no quorum, who runs without a leader
// and who is down; "" when NoQuorum is false.
func (v EtcdView) NoQuorumReason() string {
	if !v.NoQuorum() {
		return ""
	}
	why := fmt.Sprintf("etcd has no quorum: no member has a leader (%s %s without one", strings.Join(v.NoLeader, ", "), runs(len(v.NoLeader)))
	if len(v.Down) > 0 {
		why += "; " + strings.Join(v.Down, ", ") + " " + isAre(len(v.Down)) + " down"
	}
	return why + "); the Kubernetes API does not answer until more than half of etcd's members run"
}

// etcdSays is what a member without a leader says of it: etcd's own
// words from EtcdStatus, else from the member list.
func etcdSays(o *talosapi.Observation) string {
	if o.EtcdLocal != nil && len(o.EtcdLocal.Errors) > 0 {
		return strings.Join(o.EtcdLocal.Errors, "; ")
	}
	return o.EtcdErr.Error()
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

func runs(n int) string {
	if n == 1 {
		return "runs"
	}
	return "run"
}

// Err is EtcdHealthy's verdict on the view.
func (v EtcdView) Err() error {
	if len(v.Problems) > 0 {
		return fmt.Errorf("%s", strings.Join(v.Problems, "; "))
	}
	return nil
}

// MayRemove decides whether member name may be removed from etcd (devata
// remove) without etcd losing quorum. Removing a member is a membership
// change etcd itself commits through the current quorum, and it leaves n−1
// members whose quorum is ⌊(n−1)/2⌋+1. So the control planes that answer
// must agree on the members, name must be one of them and not the last, no
// learner may be pending, and every member that stays must be healthy: a
// removal with a member already down would leave a cluster one failure from
// stopping, and the operator should see that first. The member removed may
// be down or gone: that is why it is removed. v comes from ObserveEtcd over
// the inventory, which no longer holds name, so its "sees members" problem
// about name is expected and not a refusal.
func MayRemove(v EtcdView, name string) error {
	if v.NoQuorum() {
		var why []string
		for _, m := range v.Down {
			if m != name {
				why = append(why, m+" is down")
			}
		}
		why = append(why, v.NoQuorumReason())
		return &QuorumError{Why: fmt.Sprintf("etcd cannot lose member %s now: %s; etcd commits a removal through its quorum", name, strings.Join(why, "; ")), Next: noQuorumNext}
	}
	if len(v.Members) == 0 {
		why := "the control planes do not agree on etcd's members"
		if len(v.Problems) > 0 {
			why += ": " + strings.Join(v.Problems, "; ")
		}
		return &QuorumError{Why: why, Next: "wait until every control plane of the inventory answers and agrees, then run again"}
	}
	if !slices.Contains(v.Members, name) {
		return &QuorumError{Why: fmt.Sprintf("%s is not an etcd member (members: %s)", name, strings.Join(v.Members, ", ")), Next: "nothing to remove from etcd"}
	}
	stay := slices.DeleteFunc(slices.Clone(v.Members), func(m string) bool { return m == name })
	if len(stay) == 0 {
		return &QuorumError{Loss: true, Why: fmt.Sprintf("%s is etcd's only member: removing it ends the cluster", name),
			Next: "keep it: the last member holds the cluster's data; take a snapshot with devata backup etcd before anything else"}
	}
	var why []string
	for _, m := range stay {
		switch {
		case slices.Contains(v.Down, m):
			why = append(why, m+" is down")
		case !slices.Contains(v.Healthy, m):
			why = append(why, m+" is not healthy")
		}
	}
	for _, l := range v.Learners {
		if l == "" {
			l = "(unnamed: its etcd has not started)"
		}
		why = append(why, "learner "+l+" is not yet promoted")
	}
	healthy := 0
	for _, m := range stay {
		if slices.Contains(v.Healthy, m) {
			healthy++
		}
	}
	quorum := len(stay)/2 + 1
	if len(why) > 0 {
		msg := fmt.Sprintf("etcd cannot lose member %s now: %s", name, strings.Join(why, "; "))
		if healthy < quorum {
			msg += fmt.Sprintf("; the %d members left would have %d healthy, below their quorum %d", len(stay), healthy, quorum)
		}
		return &QuorumError{Why: msg, Next: "wait until every member that stays is healthy, then run again"}
	}
	return nil
}
