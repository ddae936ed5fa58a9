package sequence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/drift"
	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
)

// Step names of plan actions, in the order the sequence takes them.
const (
	StepSecrets     = "secrets"
	StepRender      = "render"
	StepConfigure   = "configure"
	StepApply       = "apply"
	StepBootstrap   = "bootstrap-etcd"
	StepWaitEtcd    = "wait-etcd"
	StepKubeconfig  = "kubeconfig"
	StepWaitNodes   = "wait-nodes"
	StepDriftReport = "drift-report"
)

// The commands that take actions, and the rungs the sequence's own evidence comes from.
const (
	byBootstrap      = "bootstrap"
	byApply          = "apply"
	maintenanceRung  = drift.RungReconciliation
	etcdEvidenceRung = drift.RungResources
)

// Status is where a planned action stands now.
type Status string

// Action statuses.
const (
	// StatusPending: the action would change something now.
	StatusPending Status = "pending"
	// StatusDone: what the action would achieve is already observed.
	StatusDone Status = "done"
	// StatusBlocked: devata refuses or cannot decide; the reason says why and what to do.
	StatusBlocked Status = "blocked"
	// StatusCheck: a read-only verification (the drift report).
	StatusCheck Status = "check"
)

// Evidence is one observation behind an action: the rung of the evidence
// ladder it comes from and what was seen.
type Evidence struct {
	Rung     drift.Rung `json:"rung"`
	Observed string     `json:"observed"`
}

// Action is one step of the plan, for the whole cluster or one machine.
type Action struct {
	Step    string `json:"step"`
	Machine string `json:"machine,omitempty"`
	Status  Status `json:"status"`
	// By is the command that takes the action: bootstrap or apply.
	By       string     `json:"by"`
	Summary  string     `json:"summary"`
	Reason   string     `json:"reason"`
	Evidence []Evidence `json:"evidence,omitempty"`
	// Talosctl are the commands an operator would run by hand for this step,
	// with inventory addresses (never dial overrides).
	Talosctl []string `json:"talosctl,omitempty"`
	// Reboots is set when the action takes a running machine away.
	Reboots bool `json:"reboots,omitempty"`
}

// Plan is the ordered list of what bootstrap and apply would do now.
type Plan struct {
	Cluster   string `json:"cluster"`
	Inventory string `json:"inventory"`
	// Notes are facts about the plan itself (a throwaway bundle, a derived talosconfig).
	Notes   []string `json:"notes,omitempty"`
	Actions []Action `json:"actions"`
}

// Pending returns the actions that would change something.
func (p *Plan) Pending() []Action { return p.with(StatusPending) }

// Blocked returns the actions devata refuses or cannot decide.
func (p *Plan) Blocked() []Action { return p.with(StatusBlocked) }

func (p *Plan) with(s Status) []Action {
	var out []Action
	for _, a := range p.Actions {
		if a.Status == s {
			out = append(out, a)
		}
	}
	return out
}

// etcdFact is what one control plane said about etcd.
type etcdFact struct {
	// HasData: the member list answered, so the node holds etcd data.
	HasData bool
	// None: etcd is not running there and the node is configured (no data).
	None    bool
	Members []string
	Leader  uint64
	// Seen is the evidence line; Err is set when the answer was inconclusive.
	Seen string
	Err  error
}

