package bootstrap

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"devata.dev/devata/drift"
	"devata.dev/devata/inventory"
	"devata.dev/devata/plan"
	"devata.dev/devata/talosapi"
)

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
func buildPlan(in planInput) *plan.Plan {
	inv := in.inv
	p := &plan.Plan{Cluster: inv.Cluster.Name, Inventory: filepath.Base(inv.Path)}
	add := func(a plan.Step) {
		if a.By == "" {
			a.By = byBootstrap
		}
		p.Steps = append(p.Steps, a)
	}

	add(planSecrets(in))
	add(planRender(inv))

	verdict, why := etcdVerdict(inv, in.st)

	// Machines: maintenance → configure; differing configs → apply (by bootstrap
	// before the cluster exists, by apply after, under its etcd gates).
	ordered := slices.Clone(inv.ControlPlanes())
	for i := range inv.Machines {
		if !inv.Machines[i].IsControlPlane() {
			ordered = append(ordered, &inv.Machines[i])
		}
	}
	for _, m := range ordered {
		add(planMachine(in, m, verdict))
	}

	// etcd: check every control plane, bootstrap the first by name only if none has data.
	first := bootstrapNode(inv)
	boot, wait := planEtcd(in, first, verdict, why)
	add(boot)
	add(wait)

	add(planKubeconfig(in, first))
	add(planWaitNodes(in))

	add(plan.Step{Kind: StepDriftReport, Status: plan.StatusCheck, Summary: "report drift for every machine and check",
		Reason: "the end state is verified, not assumed", Talosctl: []string{"devata drift"}})
	return p
}

// planSecrets is the secrets step: create the bundle when it is missing, else load it.
func planSecrets(in planInput) plan.Step {
	secrets := rel(in.inv, in.secretsPath)
	if in.secretsMissing {
		return plan.Step{Kind: StepSecrets, Status: plan.StatusPending, Summary: "create the secrets bundle " + secrets + " (mode 0600)",
			Reason:   "no bundle at the inventory's cluster.secrets",
			Evidence: []plan.Evidence{{Rung: drift.RungDeclaration, Observed: secrets + " does not exist"}},
			Talosctl: []string{"talosctl gen secrets -o " + secrets}}
	}
	return plan.Step{Kind: StepSecrets, Status: plan.StatusDone, Summary: "load the secrets bundle " + secrets,
		Reason:   "the bundle exists; it is never replaced",
		Evidence: []plan.Evidence{{Rung: drift.RungDeclaration, Observed: secrets + " loads and validates"}}}
}

// planRender is the render step, done on every run.
func planRender(inv *inventory.Inventory) plan.Step {
	return plan.Step{Kind: StepRender, Status: plan.StatusDone, Summary: "render and validate every machine's config (metal mode)",
		Reason:   "configs are rendered from the inventory and the bundle on every run",
		Evidence: []plan.Evidence{{Rung: drift.RungDeclaration, Observed: fmt.Sprintf("%d configs render and validate", len(inv.Machines))}},
		Talosctl: []string{"devata gen config --dir rendered/   # one file per machine and a talosconfig; export TALOSCONFIG=rendered/talosconfig"}}
}

