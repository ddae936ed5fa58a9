package bootstrap

import (
	"context"
	"time"

	"devata.dev/devata/drift"
	"devata.dev/devata/gate"
	"devata.dev/devata/inventory"
	"devata.dev/devata/plan"
	"devata.dev/devata/snapshot"
	"devata.dev/devata/talosapi"
)

// Kinds of the plan's steps, in the order the sequence takes them.
const (
	StepSecrets     plan.Kind = "secrets"
	StepRender      plan.Kind = "render"
	StepConfigure   plan.Kind = "configure"
	StepApply       plan.Kind = "apply"
	StepBootstrap   plan.Kind = "bootstrap-etcd"
	StepWaitEtcd    plan.Kind = "wait-etcd"
	StepKubeconfig  plan.Kind = "kubeconfig"
	StepWaitNodes   plan.Kind = "wait-nodes"
	StepDriftReport plan.Kind = "drift-report"
)

// The commands that take actions, and the rungs the sequence's own evidence comes from.
const (
	byBootstrap      = "bootstrap"
	byApply          = "apply"
	maintenanceRung  = drift.RungReconciliation
	etcdEvidenceRung = drift.RungResources
)

// Plan observes everything and returns what Run (and, for configured machines
// whose config differs once the cluster exists, devata apply) would do now.
// It writes nothing: a missing bundle is replaced by a throwaway one in memory.
func (s *Sequence) Plan(ctx context.Context) (*plan.Plan, error) {
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
				if n.Err == nil && s.CNINone() {
					in.ciliumAgent = CiliumAgent(ctx, kube, min(s.opts.Timeout, 5*time.Second))
				}
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
	// ciliumAgent names Cilium's agent DaemonSet when the glance found one
	// (cluster.network.cni none only)
	ciliumAgent string
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
