package plan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// The Node label and taint writes are in each of devata plan's outputs,
// from the same entries: a line per kind of change in the text, the same
// lines and the kubectl commands in the runbook, the entries in the JSON.
func TestPlanWritesNodeKeys(t *testing.T) {
	p := &Plan{Cluster: "homelab", Inventory: "inventory.yaml", NodeKeys: []NodeKeys{
		{Machine: "worker-1",
			Labels: NodeKeyChanges{Set: []string{"example.com/pool=gpu", "node-role.kubernetes.io/worker"}, TakenOver: []string{"example.com/pool"}, Removed: []string{"example.com/old"}},
			Taints: NodeKeyChanges{Set: []string{"example.com/dedicated=batch:NoSchedule"}, Removed: []string{"example.com/gone"}}},
		{Machine: "worker-2", Labels: NodeKeyChanges{Set: []string{"a=b"}}, Held: "disk swap"},
		{Machine: "worker-3", Pending: true},
	}}
	var text bytes.Buffer
	if err := Write(&text, FormatText, p, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"node labels and taints (viaKubernetes), by devata apply through the Kubernetes API after its rollout:\n",
		"     worker-1: Node labels example.com/pool=gpu, node-role.kubernetes.io/worker would be set through the Kubernetes API\n",
		"     worker-1: Node labels example.com/pool had another value, set by someone else: would be taken over, as the inventory's viaKubernetes declares them\n",
		"     worker-1: Node labels example.com/old would be removed: devata set them and the inventory no longer declares them\n",
		"     worker-1: Node taints example.com/dedicated=batch:NoSchedule would be set through the Kubernetes API\n",
		"     worker-1: Node taints example.com/gone would be removed",
		"     worker-2: held (disk swap): its Node's viaKubernetes labels and taints are left alone (labels a=b would be set through the Kubernetes API)\n",
		"     worker-3: no Node registered yet",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text plan lacks %q:\n%s", want, text.String())
		}
	}
	var md bytes.Buffer
	if err := Write(&md, FormatMarkdown, p, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## Node labels and taints (viaKubernetes)\n",
		"- worker-1: Node labels example.com/old would be removed",
		"kubectl label node worker-1 example.com/pool=gpu node-role.kubernetes.io/worker= --overwrite\n",
		"kubectl label node worker-1 example.com/old-\n",
		"kubectl taint node worker-1 example.com/dedicated=batch:NoSchedule --overwrite\n",
		"kubectl taint node worker-1 example.com/gone-\n",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("runbook lacks %q:\n%s", want, md.String())
		}
	}
	if strings.Contains(md.String(), "kubectl label node worker-2") {
		t.Errorf("runbook has by-hand commands for a held machine:\n%s", md.String())
	}
	var js bytes.Buffer
	if err := Write(&js, FormatJSON, p, false); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		NodeKeys []NodeKeys `json:"nodeKeys"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.NodeKeys) != 3 || doc.NodeKeys[0].Taints.Removed[0] != "example.com/gone" || doc.NodeKeys[1].Held != "disk swap" || !doc.NodeKeys[2].Pending {
		t.Errorf("JSON plan's nodeKeys: %+v\n%s", doc.NodeKeys, js.String())
	}
	// nothing declared, nothing said
	var none bytes.Buffer
	if err := Write(&none, FormatText, &Plan{Cluster: "homelab"}, false); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(none.String(), "viaKubernetes") {
		t.Errorf("a plan without Node keys mentions them:\n%s", none.String())
	}
}

// An adoption alone (only devata's annotations change) is said, not silent.
func TestNodeKeysAdoptedIsSaid(t *testing.T) {
	k := NodeKeys{Machine: "worker-1", Adopted: true}
	if l := k.Lines(true); len(l) != 1 || !strings.Contains(l[0], "worker-1: Node annotations devata.dev/owned-labels and owned-taints would be updated") {
		t.Errorf("adopted: %q", l)
	}
	k.Labels.Set = []string{"a=b"}
	if l := k.Lines(false); len(l) != 1 || strings.Contains(l[0], "annotations") {
		t.Errorf("adopted with a label set: %q", l)
	}
}

// apply prints, done, what the dry run says would be.
func TestWriteNodeKeysDone(t *testing.T) {
	var b bytes.Buffer
	nodes := []NodeKeys{{Machine: "worker-1", Labels: NodeKeyChanges{Removed: []string{"k"}}}, {Machine: "worker-2", Error: "forbidden"}}
	if err := WriteNodeKeys(&b, nodes, "no kubeconfig", false); err != nil {
		t.Fatal(err)
	}
	want := "worker-1: Node labels k removed: devata set them and the inventory no longer declares them\n" +
		"worker-2: Node labels and taints not set through the Kubernetes API: forbidden\n" +
		"no kubeconfig\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
