package machinecheck

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/client"
	etcdres "github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"google.golang.org/grpc/codes"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"devata.dev/devata/drift"
	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// Check names, as `devata drift --checks` takes them.
const (
	CheckConfig       = "config"
	CheckTalosVersion = "talos-version"
	CheckMachineStage = "machine-stage"
	CheckKubelet      = "kubelet"
	CheckEtcd         = "etcd"
)

// Target is everything a machine check needs: the desired state and what
// one pass observed.
type Target struct {
	Machine *inventory.Machine
	// Inventory is the machine's (nil in checks that need only Machine).
	Inventory *inventory.Inventory
	// Desired is the rendered machine config.
	Desired           []byte
	TalosVersion      string
	KubernetesVersion string
	// Boot is the installer an upgrade to TalosVersion boots (Boot.Image:
	// cluster.installImage, or the Image Factory installer of the
	// machine's schematic) and what it puts on the machine (WantBootOf).
	Boot WantBoot
	// ControlPlanes are the names of the inventory's control planes: the etcd members there should be.
	ControlPlanes []string
	Obs           *talosapi.Observation
	// Nodes is the Kubernetes side; nil means Kubernetes was not consulted.
	Nodes *talosapi.Nodes
	// Talosctl is how next steps reach the machine with talosctl, as
	// devata did (Dialer.Talosctl); Node is the -n it names. Empty means
	// "talosctl -n ADDRESS".
	Talosctl, Node string
}

// Extension is a family of checks that read more from each machine on the
// connection the machine checks use (storagecheck, netcheck).
type Extension interface {
	// Checks lists the family's checks in the order they run: their names
	// are what --checks takes.
	Checks() []drift.Info
	// Run observes and evaluates the named ones of them (never empty) for
	// one machine, given the machine checks' target (its Obs holds the
	// active config); c is nil when the machine could not be dialled.
	Run(ctx context.Context, c *client.Client, t *Target, names []string) []drift.Result
}

// talosctl is a talosctl command line for the machine.
func (t *Target) talosctl(args string) string {
	if t.Talosctl == "" {
		return "talosctl -n " + t.Machine.Address + " " + args
	}
	return t.Talosctl + " " + args
}

// node is the machine as talosctl -n names it.
func (t *Target) node() string {
	if t.Node == "" {
		return t.Machine.Address
	}
	return t.Node
}

// Checks returns the machine checks in ladder order.
func Checks() []drift.Check[*Target] {
	return []drift.Check[*Target]{
		{Name: CheckConfig, Rung: drift.RungReconciliation, FailClosed: true, Run: checkConfig},
		{Name: CheckTalosVersion, Rung: drift.RungReconciliation, FailClosed: false, Run: checkTalosVersion},
		{Name: CheckExtensions, Rung: drift.RungReconciliation, FailClosed: false, Run: checkExtensions},
		{Name: CheckMachineStage, Rung: drift.RungResources, FailClosed: true, Run: checkMachineStage},
		{Name: CheckKubelet, Rung: drift.RungResources, FailClosed: true, Run: checkKubelet},
		{Name: CheckEtcd, Rung: drift.RungResources, FailClosed: true, Applies: onControlPlanes, Run: checkEtcd},
	}
}

// onControlPlanes is the Applies of checks that mean something on control
// planes only (etcd runs there alone).
func onControlPlanes(t *Target) bool { return t.Machine.IsControlPlane() }

// unreachable turns a machine-level observation failure into this check's
// result: Unknown when the machine did not answer, Drifted when it answered
// from maintenance mode (observed: not configured at all).
func unreachable(t *Target) (drift.Result, bool) {
	o := t.Obs
	if o.Err == nil {
		return drift.Result{}, false
	}
	name := t.Machine.Name
	if o.Maintenance {
		return drift.Drifted("machine is in maintenance mode: no config applied", "configured", "maintenance mode").
			WithEvidence("Talos API " + o.Endpoint + " answers only insecurely").
			WithNext("devata apply joins it to the running cluster, devata bootstrap builds a new one (or: talosctl apply-config --insecure -n " + t.node() + ")"), true
	}
	if talosapi.IsForeignCA(o.Err) {
		// it answered: its certificate is signed by another CA than the talosconfig's
		return drift.Unknown(fmt.Errorf("%s answered with a certificate the talosconfig's CA did not sign: the talosconfig is not this cluster's (or %s was configured from another secrets bundle): %w", name, name, o.Err),
			"use this cluster's talosconfig (--talosconfig, or the settings file's talosconfig and context); compare its CA with the machines': talosctl config info"), true
	}
	return drift.Unknown(o.Err, "check that "+name+" is up and its Talos API reachable: "+t.talosctl("version")), true
}

