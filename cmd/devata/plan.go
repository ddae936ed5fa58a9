package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/bootstrap"
	"devata.dev/devata/inventory"
	"devata.dev/devata/membership"
	"devata.dev/devata/plan"
	"devata.dev/devata/reconcile"
	"devata.dev/devata/talosapi"
)

// planLong is the help text of plan.
const planLong = `plan observes every machine, as bootstrap would, and prints the ordered actions
that devata bootstrap (and, for configured machines whose config differs once
the cluster exists, devata apply) would take now: each with its status
(pending, done, blocked), its reason, the evidence behind it (the rung of the
evidence ladder and what was observed) and the talosctl commands that do the
same by hand. Nothing is written anywhere; configs are only dry-run.
It names the Talos config contract the configs are rendered for and why:
the oldest release a machine runs (each machine older than
cluster.talosVersion gets a config of its own release), else
cluster.talosVersion.

  -o text       for people
  -o markdown   a reconstruction runbook to follow by hand
  -o json       for tools

With --recover-from s3://BUCKET/PREFIX/latest (or …/NAME, or a file://
URL) plan names the exact snapshot from its sidecar alone (its URL without
credentials or query, time, etcd revision, members, size, sha256 and last
proof of restore) and, for the rebuild by hand, the commands that fetch and
check it before talosctl bootstrap --recover-from reads it. The sidecar
holds no etcd member IDs, so once etcd runs, whether it is the snapshot's
own cluster is left to bootstrap (the step is blocked, saying so).

With machine groups in the inventory, plan prints each machine's patch order:
the cluster's patches, its role's, its groups' in the inventory's order, its
own (machines with the same order on one line); and each group's
rollout.order: the machines it names, in order, then the group's others.

When cluster.kubernetesVersion differs from what the machines run, plan shows
the Kubernetes version change devata apply would make, one component at a
time, and what syncing the bootstrap manifests (CoreDNS, kube-proxy, …)
afterwards would change as they stand: a server-side dry run against the API
server, by object and image, never an object's contents.

Once the cluster answers, plan also lists orphans: etcd members and Nodes
that no machine of the inventory has (a machine deleted from it). Nothing
touches them; devata remove NAME takes each out.

With viaKubernetes labels or taints in the inventory (or ones devata set
still on a Node), plan shows per Node what devata apply would set, take over
or remove through the Kubernetes API (a dry run: nothing is written).

Exit 0 nothing to do, 1 actions pending, 2 error or a blocked action.`

func (a *app) newPlanCommand() *cobra.Command {
	var flags struct {
		sequenceFlags
		output string
	}
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "The ordered actions bootstrap and apply would take now, with reasons and evidence",
		Long:  planLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch flags.output {
			case plan.FormatText, plan.FormatMarkdown, plan.FormatJSON:
			default:
				return usageError(fmt.Errorf("unknown output %q: use text, markdown or json", flags.output))
			}
			opts, src, cleanup, err := a.sequenceOptions(cmd.Context(), flags.sequenceFlags)
			defer cleanup()
			if err != nil {
				return err
			}
			defer cleanup()
			opts.Out = a.streams.Err // warnings only
			seq := bootstrap.New(opts)
			doc, err := seq.Plan(cmd.Context())
			if err != nil {
				return exitWith(exitTrouble, err)
			}
			doc.Provenance = a.inventoryProvenance(cmd.Context(), a.settings.Inventory)
			doc.RecoverFrom = src
			var kube kubernetes.Interface
			if inv := seq.Inventory(); inv != nil {
				if kube, _, err = a.sessionKubeClients(inv); err != nil {
					kube = nil
				}
			}
			doc.Orphans = a.planOrphans(cmd.Context(), seq.Inventory(), seq.Dialer(), kube)
			doc.Kubernetes = a.planKubernetes(cmd.Context(), seq, doc, kube)
			doc.NodeKeys, doc.NodeKeysProblem = planNodeKeys(cmd.Context(), seq.Inventory(), kube, a.settings.Timeout)
			if inv := seq.Inventory(); inv != nil && len(inv.Groups) > 0 {
				doc.Patches = plan.PatchOrders(inv)
				doc.RolloutOrders = plan.RolloutOrders(inv)
			}
			if err := plan.Write(a.streams.Out, flags.output, doc, a.settings.Simulated); err != nil {
				return exitWith(exitTrouble, err)
			}
			if blocked := doc.Blocked(); len(blocked) > 0 {
				return exitWith(exitTrouble, fmt.Errorf("%d %s blocked: see the reasons above", len(blocked), plural(len(blocked), "step is", "steps are")))
			}
			if len(doc.Pending()) > 0 || slices.ContainsFunc(doc.NodeKeys, func(k plan.NodeKeys) bool { return k.Pending || k.Changed() && k.Held == "" }) {
				return exitWith(exitFailed, nil)
			}
			return nil
		},
	}
	flags.register(cmd, true)
	cmd.Flags().StringVarP(&flags.output, "output", "o", plan.FormatText, "plan format: text, markdown (a runbook) or json")
	return cmd
}

