package plan

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Plan output formats (devata plan -o).
const (
	FormatText     = "text"
	FormatMarkdown = "markdown"
	FormatJSON     = "json"
)

// Formats lists the output formats, in the order help names them.
func Formats() []string { return []string{FormatText, FormatMarkdown, FormatJSON} }

// Write renders a plan as text, markdown (a runbook) or JSON. simulated
// marks plans made against devata's simulated fleet.
func Write(w io.Writer, format string, p *Plan, simulated bool) error {
	switch format {
	case FormatText:
		return writeText(w, p, simulated)
	case FormatMarkdown:
		return writeMarkdown(w, p, simulated)
	case FormatJSON:
		v := struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Simulated  bool   `json:"simulated,omitempty"`
			*Plan
			Pending int `json:"pending"`
			Blocked int `json:"blocked"`
		}{"devata.dev/v1alpha1", "Plan", simulated, p, len(p.Pending()), len(p.Blocked())}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	return fmt.Errorf("unknown plan format %q: use text, markdown or json", format)
}

func writeText(w io.Writer, p *Plan, simulated bool) error {
	var b strings.Builder
	if simulated {
		b.WriteString("SIMULATED: the machines are devata's simulated fleet.\n")
	}
	fmt.Fprintf(&b, "plan for cluster %s (%s): %d pending, %d blocked, %d steps\n", p.Cluster, p.Inventory, len(p.Pending()), len(p.Blocked()), len(p.Steps))
	if line := p.Provenance.Line(p.Inventory); line != "" {
		b.WriteString(line + "\n")
	}
	if p.Contract.Reason != "" {
		fmt.Fprintf(&b, "contract: %s\n", p.Contract)
	}
	for _, n := range p.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	if r := p.RecoverFrom; r != nil {
		fmt.Fprintf(&b, "recover from %s\n", r.Line())
	}
	writeSteps(&b, p.Steps, false)
	if len(p.Patches) > 0 {
		b.WriteString("patch order (cluster → role → groups in the inventory's order → machine; later wins):\n")
		for _, mp := range p.Patches {
			fmt.Fprintf(&b, "     %s: %s\n", strings.Join(mp.Machines, ", "), mp)
		}
	}
	for _, o := range p.RolloutOrders {
		fmt.Fprintf(&b, "rollout order of group %s (each waits until those before it of its role are done; control planes first): %s\n", o.Group, o)
	}
	for _, o := range p.Orphans {
		fmt.Fprintf(&b, "orphan: %s: no machine of the inventory has it; nothing here touches it; take it out with %s\n", o.What, o.Remove)
	}
	writeKubernetesText(&b, p.Kubernetes)
	if len(p.NodeKeys) > 0 || p.NodeKeysProblem != "" {
		b.WriteString("node labels and taints (viaKubernetes), by devata apply through the Kubernetes API after its rollout:\n")
		writeNodeKeysText(&b, "     ", p.NodeKeys, p.NodeKeysProblem, true)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteKubernetes writes a Kubernetes version change as the text plan
// does: devata plan's section and apply's and upgrade's dry runs are one
// writer.
func WriteKubernetes(w io.Writer, k *KubernetesChange) error {
	var b strings.Builder
	writeKubernetesText(&b, k)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeKubernetesText(b *strings.Builder, k *KubernetesChange) {
	if k == nil {
		return
	}
	fmt.Fprintf(b, "kubernetes: %s → %s by devata apply, one component at a time (every kube-apiserver first, then kube-controller-manager, kube-scheduler, the kubelets)\n", k.From, k.To)
	if k.Refused != "" {
		fmt.Fprintf(b, "     refused: %s\n", k.Refused)
	}
	if len(k.Before) > 0 {
		b.WriteString("     before any component moves:\n")
		for _, s := range foldSteps(k.Before) {
			writeStepText(b, "   -", s)
		}
	}
	for i, st := range k.Steps {
		fmt.Fprintf(b, "     %d. %s%s\n", i+1, st, st.waits(k.To))
	}
	fmt.Fprintf(b, "     next: %s\n", k.Next)
	for _, c := range k.Talosctl {
		fmt.Fprintf(b, "     by hand: %s\n", c)
	}
	if len(k.Manifests) > 0 {
		b.WriteString("     after the last step, the bootstrap manifests (CoreDNS, kube-proxy, …) server-side applied, as talosctl upgrade-k8s does; a dry run now:\n")
		for _, m := range k.Manifests {
			fmt.Fprintf(b, "        %s\n", m)
		}
	}
}

// foldSteps folds steps that differ only in their machine (and so in
// their by-hand commands) into one, its machine the folded list: a
// thousand workers pulling the same kubelet image read as one step.
func foldSteps(steps []Step) []Step {
	var out []Step
	var names [][]string
	index := map[string]int{}
	for _, s := range steps {
		key := strings.Join([]string{string(s.Kind), string(s.Status), s.Summary, s.Reason, s.By}, "\x00")
		if i, ok := index[key]; ok && s.Machine != "" && len(s.Evidence) == 0 {
			names[i] = append(names[i], s.Machine)
			continue
		}
		index[key] = len(out)
		out = append(out, s)
		names = append(names, []string{s.Machine})
	}
	for i := range out {
		if len(names[i]) > 1 {
			out[i].Machine = ShortList(names[i])
		}
	}
	return out
}

// WriteSteps writes steps as the text plan numbers them, each a row
// (status, title, summary, who takes it) and under it why, the evidence,
// the drain and the changes; with byHand, also a pending step's commands
// that do it by hand (devata remove's plan, which has no runbook).
func WriteSteps(w io.Writer, steps []Step, byHand bool) error {
	var b strings.Builder
	writeSteps(&b, steps, byHand)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeSteps(b *strings.Builder, steps []Step, byHand bool) {
	for i, s := range steps {
		writeStepText(b, fmt.Sprintf("%3d.", i+1), s)
		if byHand && s.Status == StatusPending {
			for _, c := range s.Talosctl {
				fmt.Fprintf(b, "     %-8s %-24s by hand: %s\n", "", "", c)
			}
		}
	}
}

// writeStepText is one step of the text plan: label (its number), status,
// title, summary and who takes it, then why, evidence, notes, warnings,
// drain and changes in a column under the summary.
func writeStepText(b *strings.Builder, label string, s Step) {
	reboot := ""
	if s.Reboots {
		reboot = " [REBOOTS]"
	}
	fmt.Fprintf(b, "%s %-8s %-24s %s%s (by devata %s)\n", label, s.Status, s.Title(), s.Summary, reboot, s.By)
	fmt.Fprintf(b, "     %-8s %-24s why: %s\n", "", "", s.Reason)
	for _, e := range s.Evidence {
		fmt.Fprintf(b, "     %-8s %-24s evidence [%s]: %s\n", "", "", e.Rung, e.Observed)
	}
	for _, n := range s.Notes {
		fmt.Fprintf(b, "     %-8s %-24s %s\n", "", "", n)
	}
	for _, warn := range s.Warnings {
		fmt.Fprintf(b, "     %-8s %-24s warning: %s\n", "", "", warn)
	}
	if s.Drain != "" {
		fmt.Fprintf(b, "     %-8s %-24s %s\n", "", "", s.Drain)
	}
	if len(s.Changes) > 0 {
		fmt.Fprintf(b, "     %-8s %-24s changes:\n", "", "")
		for _, c := range s.Changes {
			fmt.Fprintf(b, "     %-8s %-24s   %s\n", "", "", c)
		}
	}
}

func writeMarkdown(w io.Writer, p *Plan, simulated bool) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Runbook: build cluster %s\n\n", p.Cluster)
	fmt.Fprintf(&b, "Made by `devata plan -o markdown` from `%s` and what the machines reported. ", p.Inventory)
	b.WriteString("`devata bootstrap` takes every pending step below, in this order, and stops at the first failure; ")
	b.WriteString("rerunning it continues from what the machines report. To do it by hand, run each step's commands. ")
	b.WriteString("Addresses are the inventory's; `rendered/` is what `devata gen config --dir rendered/` writes, and `TALOSCONFIG` points at its talosconfig.\n\n")
	if simulated {
		b.WriteString("> SIMULATED: the machines observed are devata's simulated fleet, not real machines.\n\n")
	}
	if line := p.Provenance.Line(p.Inventory); line != "" {
		fmt.Fprintf(&b, "Made from %s.\n\n", strings.Replace(line, "inventory: ", "", 1))
	}
	fmt.Fprintf(&b, "Status: %d pending, %d blocked, %d steps.\n\n", len(p.Pending()), len(p.Blocked()), len(p.Steps))
	if p.Contract.Reason != "" {
		fmt.Fprintf(&b, "- Config contract: %s\n", p.Contract)
	}
	for _, n := range p.Notes {
		fmt.Fprintf(&b, "- Note: %s\n", n)
	}
	if len(p.Notes) > 0 || p.Contract.Reason != "" {
		b.WriteString("\n")
	}
	if r := p.RecoverFrom; r != nil {
		writeRecoverSource(&b, r)
	}
	for i, s := range p.Steps {
		writeStepMarkdown(&b, fmt.Sprintf("## %d.", i+1), s)
	}
	if len(p.Patches) > 0 {
		b.WriteString("## Patch order\n\n")
		b.WriteString("Each machine's config is the generated one with these patches applied in this order (a later one wins): the cluster's, its role's, its groups' in the inventory's order, its own.\n\n")
		for _, mp := range p.Patches {
			fmt.Fprintf(&b, "- %s: %s\n", strings.Join(mp.Machines, ", "), mp)
		}
		b.WriteString("\n")
	}
	if len(p.RolloutOrders) > 0 {
		b.WriteString("## Rollout order\n\n")
		b.WriteString("`devata apply`, `upgrade` and `reconcile` change these groups' machines in this order: each starts only once those before it of its role are done (converged, failed or held); control planes still go first.\n\n")
		for _, o := range p.RolloutOrders {
			fmt.Fprintf(&b, "- group %s: %s\n", o.Group, o)
		}
		b.WriteString("\n")
	}
	if len(p.Orphans) > 0 {
		b.WriteString("## Orphans\n\n")
		b.WriteString("No machine of the inventory has these; bootstrap and apply never touch them. ")
		b.WriteString("`devata remove NAME` drains each, takes it out of etcd under the quorum rule, resets it and deletes its Node.\n\n")
		for _, o := range p.Orphans {
			fmt.Fprintf(&b, "- %s: `%s`\n", o.What, o.Remove)
		}
		b.WriteString("\n")
	}
	if k := p.Kubernetes; k != nil {
		writeKubernetesMarkdown(&b, k)
	}
	writeNodeKeysMarkdown(&b, p.NodeKeys, p.NodeKeysProblem)
	_, err := io.WriteString(w, strings.TrimRight(b.String(), "\n")+"\n")
	return err
}

// writeStepMarkdown is one step of the runbook under a heading that
// starts with heading ("## 3."): what it does, who takes it, why, the
// evidence, and the commands that do it by hand.
func writeStepMarkdown(b *strings.Builder, heading string, s Step) {
	fmt.Fprintf(b, "%s %s — %s\n\n", heading, s.Title(), s.Status)
	fmt.Fprintf(b, "%s.\n\n", capitalize(s.Summary))
	fmt.Fprintf(b, "- Taken by: `devata %s`\n", s.By)
	fmt.Fprintf(b, "- Why: %s\n", s.Reason)
	for _, e := range s.Evidence {
		fmt.Fprintf(b, "- Evidence (%s): %s\n", e.Rung, e.Observed)
	}
	if s.Reboots {
		b.WriteString("- **Reboots the running machine.**\n")
	}
	for _, n := range s.Notes {
		fmt.Fprintf(b, "- %s.\n", capitalize(n))
	}
	for _, warn := range s.Warnings {
		fmt.Fprintf(b, "- Warning: %s.\n", warn)
	}
	if s.Drain != "" {
		fmt.Fprintf(b, "- %s.\n", capitalize(s.Drain))
	}
	if len(s.Changes) > 0 {
		// A fence, not code spans: a changed value may hold backticks.
		fence := codeFence(s.Changes)
		b.WriteString("- Changes by YAML path (applied → desired):\n\n  " + fence + "text\n")
		for _, c := range s.Changes {
			b.WriteString("  " + c + "\n")
		}
		b.WriteString("  " + fence + "\n")
	}
	if len(s.Talosctl) > 0 {
		b.WriteString("\n```sh\n")
		for _, c := range s.Talosctl {
			b.WriteString(c + "\n")
		}
		b.WriteString("```\n")
	}
	b.WriteString("\n")
}

// writeKubernetesMarkdown is the runbook's section on a Kubernetes version change.
func writeKubernetesMarkdown(b *strings.Builder, k *KubernetesChange) {
	fmt.Fprintf(b, "## Kubernetes %s → %s\n\n", k.From, k.To)
	b.WriteString("`devata apply` moves one component at a time, in the order `talosctl upgrade-k8s` moves them: ")
	b.WriteString("kube-apiserver on each control plane, then kube-controller-manager, kube-scheduler, then the kubelets (control planes first). ")
	b.WriteString("After each it waits for the static pod to run the new image, Ready (or the Node to report the new kubelet), and for etcd to be healthy.\n\n")
	if k.Refused != "" {
		fmt.Fprintf(b, "**Refused:** %s\n\n", k.Refused)
	}
	for i, s := range k.Before {
		writeStepMarkdown(b, fmt.Sprintf("### Before any component moves, %d.", i+1), s)
	}
	for i, st := range k.Steps {
		fmt.Fprintf(b, "%d. %s\n", i+1, st)
	}
	if len(k.Steps) > 0 {
		b.WriteString("\n")
	}
	if len(k.Manifests) > 0 {
		b.WriteString("Then the bootstrap manifests (CoreDNS, kube-proxy, …) are server-side applied with field manager `talos`, as `talosctl upgrade-k8s` does; a server-side dry run now:\n\n")
		for _, m := range k.Manifests {
			fmt.Fprintf(b, "- %s\n", m)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "Next: %s.\n\n", k.Next)
	if len(k.Talosctl) > 0 {
		b.WriteString("By hand:\n\n```sh\n")
		for _, c := range k.Talosctl {
			b.WriteString(c + "\n")
		}
		b.WriteString("```\n\n")
	}
}

// writeRecoverSource is the markdown runbook's section on the snapshot.
func writeRecoverSource(b *strings.Builder, r *RecoverSource) {
	b.WriteString("## The snapshot\n\n")
	fmt.Fprintf(b, "- Object: `%s`\n", r.URL)
	fmt.Fprintf(b, "- Cluster: %s; taken %s\n", r.Cluster, r.Time.UTC().Format(time.RFC3339))
	fmt.Fprintf(b, "- etcd revision: %s; members: %s\n", r.revision(), strings.Join(r.Members, ", "))
	fmt.Fprintf(b, "- Size: %d bytes; sha256 `%s`\n", r.Size, r.SHA256)
	fmt.Fprintf(b, "- Last proof of restore: %s\n\n", r.Verified.text())
	b.WriteString("Only its sidecar was read. `devata bootstrap --recover-from` fetches the snapshot into a private temporary directory, ")
	b.WriteString("checks its size and sha256 against the sidecar and its members against the inventory before any machine is asked, and removes the copy afterwards.\n\n")
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// codeFence is a run of backticks longer than any in lines (three at
// least), so that no line can close the fenced block early.
func codeFence(lines []string) string {
	longest := 0
	for _, l := range lines {
		run := 0
		for _, r := range l {
			if r == '`' {
				run++
				longest = max(longest, run)
			} else {
				run = 0
			}
		}
	}
	return strings.Repeat("`", max(3, longest+1))
}
