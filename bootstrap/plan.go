package bootstrap

import (
	"context"
	"strings"
	"time"

	"devata.dev/devata/drift"
	"devata.dev/devata/gate"
	"devata.dev/devata/inventory"
	"devata.dev/devata/provenance"
	"devata.dev/devata/snapshot"
	"devata.dev/devata/talosapi"
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
	// Drain says what happens to the machine's Node before a rebooting
	// change devata apply rolls out (as apply --dry-run says it).
	Drain string `json:"drain,omitempty"`
	// Changes is an apply's config diff by YAML path, redacted
	// (talosapi.ConfigDiff.Changes): what the apply would change.
	Changes []string `json:"changes,omitempty"`
}

// Plan is the ordered list of what bootstrap and apply would do now.
type Plan struct {
	Cluster   string `json:"cluster"`
	Inventory string `json:"inventory"`
	// Provenance is the inventory's sha256 and, in Git, its commit (set by
	// the caller; zero says nothing).
	Provenance provenance.Info `json:"provenance,omitzero"`
	// Contract is the Talos config contract the configs are rendered for,
	// and why.
	Contract Contract `json:"contract"`
	// Notes are facts about the plan itself (a throwaway bundle, a derived talosconfig).
	Notes   []string `json:"notes,omitempty"`
	Actions []Action `json:"actions"`
	// Orphans are etcd members and Nodes no machine of the inventory has
	// (set by the caller once the cluster answers). Neither bootstrap nor
	// apply touches them; devata remove takes each out.
	Orphans []Orphan `json:"orphans,omitempty"`
	// Kubernetes is the Kubernetes version change devata apply would make
	// (set by the caller when configured machines' configs move a
	// component's version).
	Kubernetes *KubernetesChange `json:"kubernetes,omitempty"`
	// RecoverFrom is the snapshot --recover-from names by URL, as its
	// sidecar describes it (set by the caller).
	RecoverFrom *RecoverSource `json:"recoverFrom,omitempty"`
	// Patches is each machine's patch order (set by the caller when the
	// inventory has groups, which put patches between the role's and the
	// machine's): machines with the same order share an entry.
	Patches []MachinePatches `json:"patches,omitempty"`
}

// MachinePatches is the patch order of some machines.
type MachinePatches struct {
	Machines []string               `json:"machines"`
	Layers   []inventory.PatchLayer `json:"layers"`
}

// PatchOrders folds the machines of inv by their patch order, in inventory order.
func PatchOrders(inv *inventory.Inventory) []MachinePatches {
	var out []MachinePatches
	index := map[string]int{}
	for i := range inv.Machines {
		m := &inv.Machines[i]
		layers := inv.PatchLayers(m)
		key := MachinePatches{Layers: layers}.String()
		if j, ok := index[key]; ok {
			out[j].Machines = append(out[j].Machines, m.Name)
			continue
		}
		index[key] = len(out)
		out = append(out, MachinePatches{Machines: []string{m.Name}, Layers: layers})
	}
	return out
}

// String is the order as plan's text prints it.
func (mp MachinePatches) String() string {
	if len(mp.Layers) == 0 {
		return "no patches"
	}
	parts := make([]string, len(mp.Layers))
	for i, l := range mp.Layers {
		parts[i] = l.From + " " + strings.Join(l.Files, ", ")
	}
	return strings.Join(parts, " → ")
}

// KubernetesChange is a Kubernetes version change, one component at a time
// in talosctl upgrade-k8s' order.
type KubernetesChange struct {
	// From is the lowest version a component runs; To is cluster.kubernetesVersion.
	From string `json:"from"`
	To   string `json:"to"`
	// Refused says why none of it goes ahead.
	Refused string           `json:"refused,omitempty"`
	Steps   []KubernetesStep `json:"steps,omitempty"`
	Next    string           `json:"next"`
	// Talosctl does the same by hand.
	Talosctl []string `json:"talosctl,omitempty"`
}