func unknownRead(t *Target, err error) drift.Result {
	next := t.talosctl("get machinestatus")
	if client.StatusCode(err) == codes.PermissionDenied {
		next = "the talosconfig's certificate lacks the role this read needs (MachineConfig needs os:admin): use an os:admin talosconfig"
	}
	return drift.Unknown(err, next)
}

func checkConfig(_ context.Context, t *Target) []drift.Result {
	if r, ok := unreachable(t); ok {
		return []drift.Result{r}
	}
	o, name := t.Obs, t.Machine.Name
	if o.ConfigErr != nil {
		return []drift.Result{unknownRead(t, o.ConfigErr)}
	}
	if len(t.Desired) == 0 {
		return []drift.Result{drift.Unknown(errors.New("no desired config was rendered for this machine"), "devata validate, then devata gen config: does "+name+" render?")}
	}
	d, err := talosapi.DiffConfigs(o.Active, t.Desired)
	if err != nil {
		return []drift.Result{drift.Unknown(fmt.Errorf("compare configs: %w", err), t.talosctl("get machineconfig -o yaml"))}
	}
	evidence := []string{"MachineConfig v1alpha1 sha256:" + short(o.ActiveHash)}
	desiredHash := sumOf(t.Desired)
	if d.Equal {
		if o.HasPersistent && o.PersistentHash != o.ActiveHash {
			return []drift.Result{drift.Drifted("another config is staged for the next boot", "sha256:"+short(desiredHash), "staged sha256:"+short(o.PersistentHash)).
				WithEvidence(append(evidence, "MachineConfig persistent sha256:"+short(o.PersistentHash))...).
				WithNext("devata apply --machines " + name + " (re-applies the desired config, replacing the staged one)")}
		}
		return []drift.Result{drift.InSync(evidence...)}
	}
	if mismatch, err := talosapi.Foreign(o.Active, t.Desired, talosapi.OtherMachine(t.Inventory, t.Machine)); err == nil && mismatch.Any() {
		// not a diff to apply: the machine answering is not this one
		what := "another machine answers at " + o.Endpoint + ": " + strings.Join(mismatch.Machine, "; ")
		next := "check " + name + "'s address in the inventory (the machine there is not " + name + "); devata writes nothing to it"
		if len(mismatch.Bundle) > 0 {
			what = "the machine at " + o.Endpoint + " runs a config of another cluster or secrets bundle: " + strings.Join(mismatch.Bundle, "; ")
			next = "recover the cluster's secrets bundle (devata gen secrets --from-controlplane-config, a backup, or its encrypted copy), or check that the inventory is this cluster's; devata writes nothing to it"
		}
		return []drift.Result{drift.Drifted(what, name+" of this cluster", "not "+name).WithEvidence(evidence...).WithNext(next)}
	}
	reason := "applied config differs from the rendered one: " + d.Summary()
	next := "devata apply --machines " + name
	if o.HasPersistent && o.PersistentHash == desiredHash {
		reason = "desired config is staged but not applied (it takes effect on the next reboot); applied differs: " + d.Summary()
		next = "reboot " + name + " to apply it (" + t.talosctl("reboot") + "), or devata apply --machines " + name
	}
	return []drift.Result{drift.Drifted(reason, "sha256:"+short(desiredHash), "sha256:"+short(o.ActiveHash)).
		WithDiff(d.Text).WithChanges(d.Changes...).WithEvidence(evidence...).WithNext(next)}
}

func checkTalosVersion(_ context.Context, t *Target) []drift.Result {
	if r, ok := unreachable(t); ok {
		return []drift.Result{r}
	}
	got := t.Obs.Version
	if got == t.TalosVersion {
		return []drift.Result{drift.InSync("Version tag " + got)}
	}
	return []drift.Result{drift.Drifted("Talos version differs from cluster.talosVersion", t.TalosVersion, got).
		WithEvidence("Version tag " + got).
		WithNext(upgradeHint(t))}
}