// planOrphans lists the cluster's etcd members and Nodes the inventory no
// longer has, through the inventory and dialer the plan already built. It
// is best effort: before the cluster exists (no control plane reporting
// etcd) there are none to list, and plan says nothing about them.
func (a *app) planOrphans(ctx context.Context, inv *inventory.Inventory, d *talosapi.Dialer, kube kubernetes.Interface) []plan.Orphan {
	if inv == nil || d == nil {
		return nil
	}
	found, err := membership.Orphans(ctx, inv, d, kube, a.settings.Timeout)
	if err != nil {
		a.log.Debug("orphans not fully observed", "error", err)
	}
	out := make([]plan.Orphan, 0, len(found))
	for _, o := range found {
		out = append(out, plan.Orphan{Name: o.Name, What: o.What(), Remove: "devata remove " + o.Name})
	}
	return out
}

// planKubernetes is the Kubernetes version change devata apply would make
// now, from its own plan (dry runs only: nothing is written); nil when no
// configured machine's config changes or none moves a version.
func (a *app) planKubernetes(ctx context.Context, seq *bootstrap.Sequence, doc *plan.Plan, kube kubernetes.Interface) *plan.KubernetesChange {
	if seq.Inventory() == nil || seq.Dialer() == nil || !slices.ContainsFunc(doc.Pending(), func(x plan.Step) bool { return x.Kind == bootstrap.StepApply }) {
		return nil
	}
	p := &reconcile.Planner{Inventory: seq.Inventory(), Desired: seq.Desired(), Dialer: seq.Dialer(), Mode: talosapi.ModeAuto,
		Concurrency: a.settings.Concurrency, Timeout: a.settings.Timeout, Kube: kube}
	rp, err := p.Plan(ctx, nil)
	if err != nil || rp.Kubernetes == nil {
		return nil
	}
	return rp.KubernetesChange(seq.Inventory())
}

// planNodeKeys are the Node writes devata apply would make for the
// inventory's viaKubernetes labels and taints (a dry run of its
// reconcile.NodeWriter: nothing is written), or why they could not be
// planned; none when nothing is declared or set. timeout bounds the
// reads: before the cluster exists its API does not answer.
func planNodeKeys(ctx context.Context, inv *inventory.Inventory, kube kubernetes.Interface, timeout time.Duration) ([]plan.NodeKeys, string) {
	if inv == nil {
		return nil, ""
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	machines := make([]*inventory.Machine, len(inv.Machines))
	for i := range inv.Machines {
		machines[i] = &inv.Machines[i]
	}
	res, err := reconcile.NodeWriter{Kube: kube, DryRun: true}.Run(ctx, machines)
	problem := ""
	if err != nil && len(res) == 0 {
		problem = "viaKubernetes labels and taints not planned: " + err.Error()
	}
	return reconcile.NodeKeysPlan(res), problem
}
