package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// etcdFact is what one control plane said about etcd.
type etcdFact struct {
	// HasData: the member list answered, so the node holds etcd data; or
	// etcd runs there without a leader (NoLeader), which needs data too.
	HasData bool
	// NoLeader: etcd runs but has no leader (no quorum), so its members
	// could not be read (Members is empty).
	NoLeader bool
	// None: etcd is not running there and the node is configured (no data).
	None bool
	// JoinFailed: with None, the etcd service gave up waiting to join
	// (etcd_failed.go): its data directory was empty, and Talos does not
	// start it again before the node reboots.
	JoinFailed bool
	// EmptyDir: with None, the node's etcd data directory was listed
	// empty (dataDirFact).
	EmptyDir bool
	// Starting: with HasData, the etcd service is Preparing on a data
	// directory that is not empty: etcd starts on its data, as on every
	// boot, and has no members to read yet; or etcd runs there as a learner
	// not yet promoted, which etcd refuses the member list.
	Starting bool
	// Broken: the etcd service failed on data it cannot start from (what a
	// failed restore left, or a member that exits on every start): the
	// node holds data, of no cluster that runs there; Advice says how to
	// clear it.
	Broken  bool
	Advice  string
	Members []string
	// IDs are the member IDs by name, as the member list gave them.
	IDs    map[string]uint64
	Leader uint64
	// Seen is the evidence line; Err is set when the answer was inconclusive.
	Seen string
	Err  error
}

// fleetState is one observation of every machine, with the facts the
// sequence decides on.
type fleetState struct {
	obs  map[string]*talosapi.Observation
	etcd map[string]etcdFact
	// diff and dry are set for configured machines whose applied config differs.
	diff map[string]talosapi.ConfigDiff
	dry  map[string]talosapi.ApplyOutcome
	// dryErr holds dry runs that were refused.
	dryErr map[string]error
}

func (st *fleetState) maintenance(name string) bool {
	o := st.obs[name]
	return o != nil && o.Maintenance
}

func (st *fleetState) differs(name string) bool {
	_, ok := st.diff[name]
	return ok
}

func (st *fleetState) configured(name string) bool {
	o := st.obs[name]
	return o != nil && o.Err == nil
}

// foreignCA names the machines whose TLS handshake failed because their
// certificates are signed by another CA than the talosconfig's
// (talosapi.IsForeignCA).
func (st *fleetState) foreignCA(inv *inventory.Inventory) []string {
	var out []string
	for i := range inv.Machines {
		if o := st.obs[inv.Machines[i].Name]; o != nil && talosapi.IsForeignCA(o.Err) {
			out = append(out, inv.Machines[i].Name)
		}
	}
	return out
}

// inconclusive reports the machines whose state is not known well enough to
// act on: unreachable, or a control plane whose etcd answer was unclear.
// permanent is set when waiting cannot help (the talosconfig lacks a role).
func (st *fleetState) inconclusive(inv *inventory.Inventory) (out []string, permanent bool) {
	note := func(name string, err error) {
		out = append(out, fmt.Sprintf("%s: %v", name, err))
		permanent = permanent || client.StatusCode(err) == codes.PermissionDenied
	}
	for i := range inv.Machines {
		m := &inv.Machines[i]
		o := st.obs[m.Name]
		switch {
		case o == nil:
			out = append(out, m.Name+": not observed")
		case o.Maintenance:
		case o.Err != nil:
			note(m.Name, o.Err)
		case o.ConfigErr != nil:
			note(m.Name, o.ConfigErr)
		case m.IsControlPlane() && st.etcd[m.Name].Err != nil:
			note(m.Name, st.etcd[m.Name].Err)
		}
	}
	return out, permanent
}

