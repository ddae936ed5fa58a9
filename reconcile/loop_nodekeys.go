package reconcile

import (
	"context"
	"errors"
	"slices"
	"strings"

	"devata.dev/devata/drift"
	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
)

// The loop keeps each owned machine's viaKubernetes labels and taints on
// its Node (nodeapi.go) with the smallest action there is: a write of the
// Node through the Kubernetes API, nothing sent to the machine. It
// disrupts nothing, so maintenance windows do not hold it; a hold does (a
// held machine is never changed). Every pass reads the Nodes once and
// writes only those that differ, each recorded in the audit log as the
// loop's other actions are (started, then its result).

// ActionNodeKeys is the audit log's action of a Node label and taint write.
const ActionNodeKeys = "node-labels-taints"

// syncNodeKeys writes the owned machines' viaKubernetes labels and taints
// where their Nodes differ, and says on res what it did (NodeKeys) or why it
// could not (NodeKeysErr).
func (l *Loop) syncNodeKeys(ctx context.Context, d *Desired, owned []*inventory.Machine, res *PassResult) {
	if ctx.Err() != nil || l.opts.ReportOnly {
		return
	}
	kube := l.opts.Changes.Kube
	plan, err := NodeWriter{Kube: kube, DryRun: true}.Run(ctx, owned)
	if errors.Is(err, ErrNoKubeconfig) {
		res.NodeKeysErr = "viaKubernetes labels and taints are not applied: " + err.Error()
		l.opts.Log.Warn(res.NodeKeysErr)
		return
	}
	if err != nil && len(plan) == 0 {
		l.nodeKeysFailed(res, err)
		return
	}
	res.NodeKeysSet = map[string]bool{}
	for _, w := range plan {
		switch {
		case w.Err != nil:
			l.nodeKeysFailed(res, w.Err)
		case w.Pending || w.Held != nil:
			res.NodeKeys = append(res.NodeKeys, w.Lines(true)...)
			l.opts.Log.Debug("Node labels and taints left", "machine", w.Machine, "why", strings.Join(w.Lines(true), "; "))
		case l.opts.DryRun:
			res.NodeKeys = append(res.NodeKeys, w.Lines(true)...)
			l.auditNodeKeys(d, w.Machine, w.Lines(true), ResultDryRun, nil)
		case l.opts.Leading != nil && !l.opts.Leading():
			return // no longer the leader: another instance writes
		default:
			l.writeNodeKeys(ctx, d, inventoryMachine(owned, w.Machine), res)
		}
	}
}

// writeNodeKeys writes one machine's Node, reading it again (the plan's
// read may be stale), between its audit records.
func (l *Loop) writeNodeKeys(ctx context.Context, d *Desired, m *inventory.Machine, res *PassResult) {
	l.auditNodeKeys(d, m.Name, nil, ResultStarted, nil)
	c, err := SetNodeKeys(ctx, l.opts.Changes.Kube, m.Name, nil, NodeKeysOf(m), false)
	if err != nil {
		l.auditNodeKeys(d, m.Name, nil, ResultFailed, err)
		l.nodeKeysFailed(res, err)
		return
	}
	lines := c.Lines(false)
	l.auditNodeKeys(d, m.Name, lines, ResultConverged, nil)
	res.NodeKeys = append(res.NodeKeys, lines...)
	res.NodeKeysSet[m.Name] = true
	for _, line := range lines {
		l.opts.Log.Info("Node labels and taints", "machine", m.Name, "change", line)
	}
}

func (l *Loop) auditNodeKeys(d *Desired, machine string, lines []string, result string, err error) {
	rec := AuditRecord{Machine: machine, Action: ActionNodeKeys, Reason: strings.Join(lines, "; "), Result: result, Error: errText(err),
		InventoryCommit: d.Provenance.Commit, InventoryDirty: d.Provenance.Dirty, InventorySHA256: d.Provenance.InventorySHA256}
	if aerr := l.opts.Audit.Record(rec); aerr != nil {
		l.opts.Log.Error("audit log", "error", aerr)
		l.opts.Metrics.errors.WithLabelValues(stageAudit).Inc()
	}
}

func (l *Loop) nodeKeysFailed(res *PassResult, err error) {
	msg := "setting Node labels and taints through the Kubernetes API: " + err.Error()
	if res.NodeKeysErr == "" {
		res.NodeKeysErr = msg
	} else {
		res.NodeKeysErr += "; " + err.Error()
	}
	l.opts.Metrics.errors.WithLabelValues(stageApply).Inc()
	l.opts.Log.Error("Node labels and taints", "error", err.Error())
}

func inventoryMachine(ms []*inventory.Machine, name string) *inventory.Machine {
	i := slices.IndexFunc(ms, func(m *inventory.Machine) bool { return m.Name == name })
	return ms[i]
}

// fixedByNodeKeys says that res, a kubelet result, drifted only in
// viaKubernetes labels and taints (missing, or set and no longer
// declared), which this pass wrote.
func (r *PassResult) fixedByNodeKeys(res drift.Result) bool {
	if res.Check != machines.CheckKubelet || !r.NodeKeysSet[res.Machine] {
		return false
	}
	for _, part := range strings.Split(res.Reason, "; ") {
		if !strings.HasPrefix(part, "Node lacks viaKubernetes ") && !strings.HasPrefix(part, "Node carries viaKubernetes ") {
			return false
		}
	}
	return true
}
