package plan

import (
	"fmt"
	"io"
	"strings"
)

// NodeKeys is what devata apply sets (or would) on one machine's Node
// through the Kubernetes API: the inventory's viaKubernetes labels and
// taints (reconcile NodeWriter), which go to no Talos config. Names and
// values only: they are labels and taints, not secrets.
type NodeKeys struct {
	Machine string `json:"machine"`
	// Labels and Taints are the changes of each kind.
	Labels NodeKeyChanges `json:"labels,omitzero"`
	Taints NodeKeyChanges `json:"taints,omitzero"`
	// Adopted says that only devata's annotations change, nothing visible:
	// it takes ownership of keys the Node already carries with the declared
	// value (or forgets dropped ones no longer there).
	Adopted bool `json:"adopted,omitempty"`
	// Held is the reason of the machine's hold, which keeps the change
	// from being written.
	Held string `json:"held,omitempty"`
	// Pending says that the machine declares labels or taints but has no
	// Node yet: the next apply or the loop sets them.
	Pending bool `json:"pending,omitempty"`
	// Error is why the Node could not be read or written.
	Error string `json:"error,omitempty"`
}

// NodeKeyChanges are the labels or the taints of one Node that change.
type NodeKeyChanges struct {
	// Set are those added or given another value, as kubectl takes them:
	// key=value (key alone when the value is empty) for a label,
	// key=value:Effect (key:Effect) for a taint.
	Set []string `json:"set,omitempty"`
	// TakenOver are the keys among them someone else had set to another
	// value: devata owns them now, as the inventory declares them.
	TakenOver []string `json:"takenOver,omitempty"`
	// Removed are the keys devata set that the inventory no longer declares.
	Removed []string `json:"removed,omitempty"`
}

// Changed says that the Node is (or would be) written.
func (k NodeKeys) Changed() bool {
	return len(k.Labels.Set)+len(k.Labels.Removed)+len(k.Taints.Set)+len(k.Taints.Removed) > 0 || k.Adopted
}

// Lines are the machine's outcome for people, one line per kind of
// change: what was set (would be, when would), what a hold keeps, what
// waits for its Node, what failed. apply, the loop and the text and
// markdown plans print these lines.
func (k NodeKeys) Lines(would bool) []string {
	switch {
	case k.Error != "":
		return []string{fmt.Sprintf("%s: Node labels and taints not set through the Kubernetes API: %s", k.Machine, k.Error)}
	case k.Pending:
		return []string{k.Machine + ": no Node registered yet: its viaKubernetes labels and taints are pending (the next devata apply, or the reconcile loop, sets them)"}
	case k.Held != "":
		var parts []string
		for _, l := range k.changeLines(true) {
			parts = append(parts, strings.TrimPrefix(l, k.Machine+": Node "))
		}
		return []string{fmt.Sprintf("%s: held (%s): its Node's viaKubernetes labels and taints are left alone (%s)", k.Machine, k.Held, strings.Join(parts, "; "))}
	}
	return k.changeLines(would)
}

func (k NodeKeys) changeLines(would bool) []string {
	verb := func(done string) string {
		if would {
			return "would be " + done
		}
		return done
	}
	var out []string
	for _, c := range []struct {
		kind string
		NodeKeyChanges
	}{{"label", k.Labels}, {"taint", k.Taints}} {
		if len(c.Set) > 0 {
			out = append(out, fmt.Sprintf("%s: Node %ss %s %s through the Kubernetes API", k.Machine, c.kind, strings.Join(c.Set, ", "), verb("set")))
		}
		if len(c.TakenOver) > 0 {
			out = append(out, fmt.Sprintf("%s: Node %ss %s had another value, set by someone else: %s, as the inventory's viaKubernetes declares them", k.Machine, c.kind, strings.Join(c.TakenOver, ", "), verb("taken over")))
		}
		if len(c.Removed) > 0 {
			out = append(out, fmt.Sprintf("%s: Node %ss %s %s: devata set them and the inventory no longer declares them", k.Machine, c.kind, strings.Join(c.Removed, ", "), verb("removed")))
		}
	}
	if len(out) == 0 && k.Adopted {
		out = append(out, fmt.Sprintf("%s: Node annotations devata.dev/owned-labels and owned-taints %s: the Node already carries the declared labels and taints (and no longer dropped ones)", k.Machine, verb("updated")))
	}
	return out
}

// Kubectl are the commands that make the same change by hand.
func (k NodeKeys) Kubectl() []string {
	var out []string
	add := func(verb string, args []string, suffix string) {
		if len(args) > 0 {
			out = append(out, "kubectl "+verb+" node "+k.Machine+" "+strings.Join(args, " ")+suffix)
		}
	}
	removed := func(keys []string) []string {
		out := make([]string, len(keys))
		for i, key := range keys {
			out[i] = key + "-" // a taint's every effect (kubectl taint KEY-)
		}
		return out
	}
	labels := make([]string, len(k.Labels.Set))
	for i, l := range k.Labels.Set {
		if !strings.Contains(l, "=") {
			l += "=" // kubectl label needs the = of an empty value
		}
		labels[i] = l
	}
	add("label", labels, " --overwrite")
	add("label", removed(k.Labels.Removed), "")
	add("taint", k.Taints.Set, " --overwrite")
	add("taint", removed(k.Taints.Removed), "")
	return out
}

// WriteNodeKeys writes the Node label and taint changes as apply prints
// them, a line each (would: a dry run), then problem, a line saying why
// none could be planned ("" when they were). The text plan writes the
// same lines under a heading.
func WriteNodeKeys(w io.Writer, nodes []NodeKeys, problem string, would bool) error {
	var b strings.Builder
	writeNodeKeysText(&b, "", nodes, problem, would)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeNodeKeysText(b *strings.Builder, indent string, nodes []NodeKeys, problem string, would bool) {
	for _, k := range nodes {
		for _, l := range k.Lines(would) {
			b.WriteString(indent + l + "\n")
		}
	}
	if problem != "" {
		b.WriteString(indent + problem + "\n")
	}
}

// writeNodeKeysMarkdown is the runbook's section on the Node labels and
// taints, with the kubectl commands that set them by hand.
func writeNodeKeysMarkdown(b *strings.Builder, nodes []NodeKeys, problem string) {
	if len(nodes) == 0 && problem == "" {
		return
	}
	b.WriteString("## Node labels and taints (viaKubernetes)\n\n")
	b.WriteString("`devata apply` sets these on the Nodes through the Kubernetes API after its rollout, and changes only the keys it set (the annotations `devata.dev/owned-labels` and `devata.dev/owned-taints`); nothing goes to Talos.\n\n")
	var cmds []string
	for _, k := range nodes {
		for _, l := range k.Lines(true) {
			fmt.Fprintf(b, "- %s\n", l)
		}
		if k.Error == "" && !k.Pending && k.Held == "" {
			cmds = append(cmds, k.Kubectl()...)
		}
	}
	if problem != "" {
		fmt.Fprintf(b, "- %s\n", problem)
	}
	b.WriteString("\n")
	if len(cmds) > 0 {
		fence := codeFence(cmds)
		b.WriteString("By hand (`devata apply` then adopts the keys it finds with their declared values):\n\n" + fence + "sh\n")
		for _, c := range cmds {
			b.WriteString(c + "\n")
		}
		b.WriteString(fence + "\n\n")
	}
}