func checkMachineStage(_ context.Context, t *Target) []drift.Result {
	if r, ok := unreachable(t); ok {
		return []drift.Result{r}
	}
	o := t.Obs
	if o.StatusErr != nil {
		return []drift.Result{unknownRead(t, o.StatusErr)}
	}
	evidence := fmt.Sprintf("MachineStatus stage %s, ready %t", o.Stage, o.Ready)
	if o.Stage == "running" && o.Ready {
		return []drift.Result{drift.InSync(evidence)}
	}
	if o.Stage == "running" && o.NotReadyOnlyForNode() {
		// Talos' readiness includes the Node's (machine_status.go
		// nodeReadyCheck); the kubelet check reports the Node itself.
		return []drift.Result{drift.InSync(evidence, "not ready only for its Node ("+strings.Join(o.Unmet, "; ")+"): see the kubelet check")}
	}
	reason := "machine is " + o.Stage
	if len(o.Unmet) > 0 {
		reason += "; unmet: " + strings.Join(o.Unmet, "; ")
	}
	next := t.talosctl("get machinestatus -o yaml") + "; " + t.talosctl("dmesg")
	if o.Stage == "booting" && o.WaitingForEtcd() {
		// machined's boot sequence waits for etcd (StartAllServices)
		next = "its boot waits for etcd: devata bootstrap if no control plane has etcd yet, else " + next
	}
	return []drift.Result{drift.Drifted(reason, "running, ready", fmt.Sprintf("%s, ready=%t", o.Stage, o.Ready)).
		WithEvidence(evidence).WithNext(next)}
}

// checkKubelet combines Talos' kubelet service with the Kubernetes Node: any
// observed problem is Drifted; otherwise any part that could not be read
// makes it Unknown.
func checkKubelet(_ context.Context, t *Target) []drift.Result {
	if r, ok := unreachable(t); ok {
		return []drift.Result{r}
	}
	o, name := t.Obs, t.Machine.Name
	var problems, evidence []string
	var unknown error
	taintFix := ""
	switch {
	case o.KubeletErr != nil:
		unknown = o.KubeletErr
	case !o.Kubelet.Running:
		problems = append(problems, "Talos service kubelet is not running")
	case !o.Kubelet.Healthy:
		problems = append(problems, "Talos service kubelet is running but not healthy")
	default:
		evidence = append(evidence, "Service kubelet running, healthy")
	}
	switch {
	case t.Nodes == nil || t.Nodes.Err != nil:
		if unknown == nil {
			if t.Nodes == nil {
				unknown = fmt.Errorf("the Kubernetes Node was not read")
			} else {
				unknown = t.Nodes.Err
			}
		}
	default:
		node, ok := t.Nodes.ByName[name]
		switch {
		case !ok:
			problems = append(problems, "no Kubernetes Node "+name+" registered")
		default:
			evidence = append(evidence, fmt.Sprintf("Node %s Ready=%t kubelet %s", name, node.Ready, node.KubeletVersion))
			if !node.Ready {
				problems = append(problems, "Node "+name+" is not Ready ("+node.ReadyReason+")")
			}
			if node.KubeletVersion != t.KubernetesVersion {
				problems = append(problems, fmt.Sprintf("kubelet %s, cluster.kubernetesVersion %s", node.KubeletVersion, t.KubernetesVersion))
			}
			var missing []string
			for k, v := range t.Machine.NodeLabels() {
				if got, ok := node.Labels[k]; !ok || got != v {
					missing = append(missing, k+"="+v)
				}
			}
			if len(missing) > 0 {
				slices.Sort(missing)
				problems = append(problems, "Node lacks labels "+strings.Join(missing, ", "))
			}
			if p, fix := missingTaints(t.Machine.NodeTaints(), node.Taints); p != "" {
				problems = append(problems, p)
				taintFix = "kubectl taint node " + name + " " + strings.Join(fix, " ")
			}
		}
	}
	switch {
	case len(problems) > 0:
		next := t.talosctl("service kubelet") + "; " + t.talosctl("logs kubelet") + "; kubectl describe node " + name
		if taintFix != "" && len(problems) == 1 {
			// a worker's Talos may not change its Node's taints (NodeRestriction): only an administrator can
			next = taintFix
		}
		if node, ok := t.nodeFacts(name); ok && talosapi.NetworkNotReady(node.ReadyReason) {
			next = "no CNI runs on the node yet: with cluster.network.cni none, install Cilium (helm install cilium …), then see the cilium checks; kubectl describe node " + name
		}
		return []drift.Result{drift.Drifted(strings.Join(problems, "; "), "kubelet healthy, Node Ready, "+t.KubernetesVersion, problems[0]).
			WithEvidence(evidence...).
			WithNext(next)}
	case unknown != nil:
		next := t.talosctl("service kubelet")
		switch {
		case t.Nodes == nil || errors.Is(t.Nodes.Err, talosapi.ErrNoKubernetes):
			next = "pass --kubeconfig (or set KUBECONFIG) so the Node can be checked"
		case apierrors.IsForbidden(t.Nodes.Err) || apierrors.IsUnauthorized(t.Nodes.Err):
			// in a pod the identity is its service account, and the kubeconfig hint would mislead
			next = "the Kubernetes identity devata uses (the kubeconfig's user, or in a pod its service account) needs list on nodes: deploy/rbac.yaml's ClusterRole devata-node-reader grants it; kubectl auth can-i list nodes"
		case t.Nodes.Err != nil:
			next = "check that the Kubernetes API answers with the same credentials: kubectl get nodes"
		}
		return []drift.Result{drift.Unknown(unknown, next).WithEvidence(evidence...)}
	}
	return []drift.Result{drift.InSync(evidence...)}
}