// planMachine is one machine's configure or apply action under the etcd verdict v.
func planMachine(in planInput, m *inventory.Machine, v verdict) plan.Step {
	clusterExists := v == etcdOurs
	o := in.st.obs[m.Name]
	switch {
	case o == nil:
		return plan.Step{Kind: StepConfigure, Machine: m.Name, Status: plan.StatusBlocked, Summary: "observe " + m.Name, Reason: "not observed"}
	case o.Maintenance:
		a := plan.Step{Kind: StepConfigure, Machine: m.Name, Status: plan.StatusPending,
			Summary:  "apply its config (mode auto) over the insecure maintenance connection, then wait until it answers on mTLS",
			Reason:   "in maintenance mode: no config applied",
			Evidence: []plan.Evidence{{Rung: maintenanceRung, Observed: "Talos API answers only insecurely (maintenance mode); mTLS is refused"}},
			Talosctl: []string{
				fmt.Sprintf("talosctl apply-config --insecure --nodes %s --file %s --mode auto", m.Address, configFile(m)),
				fmt.Sprintf("talosctl --nodes %s --endpoints %s version   # repeat until it answers on mTLS", m.Address, m.Address),
			}}
		switch v {
		case etcdForeign:
			a.Status, a.Reason = plan.StatusBlocked, "refused: etcd data exists that devata bootstrap did not make (see bootstrap-etcd)"
		case etcdOurs:
			// the cluster runs: apply joins it, one control plane at a time under the etcd gates
			a.By = byApply
			a.Summary += "; it joins the running cluster (devata bootstrap does the same)"
		}
		return a
	case o.Err != nil:
		return plan.Step{Kind: StepConfigure, Machine: m.Name, Status: plan.StatusBlocked, Summary: "observe " + m.Name,
			Reason:   "could not observe: " + o.Err.Error() + "; nothing is decided for it",
			Evidence: []plan.Evidence{{Rung: maintenanceRung, Observed: "no answer on mTLS or insecurely"}},
			Talosctl: []string{fmt.Sprintf("talosctl --nodes %s --endpoints %s version", m.Address, m.Address)}}
	case o.ConfigErr != nil:
		return plan.Step{Kind: StepConfigure, Machine: m.Name, Status: plan.StatusBlocked, Summary: "read " + m.Name + "'s applied config",
			Reason:   o.ConfigErr.Error(),
			Talosctl: []string{fmt.Sprintf("talosctl --nodes %s get machineconfig", m.Address)}}
	}
	evidence := []plan.Evidence{{Rung: drift.RungReconciliation, Observed: fmt.Sprintf("MachineConfig v1alpha1 sha256:%s, Talos %s, stage %s", shortHash(o.ActiveHash), o.Version, o.Stage)}}
	diff, differs := in.st.diff[m.Name]
	if !differs {
		return plan.Step{Kind: StepConfigure, Machine: m.Name, Status: plan.StatusDone, Summary: "configured", Reason: "answers on mTLS and runs the desired config", Evidence: evidence}
	}
	by := byBootstrap
	if clusterExists {
		by = byApply
	}
	a := plan.Step{Kind: StepApply, Machine: m.Name, Status: plan.StatusPending, By: by, Evidence: evidence,
		Reason: "applied config differs: " + diff.Summary(), Changes: diff.Changes}
	if err := in.st.dryErr[m.Name]; err != nil {
		a.Status, a.Summary, a.Reason = plan.StatusBlocked, "apply the desired config", "dry run refused: "+err.Error()
		return a
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
	if a.Reboots && by == byApply {
		// Talos drains on no rebooting apply (the sequencer has no
		// CordonAndDrainNode for it): devata apply does, as its dry run says
		a.Drain = planDrain
		a.Talosctl = slices.Concat(
			[]string{fmt.Sprintf("kubectl drain %s --ignore-daemonsets --delete-emptydir-data", m.Name)},
			a.Talosctl,
			[]string{fmt.Sprintf("kubectl uncordon %s   # once it is back and Ready", m.Name)})
	}
	return a
}

// planDrain is what devata apply does to the Node of a machine a change
// reboots, in the words of its dry run (reconcile Plan writeDrain).
const planDrain = "drain first: devata apply cordons its Node and evicts its pods through the Eviction API (PodDisruptionBudgets hold; DaemonSet and mirror pods stay; as kubectl drain NODE --ignore-daemonsets --delete-emptydir-data), and uncordons it once it is back and ready; without a kubeconfig it cannot, and says so; --drain=false skips it"

// planEtcd is the bootstrap-etcd and wait-etcd actions on first, the
// bootstrap node, under the etcd verdict v and why it was reached.
func planEtcd(in planInput, first *inventory.Machine, v verdict, why string) (boot, wait plan.Step) {
	inv := in.inv
	var etcdEvidence []plan.Evidence
	var cpAddrs []string
	for _, m := range inv.ControlPlanes() {
		etcdEvidence = append(etcdEvidence, plan.Evidence{Rung: etcdEvidenceRung, Observed: m.Name + ": " + in.st.etcd[m.Name].Seen})
		cpAddrs = append(cpAddrs, m.Address)
	}
	check := fmt.Sprintf("talosctl --nodes %s etcd members   # every control plane: each must say etcd is not running", strings.Join(cpAddrs, ","))
	boot = plan.Step{Kind: StepBootstrap, Machine: first.Name, Evidence: etcdEvidence,
		Summary:  "bootstrap etcd on " + first.Name + " (the first control plane by name), after checking every control plane has no etcd data; AlreadyExists counts as done",
		Talosctl: []string{check, fmt.Sprintf("talosctl bootstrap --nodes %s --endpoints %s", first.Address, first.Address)}}
	decided := false
	if r := in.recover; r != nil {
		if in.recoverFrom == "" {
			in.recoverFrom = r.Path
		}
		boot.Summary = fmt.Sprintf("rebuild etcd on %s (the first control plane by name) from the snapshot %s (etcd revision %d, %d members when taken): upload it with EtcdRecover, then bootstrap with recover_etcd; every other control plane joins the restored cluster", first.Name, in.recoverFrom, r.Revision, len(r.Members))
		cmds, read := []string{check}, in.recoverFrom
		if isURL(in.recoverFrom) { // talosctl reads a local file: fetch and check it first
			fetch, local := fetchCommands(in.recoverFrom, r.SHA256)
			cmds, read = append(cmds, fetch...), "./"+local
		}
		if in.recoverEncrypted {
			// talosctl sends the file as it is: decrypt it first, into a private place
			clear := "snapshot.db"
			cmds, read = append(cmds, fmt.Sprintf("age -d -i IDENTITY_FILE -o %s %s   # the clear text holds every Secret: keep it private, remove it after", clear, read)), clear
		}
		boot.Talosctl = append(cmds, fmt.Sprintf("talosctl bootstrap --nodes %s --endpoints %s --recover-from=%s", first.Address, first.Address, read))
		switch {
		case v == etcdOurs && isURL(r.Path):
			// the sidecar names members, not their IDs: whether the etcd
			// that runs is the snapshot's own cluster is unknown here
			boot.Status, boot.Reason = plan.StatusBlocked, fmt.Sprintf("unknown: %s, but plan read only the snapshot's sidecar, which does not hold etcd's member IDs, so it cannot tell a cluster restored before from the one the snapshot was taken of; devata bootstrap --recover-from reads the snapshot and decides (it refuses while the snapshot's cluster runs)", why)
			decided = true
		case v == etcdOurs && len(in.recoverRunning) > 0:
			boot.Status, boot.Reason = plan.StatusBlocked, fmt.Sprintf("refused: %s; etcd still runs the cluster the snapshot was taken of (%s keep its member IDs): recovering now would make a second cluster", why, strings.Join(in.recoverRunning, ", "))
			decided = true
		case v == etcdOurs:
			boot.Status, boot.Reason, boot.Talosctl = plan.StatusDone, why+" with new member IDs, restored from a snapshot: nothing to recover", []string{check}
			decided = true
		}
	}
	switch {
	case decided:
	case v == etcdNone:
		boot.Status, boot.Reason = plan.StatusPending, why
	case v == etcdOurs:
		boot.Status, boot.Reason, boot.Talosctl = plan.StatusDone, why+": nothing to bootstrap", []string{check}
	default:
		boot.Status, boot.Reason = plan.StatusBlocked, "refused: "+why
	}

	wait = plan.Step{Kind: StepWaitEtcd, Summary: "wait until etcd is healthy and its members are exactly the control planes (" + strings.Join(cpNames(inv), " ") + ")",
		Talosctl: []string{fmt.Sprintf("talosctl --nodes %s etcd members", first.Address), fmt.Sprintf("talosctl --nodes %s etcd status", strings.Join(cpAddrs, ","))}}
	switch {
	case v == etcdOurs && in.etcdHealthy == nil:
		wait.Status, wait.Reason = plan.StatusDone, "etcd healthy with the configured members"
		wait.Evidence = []plan.Evidence{{Rung: etcdEvidenceRung, Observed: "every control plane reports members [" + strings.Join(sortedCPNames(inv), " ") + "] and one leader"}}
	case v == etcdOurs:
		wait.Status, wait.Reason = plan.StatusPending, "etcd not healthy yet: "+in.etcdHealthy.Error()
	default:
		wait.Status, wait.Reason = plan.StatusPending, "etcd is not running yet"
	}
	return boot, wait
}

// planKubeconfig is the kubeconfig action: fetch it from first, the bootstrap node.
func planKubeconfig(in planInput, first *inventory.Machine) plan.Step {
	kc := in.kubeconfig
	kpath := rel(in.inv, kc.Path)
	ka := plan.Step{Kind: StepKubeconfig, Machine: first.Name, Summary: "fetch the admin kubeconfig from " + first.Name + " and write it to " + kpath + " (mode 0600)",
		Talosctl: []string{fmt.Sprintf("talosctl kubeconfig --nodes %s --endpoints %s %s", first.Address, first.Address, kpath)}}
	switch {
	case !kc.Exists:
		ka.Status, ka.Reason = plan.StatusPending, kpath+" does not exist"
	case kc.Ours:
		ka.Status, ka.Reason = plan.StatusDone, kpath+" exists for this cluster; kept"
		ka.Evidence = []plan.Evidence{{Rung: drift.RungDeclaration, Observed: kc.Why}}
	default:
		ka.Status, ka.Reason = plan.StatusBlocked, kpath+" exists and is not this cluster's ("+kc.Why+"): it is never replaced without --force"
	}
	return ka
}

// planWaitNodes is the wait-nodes action, read from the Nodes the plan glanced at.
func planWaitNodes(in planInput) plan.Step {
	inv := in.inv
	kpath := rel(inv, in.kubeconfig.Path)
	na := plan.Step{Kind: StepWaitNodes, Summary: "wait until every machine's Node is registered and Ready",
		Talosctl: []string{"kubectl --kubeconfig " + kpath + " get nodes -o wide"}}
	switch {
	case in.skipNodes:
		na.Status, na.Reason = plan.StatusDone, "skipped (--skip-nodes)"
	case in.nodes == nil:
		na.Status, na.Reason = plan.StatusPending, "Kubernetes not reachable yet (no kubeconfig)"
	case in.nodes.Err != nil:
		na.Status, na.Reason = plan.StatusPending, "Nodes not observed: "+in.nodes.Err.Error()
	default:
		var missing []string
		noCNI := 0
		for i := range inv.Machines {
			n, ok := in.nodes.ByName[inv.Machines[i].Name]
			switch {
			case ok && !n.Ready && inv.Cluster.Network.CNI == "none" && talosapi.NetworkNotReady(n.ReadyReason):
				noCNI++
			case !ok || !n.Ready:
				missing = append(missing, inv.Machines[i].Name)
			}
		}
		switch {
		case len(missing) > 0:
			na.Status, na.Reason = plan.StatusPending, "not registered or not Ready: "+strings.Join(missing, ", ")
		case noCNI > 0 && in.ciliumAgent != "":
			na.Status, na.Reason = plan.StatusPending, fmt.Sprintf("all %d Nodes registered; %d NotReady until Cilium's agent (DaemonSet %s) runs on them", len(inv.Machines), noCNI, in.ciliumAgent)
		case noCNI > 0:
			na.Status, na.Reason = plan.StatusDone, fmt.Sprintf("all %d Nodes registered; %d NotReady until a CNI runs (cluster.network.cni: none): install Cilium next", len(inv.Machines), noCNI)
		default:
			na.Status, na.Reason = plan.StatusDone, fmt.Sprintf("all %d Nodes Ready", len(inv.Machines))
		}
		na.Evidence = []plan.Evidence{{Rung: drift.RungResources, Observed: fmt.Sprintf("%d Nodes listed", len(in.nodes.ByName))}}
	}
	return na
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
