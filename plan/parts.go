package plan

import (
	"fmt"
	"strings"
	"time"

	"devata.dev/devata/inventory"
)

// Contract is the Talos config contract a plan's configs are rendered
// for: the oldest release a machine runs, as each answered (Version; a
// machine in maintenance mode the release it booted, talosapi
// detectMaintenance), or cluster.talosVersion when none runs an older one
// or none answered. A machine that runs an older release than
// cluster.talosVersion is sent a config of its own release's contract
// until it is upgraded (render Desired.For), so that Talos never refuses a
// document or field it does not know: a machine in maintenance mode parses
// its config with the release it booted, then installs the config's
// installer (cluster.talosVersion's) and is sent that release's config
// once it runs it (bootstrap applyMaintenance). bootstrap decides it
// (contractOf).
type Contract struct {
	// Talos is the release whose contract the oldest config follows,
	// "1.13"; Target is cluster.talosVersion.
	Talos  string `json:"talos"`
	Target string `json:"target"`
	// Reason says why, naming the machines that decided it.
	Reason string `json:"reason"`
	// Older are the machines that run an older release than Target, each
	// with the release it runs; their configs follow that release.
	Older []ContractMachine `json:"older,omitempty"`
}

// ContractMachine is a machine whose config follows an older release.
type ContractMachine struct {
	Machine string `json:"machine"`
	Runs    string `json:"runs"`
	Talos   string `json:"talos"`
	// Maintenance: the machine is in maintenance mode, Runs the release
	// it booted.
	Maintenance bool `json:"maintenance,omitempty"`
}

// String is the contract line of the text plan and the runbook.
func (c Contract) String() string {
	return fmt.Sprintf("configs rendered for the Talos %s config contract: %s", c.Talos, c.Reason)
}

// RecoverSource is the snapshot --recover-from names by URL
// (s3://bucket/prefix/latest or …/NAME), as its sidecar describes it: plan
// fetches only the sidecar, bootstrap the snapshot too. Set by the caller;
// nil for a local file.
type RecoverSource struct {
	// URL is the snapshot object's, without credentials or query.
	URL      string    `json:"url"`
	Cluster  string    `json:"cluster"`
	Time     time.Time `json:"time"`
	Revision int64     `json:"revision,omitempty"`
	Members  []string  `json:"members"`
	Size     int64     `json:"size"`
	SHA256   string    `json:"sha256"`
	// Verified is the last proof of restore recorded beside it (backup
	// verify); nil when none was ever made.
	Verified *RecoverProof `json:"verified"`
}

// RecoverProof is a sidecar's last proof of restore, as plan shows it.
type RecoverProof struct {
	Time        time.Time `json:"time"`
	Result      string    `json:"result"`
	EtcdVersion string    `json:"etcdVersion,omitempty"`
	Revision    int64     `json:"revision,omitempty"`
	Error       string    `json:"error,omitempty"`
}

// Line is the source in one line, for the text plan and bootstrap.
func (r *RecoverSource) Line() string {
	return fmt.Sprintf("%s: cluster %s, taken %s, etcd revision %s, members %s, %d bytes, sha256 %s; last proof of restore: %s",
		r.URL, r.Cluster, r.Time.UTC().Format(time.RFC3339), r.revision(), strings.Join(r.Members, " "), r.Size, r.SHA256, r.Verified.text())
}

func (r *RecoverSource) revision() string {
	if r.Revision > 0 {
		return fmt.Sprint(r.Revision)
	}
	return "unknown"
}

func (p *RecoverProof) text() string {
	if p == nil {
		return "never (devata backup verify proves one)"
	}
	s := fmt.Sprintf("%s %s", p.Result, p.Time.UTC().Format(time.RFC3339))
	if p.EtcdVersion != "" {
		s += " (etcd " + p.EtcdVersion + ")"
	}
	if p.Error != "" {
		s += ": " + p.Error
	}
	return s
}

// Orphan is one etcd member or Node the inventory no longer has.
type Orphan struct {
	Name string `json:"name"`
	// What it is: "etcd member cp-3 (ID …) and Node", "Node worker-9".
	What string `json:"what"`
	// Remove is the command that takes it out of the cluster.
	Remove string `json:"remove"`
}

// KubernetesChange is a Kubernetes version change, one component at a time
// in talosctl upgrade-k8s' order.
type KubernetesChange struct {
	// From is the lowest version a component runs; To is cluster.kubernetesVersion.
	From string `json:"from"`
	To   string `json:"to"`
	// Refused says why none of it goes ahead.
	Refused string `json:"refused,omitempty"`
	// Before are the steps taken before any component moves: on a minor
	// upgrade the check that no API the new version removes is still
	// requested, then each moving machine's pull of its new images.
	Before []Step           `json:"before,omitempty"`
	Steps  []KubernetesStep `json:"steps,omitempty"`
	// Manifests is what syncing the bootstrap manifests (CoreDNS,
	// kube-proxy, …) after the last step would change as they stand: a
	// server-side dry run, by object and image, never their contents.
	Manifests []string `json:"manifests,omitempty"`
	Next      string   `json:"next"`
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

// waits says what the rollout waits for after each machine's move of
// this component (to is the target version); "" when it is held.
func (s KubernetesStep) waits(to string) string {
	switch {
	case s.Held != "":
		return ""
	case s.Component == "kubelet":
		return "; after each, its Node Ready on kubelet " + to
	}
	return ", one at a time; after each, its static pod Ready on the new image and etcd healthy"
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