// missingTaints names the taints the inventory gives the machine (its own
// and its groups', as machine.nodeTaints: key to value:Effect or Effect)
// that its Node does not carry with that value and effect, or "". Taints
// others put on the Node (the control plane's own, a cordon's) are theirs.
// The second result is each missing taint as kubectl taint takes it.
func missingTaints(want, got map[string]string) (string, []string) {
	var missing, fix []string
	for k, w := range want {
		value, effect := inventory.ParseTaint(w)
		canonical, desc := effect, k+":"+effect // as NodeFactsOf writes it; as kubectl taint takes it
		if value != "" {
			canonical, desc = value+":"+effect, k+"="+value+":"+effect
		}
		if !slices.Contains(strings.Split(got[k], ","), canonical) {
			fix = append(fix, desc)
			if _, ok := got[k]; ok {
				fix[len(fix)-1] += " --overwrite"
				desc += " (the Node has " + got[k] + ")"
			}
			missing = append(missing, desc)
		}
	}
	if len(missing) == 0 {
		return "", nil
	}
	slices.Sort(missing)
	slices.Sort(fix)
	return "Node lacks taints " + strings.Join(missing, ", "), fix
}

func checkEtcd(_ context.Context, t *Target) []drift.Result {
	if r, ok := unreachable(t); ok {
		return []drift.Result{r}
	}
	o, name := t.Obs, t.Machine.Name
	if o.EtcdService != nil && o.Etcd == nil && errors.Is(o.EtcdErr, talosapi.ErrEtcdNotRunning) {
		// observed, not unknown: the service says etcd does not run here
		next := t.talosctl("service etcd") + "; " + t.talosctl("logs etcd")
		if o.WaitingForEtcd() {
			next = "bootstrap the cluster (devata bootstrap) if no control plane has etcd yet, else check why it does not join: " + next
		}
		return []drift.Result{drift.Drifted("etcd does not run on "+name+": service etcd "+o.EtcdService.State+" ("+o.EtcdService.Event+")", "etcd running, a member", "service etcd "+o.EtcdService.State).
			WithEvidence("ServiceList etcd: " + o.EtcdService.State + ", " + o.EtcdService.Event).WithNext(next)}
	}
	if errors.Is(o.EtcdErr, talosapi.ErrEtcdNoLeader) {
		// observed, not unknown: etcd runs here and says it has no leader
		evidence := []string{"EtcdMemberList: " + o.EtcdErr.Error()}
		if l := o.EtcdLocal; l != nil {
			evidence = append(evidence, fmt.Sprintf("EtcdStatus: member %s, leader %x, errors [%s]", etcdres.FormatMemberID(l.MemberID), l.Leader, strings.Join(l.Errors, "; ")))
		}
		return []drift.Result{drift.Drifted("etcd runs on "+name+" but has no leader: etcd has no quorum (more than half of its members are down), or is electing a leader", "etcd with a leader", "no leader").
			WithEvidence(evidence...).
			WithNext("bring back the control planes whose etcd is down (the etcd check on each says which); a member alone cannot elect a leader. Until then the Kubernetes API does not answer; devata backup etcd still takes a snapshot from this member: " + t.talosctl("etcd status"))}
	}
	if errors.Is(o.EtcdErr, talosapi.ErrEtcdLearner) {
		// observed, not unknown: etcd runs here as a learner
		evidence := []string{"EtcdMemberList: " + o.EtcdErr.Error()}
		if l := o.EtcdLocal; l != nil {
			evidence = append(evidence, fmt.Sprintf("EtcdStatus: member %s, learner, leader %x", etcdres.FormatMemberID(l.MemberID), l.Leader))
		}
		return []drift.Result{drift.Drifted("etcd on "+name+" runs as a learner, not yet promoted: it joined and is catching up", "a voting etcd member", "learner").
			WithEvidence(evidence...).
			WithNext("wait: Talos promotes it once it has caught up with the leader (" + t.talosctl("service etcd") + "); if it stays a learner, read " + t.talosctl("logs etcd"))}
	}
	if o.EtcdErr != nil && o.Etcd == nil {
		return []drift.Result{drift.Unknown(o.EtcdErr, t.talosctl("service etcd")+"; "+t.talosctl("etcd members"))}
	}
	e := o.Etcd
	want := slices.Clone(t.ControlPlanes)
	slices.Sort(want)
	got := slices.Clone(e.Members)
	slices.Sort(got)
	evidence := []string{fmt.Sprintf("etcd members [%s], leader %x", strings.Join(got, " "), e.Leader)}
	var problems []string
	if !slices.Contains(e.Members, name) {
		problems = append(problems, name+" is not an etcd member")
	}
	if o.EtcdErr != nil {
		problems = append(problems, o.EtcdErr.Error())
	}
	if len(e.Errors) > 0 {
		problems = append(problems, "etcd reports: "+strings.Join(e.Errors, "; "))
	}
	if o.EtcdErr == nil && e.Leader == 0 {
		problems = append(problems, "no etcd leader")
	}
	if quorum := len(want)/2 + 1; len(got) < quorum {
		problems = append(problems, fmt.Sprintf("%d of %d members: below quorum (%d)", len(got), len(want), quorum))
	}
	next := t.talosctl("etcd members") + "; " + t.talosctl("etcd status")
	if !slices.Equal(got, want) {
		problems = append(problems, fmt.Sprintf("members [%s], control planes [%s]", strings.Join(got, " "), strings.Join(want, " ")))
		for _, orphan := range slices.DeleteFunc(slices.Clone(got), func(m string) bool { return slices.Contains(want, m) }) {
			// an orphan: the loop never removes a member on its own
			problems = append(problems, "etcd member "+orphan+" is not in the inventory")
			next = fmt.Sprintf("if %s is gone for good: %s while it runs, else %s; or add %s back to the inventory",
				orphan, "talosctl -n "+orphan+" etcd leave", t.talosctl("etcd remove-member "+etcdres.FormatMemberID(e.IDs[orphan])), orphan)
		}
	}
	if len(e.Learners) > 0 {
		var ls []string
		for _, l := range e.Learners {
			if l == "" {
				l = "(unnamed: its etcd has not started)"
			}
			ls = append(ls, l)
		}
		problems = append(problems, "learners not yet promoted: "+strings.Join(ls, " "))
	}
	if len(problems) == 0 {
		return []drift.Result{drift.InSync(evidence...)}
	}
	return []drift.Result{drift.Drifted(strings.Join(problems, "; "), "members ["+strings.Join(want, " ")+"]", "members ["+strings.Join(got, " ")+"]").
		WithEvidence(evidence...).WithNext(next)}
}