// observeFleet observes every machine at once; with dryRun, for configured
// machines whose applied config differs it also asks Talos (a dry run, no
// write) what applying would do.
func observeFleet(ctx context.Context, inv *inventory.Inventory, d *talosapi.Dialer, desiredFor talosapi.DesiredFunc, concurrency int, timeout time.Duration, dryRun bool) *fleetState {
	st := &fleetState{
		obs: map[string]*talosapi.Observation{}, etcd: map[string]etcdFact{},
		diff: map[string]talosapi.ConfigDiff{}, dry: map[string]talosapi.ApplyOutcome{}, dryErr: map[string]error{},
	}
	var ms []*inventory.Machine
	for i := range inv.Machines {
		ms = append(ms, &inv.Machines[i])
	}
	var mu sync.Mutex
	_ = talosapi.ForEach(ctx, ms, concurrency, timeout, func(ctx context.Context, m *inventory.Machine) error {
		sv := talosapi.SurveyMachine(ctx, d, inv, m, desiredFor, talosapi.ModeAuto, dryRun)
		o := sv.Obs
		var fact etcdFact
		if m.IsControlPlane() {
			fact = etcdFactOf(o)
			if fact.None && o.WaitingForEtcd() {
				fact = dataDirFact(ctx, d, m, fact)
			}
		}
		differ := sv.Differs()
		dryErr := sv.DryErr
		switch {
		case sv.CompareErr != nil:
			dryErr = fmt.Errorf("compare configs: %w", sv.CompareErr)
		case sv.Pending:
			dryErr = errPendingConfig
		case sv.DialErr != nil:
			dryErr = sv.DialErr
		}
		diff, dry := sv.Diff, sv.Dry
		o.Active = nil // compared; the hash stays
		mu.Lock()
		defer mu.Unlock()
		st.obs[m.Name] = o
		if m.IsControlPlane() {
			st.etcd[m.Name] = fact
		}
		if differ {
			st.diff[m.Name] = diff
			if dryErr != nil {
				st.dryErr[m.Name] = dryErr
			} else {
				st.dry[m.Name] = dry
			}
		}
		return nil
	})
	return st
}

// errPendingConfig is why a machine whose active config is not its persisted
// one is not even dry-run.
var errPendingConfig = errors.New("its active config is not the one it would boot (a `--mode try` waiting for its rollback, or a staged config): " +
	"no apply is sent, not even a dry run, since any apply but a try cancels a pending rollback; wait for the rollback or reboot it, then run again")

// etcdFactOf reads a control plane's etcd evidence. A member list is proof
// of etcd data. "No data" is read only from positive evidence: the etcd
// service Preparing in its PreFunc, where a control plane without data waits
// to be bootstrapped or to join (services/etcd.go). Never from an error
// code: Talos' etcd calls on such a node wait until the caller's deadline
// or fail on missing certificates (internal/pkg/etcd/etcd.go). Anything else
// is inconclusive and blocks bootstrapping (fail closed).
func etcdFactOf(o *talosapi.Observation) etcdFact {
	switch {
	case o.Maintenance:
		return etcdFact{None: true, Seen: "maintenance mode: not configured, no etcd"}
	case o.Err != nil:
		return etcdFact{Err: o.Err, Seen: "did not answer: " + o.Err.Error()}
	case errors.Is(o.EtcdErr, talosapi.ErrEtcdNoLeader):
		// EtcdStatus answered: etcd runs on data, but without a leader
		// EtcdMemberList cannot say whose cluster it is
		return etcdFact{HasData: true, NoLeader: true, Seen: "etcd runs but has no leader, so no quorum, and its members cannot be read (" + o.EtcdErr.Error() + ")"}
	case errors.Is(o.EtcdErr, talosapi.ErrEtcdLearner):
		// added to a cluster and its etcd runs: it holds data
		return etcdFact{HasData: true, Starting: true, Seen: "etcd runs as a learner of a cluster, not yet promoted (etcd refuses a learner the member list: " + o.EtcdErr.Error() + ")"}
	case o.Etcd != nil:
		members := slices.Clone(o.Etcd.Members)
		slices.Sort(members)
		return etcdFact{HasData: true, Members: members, IDs: o.Etcd.IDs, Leader: o.Etcd.Leader,
			Seen: fmt.Sprintf("EtcdMemberList answers: members [%s]", strings.Join(members, " "))}
	case o.EtcdService != nil && o.EtcdService.State == "Failed" && failedFact(o.EtcdService) != nil:
		return *failedFact(o.EtcdService)
	case o.WaitingForEtcd():
		return etcdFact{None: true, Seen: fmt.Sprintf("service etcd Preparing (%q since %s): waiting to be bootstrapped or to join", o.EtcdService.Event, o.EtcdService.Since.UTC().Format(time.RFC3339))}
	default:
		err := o.EtcdErr
		if err == nil {
			err = fmt.Errorf("no etcd answer")
		}
		return etcdFact{Err: err, Seen: "etcd state unclear: " + err.Error()}
	}
}
