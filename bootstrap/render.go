package bootstrap

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Plan output formats (devata plan -o).
const (
	FormatText     = "text"
	FormatMarkdown = "markdown"
	FormatJSON     = "json"
)

// WritePlan renders a plan as text, markdown (a runbook) or JSON. simulated
// marks plans made against devata's simulated fleet.
func WritePlan(w io.Writer, format string, p *Plan, simulated bool) error {
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

func title(a Action) string {
	if a.Machine != "" {
		return a.Step + " " + a.Machine
	}
	return a.Step
}

func writeText(w io.Writer, p *Plan, simulated bool) error {
	var b strings.Builder
	if simulated {
		b.WriteString("SIMULATED: the machines are devata's simulated fleet.\n")
	}
	fmt.Fprintf(&b, "plan for cluster %s (%s): %d pending, %d blocked, %d steps\n", p.Cluster, p.Inventory, len(p.Pending()), len(p.Blocked()), len(p.Actions))
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
	for i, a := range p.Actions {
		reboot := ""
		if a.Reboots {
			reboot = " [REBOOTS]"
		}
		fmt.Fprintf(&b, "%3d. %-8s %-24s %s%s (by devata %s)\n", i+1, a.Status, title(a), a.Summary, reboot, a.By)
		fmt.Fprintf(&b, "     %-8s %-24s why: %s\n", "", "", a.Reason)
		for _, e := range a.Evidence {
			fmt.Fprintf(&b, "     %-8s %-24s evidence [%s]: %s\n", "", "", e.Rung, e.Observed)
		}
		if a.Drain != "" {
			fmt.Fprintf(&b, "     %-8s %-24s %s\n", "", "", a.Drain)
		}
		if len(a.Changes) > 0 {
			fmt.Fprintf(&b, "     %-8s %-24s changes:\n", "", "")
			for _, c := range a.Changes {
				fmt.Fprintf(&b, "     %-8s %-24s   %s\n", "", "", c)
			}
		}
	}
	if len(p.Patches) > 0 {
		b.WriteString("patch order (cluster → role → groups in the inventory's order → machine; later wins):\n")
		for _, mp := range p.Patches {
			fmt.Fprintf(&b, "     %s: %s\n", strings.Join(mp.Machines, ", "), mp)
		}
	}
	for _, o := range p.Orphans {
		fmt.Fprintf(&b, "orphan: %s: no machine of the inventory has it; nothing here touches it; take it out with %s\n", o.What, o.Remove)
	}
	if k := p.Kubernetes; k != nil {
		fmt.Fprintf(&b, "kubernetes: %s → %s by devata apply, one component at a time (every kube-apiserver first, then kube-controller-manager, kube-scheduler, the kubelets)\n", k.From, k.To)
		if k.Refused != "" {
			fmt.Fprintf(&b, "     refused: %s\n", k.Refused)
		}
		for i, st := range k.Steps {
			fmt.Fprintf(&b, "     %d. %s\n", i+1, st)
		}
		fmt.Fprintf(&b, "     next: %s\n", k.Next)
		for _, c := range k.Talosctl {
			fmt.Fprintf(&b, "     by hand: %s\n", c)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
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
	fmt.Fprintf(&b, "Status: %d pending, %d blocked, %d steps.\n\n", len(p.Pending()), len(p.Blocked()), len(p.Actions))
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
	for i, a := range p.Actions {
		fmt.Fprintf(&b, "## %d. %s — %s\n\n", i+1, title(a), a.Status)
		fmt.Fprintf(&b, "%s.\n\n", capitalize(a.Summary))
		fmt.Fprintf(&b, "- Taken by: `devata %s`\n", a.By)
		fmt.Fprintf(&b, "- Why: %s\n", a.Reason)
		for _, e := range a.Evidence {
			fmt.Fprintf(&b, "- Evidence (%s): %s\n", e.Rung, e.Observed)
		}
		if a.Reboots {
			b.WriteString("- **Reboots the running machine.**\n")
		}
		if a.Drain != "" {
			fmt.Fprintf(&b, "- %s.\n", capitalize(a.Drain))
		}
		if len(a.Changes) > 0 {
			// A fence, not code spans: a changed value may hold backticks.
			fence := codeFence(a.Changes)
			b.WriteString("- Changes by YAML path (applied → desired):\n\n  " + fence + "text\n")
			for _, c := range a.Changes {
				b.WriteString("  " + c + "\n")
			}
			b.WriteString("  " + fence + "\n")
		}
		if len(a.Talosctl) > 0 {
			b.WriteString("\n```sh\n")
			for _, c := range a.Talosctl {
				b.WriteString(c + "\n")
			}
			b.WriteString("```\n")
		}
		b.WriteString("\n")
	}
	if len(p.Patches) > 0 {
		b.WriteString("## Patch order\n\n")
		b.WriteString("Each machine's config is the generated one with these patches applied in this order (a later one wins): the cluster's, its role's, its groups' in the inventory's order, its own.\n\n")
		for _, mp := range p.Patches {
			fmt.Fprintf(&b, "- %s: %s\n", strings.Join(mp.Machines, ", "), mp)
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
		fmt.Fprintf(&b, "## Kubernetes %s → %s\n\n", k.From, k.To)
		b.WriteString("`devata apply` moves one component at a time, in the order `talosctl upgrade-k8s` moves them: ")
		b.WriteString("kube-apiserver on each control plane, then kube-controller-manager, kube-scheduler, then the kubelets (control planes first). ")
		b.WriteString("After each it waits for the static pod to run the new image, Ready (or the Node to report the new kubelet), and for etcd to be healthy.\n\n")
		if k.Refused != "" {
			fmt.Fprintf(&b, "**Refused:** %s\n\n", k.Refused)
		}
		for i, st := range k.Steps {
			fmt.Fprintf(&b, "%d. %s\n", i+1, st)
		}
		if len(k.Steps) > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "Next: %s.\n\n", k.Next)
		if len(k.Talosctl) > 0 {
			b.WriteString("By hand:\n\n```sh\n")
			for _, c := range k.Talosctl {
				b.WriteString(c + "\n")
			}
			b.WriteString("```\n\n")
		}
	}
	_, err := io.WriteString(w, strings.TrimRight(b.String(), "\n")+"\n")
	return err
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