func short(h [32]byte) string { return hex.EncodeToString(h[:6]) }

func sumOf(b []byte) [32]byte { return sha256.Sum256(b) }

// nodeFacts is the Node's facts, when the Nodes were observed.
func (t *Target) nodeFacts(name string) (talosapi.NodeFacts, bool) {
	if t.Nodes == nil || t.Nodes.Err != nil {
		return talosapi.NodeFacts{}, false
	}
	n, ok := t.Nodes.ByName[name]
	return n, ok
}

// upgradeHint is the next step of a Talos version that differs: talosctl
// upgrade with the inventory's installer image (cluster.installImage, which
// carries an Image Factory schematic when one is used), or the image's own
// tag when it is not the desired version.
func upgradeHint(t *Target) string {
	image := t.Boot.Image
	if image == "" {
		image = "ghcr.io/siderolabs/installer:" + t.TalosVersion
	}
	hint := "upgrade: " + t.talosctl("upgrade --image "+image) + " (or fix cluster.talosVersion)"
	if ref, tag, ok := strings.Cut(image[strings.LastIndex(image, "/")+1:], ":"); ok && !strings.Contains(tag, "@") && tag != t.TalosVersion {
		hint += "; cluster.installImage " + image + " is tagged " + tag + ", not " + t.TalosVersion + ": set it to the " + ref + " image of " + t.TalosVersion
	}
	return hint
}