// KubernetesStep is one component's move: on these machines in order, or
// held, and why.
type KubernetesStep struct {
	Component string   `json:"component"`
	Machines  []string `json:"machines,omitempty"`
	Held      string   `json:"held,omitempty"`
}

// String is the step for people: "kube-apiserver on cp-1, cp-2", or
// "kubelet: held: why".
func (s KubernetesStep) String() string {
	if s.Held != "" {
		return s.Component + ": held: " + s.Held
	}
	return s.Component + " on " + strings.Join(s.Machines, ", ")
}

// Orphan is one etcd member or Node the inventory no longer has.
type Orphan struct {
	Name string `json:"name"`
	// What it is: "etcd member cp-3 (ID …) and Node", "Node worker-9".
	What string `json:"what"`
	// Remove is the command that takes it out of the cluster.
	Remove string `json:"remove"`
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

// Plan observes everything and returns what Run (and, for configured machines
// whose config differs once the cluster exists, devata apply) would do now.
// It writes nothing: a missing bundle is replaced by a throwaway one in memory.
func (s *Sequence) Plan(ctx context.Context) (*Plan, error) {
	if _, err := s.validate(ctx); err != nil {
		return nil, err
	}
	if _, err := s.secrets(false); err != nil {
		return nil, err
	}
	if _, err := s.render(ctx); err != nil {
		return nil, err
	}
	s.st = observeFleet(ctx, s.inv, s.dialer, s.desiredFor, s.opts.Concurrency, s.opts.Timeout, true)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	in := planInput{inv: s.inv, secretsPath: s.secretsPath, secretsMissing: s.secretsMissing, st: s.st, skipNodes: s.opts.SkipNodes, recover: s.opts.Recover}
	if in.recover != nil {
		in.recoverFrom, in.recoverEncrypted = s.recoverFrom(), s.opts.RecoverEncrypted
		in.recoverRunning = s.snapshotMembersRunning()
	}
	if v, _ := etcdVerdict(s.inv, s.st); v == etcdOurs {
		in.etcdHealthy = gate.EtcdHealthy(ctx, s.inv, s.dialer, s.opts.Timeout)
	}
	in.kubeconfig = s.kubeconfigState()
	if !s.opts.SkipNodes {
		if kc := s.NodesKubeconfig(); fileExists(kc) {
			if kube, err := talosapi.KubeClient(kc); err == nil {
				// A plan only glances at Kubernetes: an API server that is not up yet must not hold it.
				nctx, cancel := context.WithTimeout(ctx, min(s.opts.Timeout, 5*time.Second))
				n := talosapi.ObserveNodes(nctx, kube)
				cancel()
				in.nodes = &n
			}
		}
	}
	p := buildPlan(in)
	p.Contract = contractOf(s.inv, s.st)
	if s.secretsMissing {
		p.Notes = append(p.Notes, "no secrets bundle yet: configs were rendered with a throwaway bundle to check them; bootstrap creates the real one")
	}
	if s.opts.Talosconfig == nil {
		p.Notes = append(p.Notes, "no talosconfig given: an os:admin one derived from the secrets bundle was used")
	}
	return p, nil
}

// planInput is everything buildPlan reads.
type planInput struct {
	inv            *inventory.Inventory
	secretsPath    string
	secretsMissing bool
	st             *fleetState
	etcdHealthy    error // nil when healthy; only meaningful when every control plane is configured
	kubeconfig     kubeconfigState
	nodes          *talosapi.Nodes
	skipNodes      bool
	// recover is the snapshot etcd is rebuilt from (nil: bootstrap an
	// empty one); recoverRunning the control planes still running the
	// cluster it was taken of.
	recover        *snapshot.File
	recoverRunning []string
	// recoverFrom names it as the user did; recoverEncrypted says it is
	// age-encrypted, so talosctl needs it decrypted first
	recoverFrom      string
	recoverEncrypted bool
}