// fleetState is one observation of every machine, with the facts the
// sequence decides on.
type fleetState struct {
	obs  map[string]*machines.Observation
	etcd map[string]etcdFact
	// diff and dry are set for configured machines whose applied config differs.
	diff map[string]machines.ConfigDiff
	dry  map[string]machines.ApplyOutcome
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
func observeFleet(ctx context.Context, inv *inventory.Inventory, d *machines.Dialer, desired map[string][]byte, concurrency int, timeout time.Duration, dryRun bool) *fleetState {
	st := &fleetState{
		obs: map[string]*machines.Observation{}, etcd: map[string]etcdFact{},
		diff: map[string]machines.ConfigDiff{}, dry: map[string]machines.ApplyOutcome{}, dryErr: map[string]error{},
	}
	var ms []*inventory.Machine
	for i := range inv.Machines {
		ms = append(ms, &inv.Machines[i])
	}
	var mu sync.Mutex
	_ = machines.ForEach(ctx, ms, concurrency, timeout, func(ctx context.Context, m *inventory.Machine) error {
		o := machines.Observe(ctx, d, m)
		var fact etcdFact
		if m.IsControlPlane() {
			fact = etcdFactOf(o)
		}
		var (
			diff   machines.ConfigDiff
			dry    machines.ApplyOutcome
			dryErr error
			differ bool
		)
		if o.Err == nil && o.ConfigErr == nil {
			var err error
			diff, err = machines.DiffConfigs(o.Active, desired[m.Name])
			switch {
			case err != nil:
				dryErr = fmt.Errorf("compare configs: %w", err)
				differ = true
			case !diff.Equal && o.PendingConfig():
				differ = true
				dryErr = errPendingConfig
			case !diff.Equal && !dryRun:
				differ = true
			case !diff.Equal:
				differ = true
				c, err := d.Client(ctx, m)
				if err == nil {
					dry, dryErr = machines.DryRun(ctx, c, desired[m.Name], machines.ModeAuto)
					c.Close()
				} else {
					dryErr = err
				}
			}
		}
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
func etcdFactOf(o *machines.Observation) etcdFact {
	switch {
	case o.Maintenance:
		return etcdFact{None: true, Seen: "maintenance mode: not configured, no etcd"}
	case o.Err != nil:
		return etcdFact{Err: o.Err, Seen: "did not answer: " + o.Err.Error()}
	case o.Etcd != nil:
		members := slices.Clone(o.Etcd.Members)
		slices.Sort(members)
		return etcdFact{HasData: true, Members: members, Leader: o.Etcd.Leader,
			Seen: fmt.Sprintf("EtcdMemberList answers: members [%s]", strings.Join(members, " "))}
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

// verdict is the sequence's reading of etcd across the control planes.
type verdict int

const (
	etcdNone    verdict = iota // no control plane has etcd data: bootstrap one
	etcdOurs                   // a cluster of exactly our control planes exists (maybe still forming)
	etcdForeign                // refuse: data that is not a cluster of our control planes
	etcdUnclear                // cannot decide: some control plane did not answer clearly
)

// etcdVerdict decides from every control plane's answer. It is "ours" only
// when every node with data reports members that are all configured control
// planes, all of them agree, and no control plane is still in maintenance
// mode: devata bootstraps only after every machine left maintenance mode, so
// etcd data next to an unconfigured control plane was not made by this
// sequence from this inventory.
func etcdVerdict(inv *inventory.Inventory, st *fleetState) (verdict, string) {
	cps := inv.ControlPlanes()
	var want []string
	for _, m := range cps {
		want = append(want, m.Name)
	}
	var withData, inMaintenance []string
	var unclear []string
	for _, m := range cps {
		f := st.etcd[m.Name]
		switch {
		case f.HasData:
			withData = append(withData, m.Name)
		case st.maintenance(m.Name):
			inMaintenance = append(inMaintenance, m.Name)
		case f.Err != nil:
			unclear = append(unclear, m.Name+": "+f.Seen)
		}
	}
	slices.Sort(withData)
	if len(withData) == 0 {
		if len(unclear) > 0 {
			return etcdUnclear, "cannot tell whether these control planes hold etcd data, so nothing is bootstrapped: " + strings.Join(unclear, "; ")
		}
		return etcdNone, "no control plane has etcd data"
	}
	first := st.etcd[withData[0]]
	for _, name := range withData {
		f := st.etcd[name]
		if len(inMaintenance) > 0 {
			return etcdForeign, fmt.Sprintf("%s already has etcd data (%s) while %s %s still in maintenance mode. "+
				"devata bootstrap configures every machine before it bootstraps etcd, so it did not make this data from this inventory; nothing was applied or bootstrapped. "+
				"If %s belongs to another cluster, wipe it (talosctl -n %s reset --graceful=false --reboot --system-labels-to-wipe EPHEMERAL) and run bootstrap again; "+
				"if it is this cluster's and %s %s reinstalled, that is a control-plane replacement, not a bootstrap (talosctl etcd remove-member, then talosctl apply-config --insecure)",
				name, f.Seen, strings.Join(inMaintenance, ", "), isAre(len(inMaintenance)), name, inv.Machine(name).Address, strings.Join(inMaintenance, ", "), wasWere(len(inMaintenance)))
		}
		for _, member := range f.Members {
			if !slices.Contains(want, member) {
				return etcdForeign, fmt.Sprintf("%s already has etcd data (%s): member %q is not a control plane of this inventory; refusing to bootstrap", name, f.Seen, member)
			}
		}
		if !slices.Equal(f.Members, first.Members) {
			return etcdForeign, fmt.Sprintf("%s and %s report different etcd clusters (%s; %s): refusing to bootstrap", withData[0], name, first.Seen, f.Seen)
		}
	}
	if len(unclear) > 0 {
		return etcdUnclear, "etcd exists on " + strings.Join(withData, ", ") + " but these control planes did not answer clearly: " + strings.Join(unclear, "; ")
	}
	return etcdOurs, fmt.Sprintf("etcd exists: %s report members [%s], all control planes of this inventory", strings.Join(withData, ", "), strings.Join(first.Members, " "))
}

func wasWere(n int) string {
	if n == 1 {
		return "was"
	}
	return "were"
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// bootstrapNode is the control plane devata bootstraps: the first by name.
func bootstrapNode(inv *inventory.Inventory) *inventory.Machine {
	cps := inv.ControlPlanes()
	slices.SortFunc(cps, func(a, b *inventory.Machine) int { return strings.Compare(a.Name, b.Name) })
	return cps[0]
}

// planInput is everything buildPlan reads.
type planInput struct {
	inv            *inventory.Inventory
	secretsPath    string
	secretsMissing bool
	st             *fleetState
	etcdHealthy    error // nil when healthy; only meaningful when every control plane is configured
	kubeconfig     kubeconfigState
	nodes          *machines.Nodes
	skipNodes      bool
}

type kubeconfigState struct {
	Path   string
	Exists bool
	// Ours: the existing file is for this cluster (server and CA).
	Ours bool
	Why  string
}

// rel shows a path relative to the inventory's directory when it is inside it,
// so that plans do not depend on where the inventory lives.
func rel(inv *inventory.Inventory, path string) string {
	dir := filepath.Dir(inv.Path)
	if r, err := filepath.Rel(dir, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}

func configFile(m *inventory.Machine) string { return "rendered/" + m.Name + ".yaml" }

// buildPlan turns one observation into the ordered actions.
func buildPlan(in planInput) *Plan {
	inv := in.inv
	p := &Plan{Cluster: inv.Cluster.Name, Inventory: filepath.Base(inv.Path)}
	add := func(a Action) {
		if a.By == "" {
			a.By = byBootstrap
		}
		p.Actions = append(p.Actions, a)
	}

	secrets := rel(inv, in.secretsPath)
	if in.secretsMissing {
		add(Action{Step: StepSecrets, Status: StatusPending, Summary: "create the secrets bundle " + secrets + " (mode 0600)",
			Reason:   "no bundle at the inventory's cluster.secrets",
			Evidence: []Evidence{{drift.RungDeclaration, secrets + " does not exist"}},
			Talosctl: []string{"talosctl gen secrets -o " + secrets}})
	} else {
		add(Action{Step: StepSecrets, Status: StatusDone, Summary: "load the secrets bundle " + secrets,
			Reason:   "the bundle exists; it is never replaced",
			Evidence: []Evidence{{drift.RungDeclaration, secrets + " loads and validates"}}})
	}
	add(Action{Step: StepRender, Status: StatusDone, Summary: "render and validate every machine's config (metal mode)",
		Reason:   "configs are rendered from the inventory and the bundle on every run",
		Evidence: []Evidence{{drift.RungDeclaration, fmt.Sprintf("%d configs render and validate", len(inv.Machines))}},
		Talosctl: []string{"devata gen config -o rendered/   # one file per machine and a talosconfig; export TALOSCONFIG=rendered/talosconfig"}})

	verdict, why := etcdVerdict(inv, in.st)
	clusterExists := verdict == etcdOurs

	// Machines: maintenance → configure; differing configs → apply (by bootstrap
	// before the cluster exists, by apply after, under its etcd gates).
	ordered := slices.Clone(inv.ControlPlanes())
	for i := range inv.Machines {
		if !inv.Machines[i].IsControlPlane() {
			ordered = append(ordered, &inv.Machines[i])
		}
	}
	for _, m := range ordered {
		o := in.st.obs[m.Name]
		switch {
		case o == nil:
			add(Action{Step: StepConfigure, Machine: m.Name, Status: StatusBlocked, Summary: "observe " + m.Name, Reason: "not observed"})
		case o.Maintenance:
			a := Action{Step: StepConfigure, Machine: m.Name, Status: StatusPending,
				Summary:  "apply its config (mode auto) over the insecure maintenance connection, then wait until it answers on mTLS",
				Reason:   "in maintenance mode: no config applied",
				Evidence: []Evidence{{maintenanceRung, "Talos API answers only insecurely (maintenance mode); mTLS is refused"}},
				Talosctl: []string{
					fmt.Sprintf("talosctl apply-config --insecure --nodes %s --file %s --mode auto", m.Address, configFile(m)),
					fmt.Sprintf("talosctl --nodes %s --endpoints %s version   # repeat until it answers on mTLS", m.Address, m.Address),
				}}
			if verdict == etcdForeign {
				a.Status, a.Reason = StatusBlocked, "refused: etcd data exists that devata bootstrap did not make (see bootstrap-etcd)"
			}
			add(a)
		case o.Err != nil:
			add(Action{Step: StepConfigure, Machine: m.Name, Status: StatusBlocked, Summary: "observe " + m.Name,
				Reason:   "could not observe: " + o.Err.Error() + "; nothing is decided for it",
				Evidence: []Evidence{{maintenanceRung, "no answer on mTLS or insecurely"}},
				Talosctl: []string{fmt.Sprintf("talosctl --nodes %s --endpoints %s version", m.Address, m.Address)}})
		case o.ConfigErr != nil:
			add(Action{Step: StepConfigure, Machine: m.Name, Status: StatusBlocked, Summary: "read " + m.Name + "'s applied config",
				Reason:   o.ConfigErr.Error(),
				Talosctl: []string{fmt.Sprintf("talosctl --nodes %s get machineconfig", m.Address)}})
		default:
			evidence := []Evidence{{drift.RungReconciliation, fmt.Sprintf("MachineConfig v1alpha1 sha256:%s, Talos %s, stage %s", shortHash(o.ActiveHash), o.Version, o.Stage)}}
			diff, differs := in.st.diff[m.Name]
			if !differs {
				add(Action{Step: StepConfigure, Machine: m.Name, Status: StatusDone, Summary: "configured", Reason: "answers on mTLS and runs the desired config", Evidence: evidence})
				continue
			}
			by := byBootstrap
			if clusterExists {
				by = byApply
			}
			a := Action{Step: StepApply, Machine: m.Name, Status: StatusPending, By: by, Evidence: evidence,
				Reason: "applied config differs: " + diff.Summary()}
			if err := in.st.dryErr[m.Name]; err != nil {
				a.Status, a.Summary, a.Reason = StatusBlocked, "apply the desired config", "dry run refused: "+err.Error()
				add(a)
				continue
			}
			dry := in.st.dry[m.Name]
			a.Reboots = dry.Reboots()
			a.Summary = fmt.Sprintf("apply the desired config (Talos resolves auto to %s)", dry.Mode)
			if a.Reboots {
				a.Summary += "; REBOOTS the running machine"
			}
			if by == byApply {
				a.Summary += "; left to devata apply, which rolls out under etcd gates"
			}
			a.Talosctl = []string{
				fmt.Sprintf("talosctl apply-config --nodes %s --file %s --mode auto --dry-run", m.Address, configFile(m)),
				fmt.Sprintf("talosctl apply-config --nodes %s --file %s --mode auto", m.Address, configFile(m)),
			}
			add(a)
		}
	}

	// etcd: check every control plane, bootstrap the first by name only if none has data.
	first := bootstrapNode(inv)
	var etcdEvidence []Evidence
	var cpAddrs []string
	for _, m := range inv.ControlPlanes() {
		etcdEvidence = append(etcdEvidence, Evidence{etcdEvidenceRung, m.Name + ": " + in.st.etcd[m.Name].Seen})
		cpAddrs = append(cpAddrs, m.Address)
	}
	check := fmt.Sprintf("talosctl --nodes %s etcd members   # every control plane: each must say etcd is not running", strings.Join(cpAddrs, ","))
	boot := Action{Step: StepBootstrap, Machine: first.Name, Evidence: etcdEvidence,
		Summary:  "bootstrap etcd on " + first.Name + " (the first control plane by name), after checking every control plane has no etcd data; AlreadyExists counts as done",
		Talosctl: []string{check, fmt.Sprintf("talosctl bootstrap --nodes %s --endpoints %s", first.Address, first.Address)}}
	switch verdict {
	case etcdNone:
		boot.Status, boot.Reason = StatusPending, why
	case etcdOurs:
		boot.Status, boot.Reason, boot.Talosctl = StatusDone, why+": nothing to bootstrap", []string{check}
	default:
		boot.Status, boot.Reason = StatusBlocked, "refused: "+why
	}
	add(boot)

	wait := Action{Step: StepWaitEtcd, Summary: "wait until etcd is healthy and its members are exactly the control planes (" + strings.Join(cpNames(inv), " ") + ")",
		Talosctl: []string{fmt.Sprintf("talosctl --nodes %s etcd members", first.Address), fmt.Sprintf("talosctl --nodes %s etcd status", strings.Join(cpAddrs, ","))}}
	switch {
	case verdict == etcdOurs && in.etcdHealthy == nil:
		wait.Status, wait.Reason = StatusDone, "etcd healthy with the configured members"
		wait.Evidence = []Evidence{{etcdEvidenceRung, "every control plane reports members [" + strings.Join(sortedCPNames(inv), " ") + "] and one leader"}}
	case verdict == etcdOurs:
		wait.Status, wait.Reason = StatusPending, "etcd not healthy yet: "+in.etcdHealthy.Error()
	default:
		wait.Status, wait.Reason = StatusPending, "etcd is not running yet"
	}
	add(wait)

	kc := in.kubeconfig
	kpath := rel(inv, kc.Path)
	ka := Action{Step: StepKubeconfig, Machine: first.Name, Summary: "fetch the admin kubeconfig from " + first.Name + " and write it to " + kpath + " (mode 0600)",
		Talosctl: []string{fmt.Sprintf("talosctl kubeconfig --nodes %s --endpoints %s %s", first.Address, first.Address, kpath)}}
	switch {
	case !kc.Exists:
		ka.Status, ka.Reason = StatusPending, kpath+" does not exist"
	case kc.Ours:
		ka.Status, ka.Reason = StatusDone, kpath+" exists for this cluster; kept"
		ka.Evidence = []Evidence{{drift.RungDeclaration, kc.Why}}
	default:
		ka.Status, ka.Reason = StatusBlocked, kpath+" exists and is not this cluster's ("+kc.Why+"): it is never replaced without --force"
	}
	add(ka)

	na := Action{Step: StepWaitNodes, Summary: "wait until every machine's Node is registered and Ready",
		Talosctl: []string{"kubectl --kubeconfig " + kpath + " get nodes -o wide"}}
	switch {
	case in.skipNodes:
		na.Status, na.Reason = StatusDone, "skipped (--skip-nodes)"
	case in.nodes == nil:
		na.Status, na.Reason = StatusPending, "Kubernetes not reachable yet (no kubeconfig)"
	case in.nodes.Err != nil:
		na.Status, na.Reason = StatusPending, "Nodes not observed: "+in.nodes.Err.Error()
	default:
		var missing []string
		noCNI := 0
		for i := range inv.Machines {
			n, ok := in.nodes.ByName[inv.Machines[i].Name]
			switch {
			case ok && !n.Ready && inv.Cluster.Network.CNI == "none" && machines.NetworkNotReady(n.ReadyReason):
				noCNI++
			case !ok || !n.Ready:
				missing = append(missing, inv.Machines[i].Name)
			}
		}
		switch {
		case len(missing) > 0:
			na.Status, na.Reason = StatusPending, "not registered or not Ready: "+strings.Join(missing, ", ")
		case noCNI > 0:
			na.Status, na.Reason = StatusDone, fmt.Sprintf("all %d Nodes registered; %d NotReady until a CNI runs (cluster.network.cni: none): install Cilium next", len(inv.Machines), noCNI)
		default:
			na.Status, na.Reason = StatusDone, fmt.Sprintf("all %d Nodes Ready", len(inv.Machines))
		}
		na.Evidence = []Evidence{{drift.RungResources, fmt.Sprintf("%d Nodes listed", len(in.nodes.ByName))}}
	}
	add(na)

	add(Action{Step: StepDriftReport, Status: StatusCheck, Summary: "report drift for every machine and check",
		Reason: "the end state is verified, not assumed", Talosctl: []string{"devata drift"}})
	return p
}

func cpNames(inv *inventory.Inventory) []string {
	var out []string
	for _, m := range inv.ControlPlanes() {
		out = append(out, m.Name)
	}
	return out
}

func sortedCPNames(inv *inventory.Inventory) []string {
	out := cpNames(inv)
	slices.Sort(out)
	return out
}

func shortHash(h [sha256.Size]byte) string { return hex.EncodeToString(h[:6]) }
